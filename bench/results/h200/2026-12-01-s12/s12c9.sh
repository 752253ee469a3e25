#!/usr/bin/env bash
# Session 12 call 9 (one H200): the session's final main, validated and benchmarked:
# scripts/device_gpu.sh (build, GPU tests, benchmark, micro-benchmarks, demo, sanitizers), then
# the whole benchmark twice more.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd head && OUT="$R/head_gpu" DCPMLA_COMMIT="$C" timeout 400 bash scripts/device_gpu.sh > "$R/head_device_gpu.out" 2>&1; echo "head device_gpu rc $?" >> "$R/summary.txt")
cat "$R/head_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
for rep in 1 2; do
  timeout 60 head/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$C" --date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --out "$R/head_r$rep.json" > "$R/head_r$rep.txt" 2>&1
  log "head r$rep rc $?"
done
bash ../../scripts/pack_outputs.sh "$R"
