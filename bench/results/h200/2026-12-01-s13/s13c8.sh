#!/usr/bin/env bash
# Session 13 call 8 (one H200): final validation of main (COMMIT): scripts/device_gpu.sh (build,
# GPU tests, benchmark, micro-benchmarks, demo, sanitizers), two more whole benchmark runs, and
# for the next session ncu per-instruction stall samples (source page, SASS) of the
# compute-bound (64, 4096, 128, 8) and of the fp8 (128, 8192, 16, 1) decode.
set -u
cd "$(dirname "$0")/s13" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd head && OUT="$R/head_gpu" DCPMLA_COMMIT="$C" timeout 400 bash scripts/device_gpu.sh > "$R/head_device_gpu.out" 2>&1; echo "head device_gpu rc $?" >> "$R/summary.txt")
cat "$R/head_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
B=head/build-gpu/bench/gpu/dcpmla_gpu_bench
for rep in 2 3; do
  timeout 60 $B --commit "$C" --out "$R/head_r$rep.json" > "$R/head_r$rep.txt" 2>&1
  log "head r$rep rc $?"
done
timeout 90 ncu --clock-control none -k regex:decode --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv $B --filter flashmla_table --index 3 --reps 5 > "$R/ncu_src_64x4096x128x8.csv" 2>&1
log "ncu compute-bound rc $?"
timeout 90 ncu --clock-control none -k regex:decode --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv $B --filter cache_formats --index 2 --reps 5 > "$R/ncu_src_fp8_128x8192x16.csv" 2>&1
log "ncu fp8 rc $?"
bash ../../scripts/pack_outputs.sh "$R"
