#!/usr/bin/env bash
# Session 10 call 2 (one H200): main validated by scripts/device_gpu.sh (GPU tests, sanitizers, the
# benchmarks with the new dcpmla_mma_bench, demo); then ncu's per-instruction stall sampling
# (SourceCounters) of one decode of (64, 4096, 128, 8) and of (1, 65536, 128, 1).
set -u
cd "$(dirname "$0")/s10/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat ../COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/gpu"
OUT="$R/gpu" DCPMLA_COMMIT=$C timeout 330 bash scripts/device_gpu.sh > "$R/device_gpu.out" 2>&1
log "device_gpu rc $?"
cat "$R/gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
B=build-gpu/bench/gpu/dcpmla_gpu_bench
for s in "q8 3" "small 9"; do
  set -- $s
  timeout 100 ncu --clock-control none --section SourceCounters --section WarpStateStats \
    -k regex:decode_ws --launch-skip 3 --launch-count 1 -o "$R/ncu_$1" \
    $B --filter flashmla_table --index $2 --reps 5 --out /tmp/x.json > "$R/ncu_$1.log" 2>&1
  log "ncu $1 rc $?"
  timeout 60 ncu --import "$R/ncu_$1.ncu-rep" --page source --csv --print-source sass > "$R/ncu_$1_sass.csv" 2> "$R/ncu_$1_sass.err"
  log "sass export $1 rc $? $(wc -c < "$R/ncu_$1_sass.csv")"
  timeout 60 ncu --import "$R/ncu_$1.ncu-rep" --page details --print-details all > "$R/ncu_$1_details.txt" 2>&1
done
bash ../../../scripts/pack_outputs.sh "$R"
