#!/usr/bin/env bash
# Session 10 call 8 (one H200): the final head validated by scripts/device_gpu.sh (GPU tests,
# sanitizers, the benchmarks with the load and MMA micro-benchmarks on their shared BenchCache,
# demo).
set -u
cd "$(dirname "$0")/s10/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat ../COMMIT)
mkdir -p "$R/gpu"
OUT="$R/gpu" DCPMLA_COMMIT=$C timeout 400 bash scripts/device_gpu.sh > "$R/device_gpu.out" 2>&1
echo "device_gpu rc $?" >> "$R/summary.txt"
cat "$R/gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
