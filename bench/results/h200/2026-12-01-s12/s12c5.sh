#!/usr/bin/env bash
# Session 12 call 5 (one H200): FlashMLA's benchmark lays each request's pages out in order;
# ours permutes the block table. The FlashMLA table and the ragged mixes with and without
# --ordered-blocks, three rounds, alternating; ncu of the (128, 8192, 16, 1) decode both ways.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd new && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/build.log" 2>&1; echo "build rc $?" >> "$R/summary.txt")
B=new/build-gpu/bench/gpu/dcpmla_gpu_bench
for rep in 1 2 3; do
  for v in permuted ordered; do
    flag=""; [ $v = ordered ] && flag="--ordered-blocks"
    for g in flashmla_table ragged_mix; do
      timeout 60 $B $flag --filter $g --commit "$C" --out "$R/${v}_${g}_r$rep.json" > "$R/${v}_${g}_r$rep.txt" 2>&1
      log "$v $g r$rep rc $?"
    done
  done
done
for v in permuted ordered; do
  flag=""; [ $v = ordered ] && flag="--ordered-blocks"
  timeout 90 ncu --clock-control none -k regex:decode --launch-skip 3 --launch-count 1 --section SpeedOfLight --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct $B $flag --filter flashmla_table --index 4 --reps 5 > "$R/ncu_${v}_128x8192.txt" 2>&1
  log "ncu $v: $(grep -E 'Duration|dram__bytes|dram__throughput|DRAM Throughput|hit_rate' "$R/ncu_${v}_128x8192.txt" | awk '{printf "%s %s %s; ", $1, $2, $3}')"
done
bash ../../scripts/pack_outputs.sh "$R"
