#!/usr/bin/env bash
# Session 9 call 6 (one H200): main's head validated with scripts/device_gpu.sh (GPU tests,
# sanitizers, the whole benchmark, demo); then (1, 65536, 128, 1): the split swept by
# --kv-chunk-blocks, and the decode's and split merge's kernel times under ncu (caches and clocks
# left alone).
set -u
cd "$(dirname "$0")/s9/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat ../COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/gpu"
OUT="$R/gpu" DCPMLA_COMMIT=$C timeout 400 bash scripts/device_gpu.sh > "$R/device_gpu.out" 2>&1
log "device_gpu rc $?"
cat "$R/gpu/summary.txt" >> "$R/summary.txt"
B=build-gpu/bench/gpu/dcpmla_gpu_bench
for rep in 1 2; do
  for c in 0 8 12 16 24 32; do
    timeout 30 $B --filter flashmla_table --index 9 --kv-chunk-blocks $c --commit $C --out "$R/small_c${c}_r$rep.json" > "$R/small_c${c}_r$rep.txt" 2>&1
    log "(1, 65536, 128, 1) chunk $c r$rep: $(awk 'NR>2 {print $9, $10, $11}' "$R/small_c${c}_r$rep.txt")"
  done
done
for c in 0 8 32; do
  timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    -k regex:"decode_ws|split_merge" --launch-skip 20 --launch-count 6 $B --filter flashmla_table --index 9 --reps 30 --kv-chunk-blocks $c --out /tmp/x.json > "$R/ncu_c$c.txt" 2>&1
  log "ncu chunk $c rc $?: $(grep -E 'gpu__time_duration' "$R/ncu_c$c.txt" | awk '{print $3}' | tr '\n' ' ')"
done
bash ../../../scripts/pack_outputs.sh "$R"
