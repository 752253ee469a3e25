#!/usr/bin/env bash
# Session 15, call 7: main (1dffa9b) through scripts/device_gpu.sh: build, GPU tests (incl. the
# rising-scores test), benchmark, micro-benchmarks, demo, compute-sanitizer.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
cd devrun/s15/base && OUT="$OUT/main_gpu" DCPMLA_COMMIT="1dffa9b" timeout 420 bash scripts/device_gpu.sh > "$OUT/main_device_gpu.out" 2>&1
echo "main device_gpu rc $?" >> "$OUT/summary.txt"
cat "$OUT/main_gpu/summary.txt" >> "$OUT/summary.txt"
