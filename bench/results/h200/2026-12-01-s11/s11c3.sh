#!/usr/bin/env bash
# Session 11 call 3 (one H200): new = many-split merge in 4 parts per item, validated by
# scripts/device_gpu.sh; base = cc9770a (warp merge for < 16 splits, old block merge for more).
# The small batch alone 4x each, the whole benchmark twice each (alternating), and ncu kernel
# durations of the split shapes on both.
set -u
cd "$(dirname "$0")/s11" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CB=$(cat BASE)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/base_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/base_build.log" 2>&1; echo "base build rc $?" >> "$R/summary.txt") &
(cd new && OUT="$R/new_gpu" DCPMLA_COMMIT=$C timeout 420 bash scripts/device_gpu.sh > "$R/new_device_gpu.out" 2>&1; echo "new device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/new_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
for rep in 1 2; do
  for v in base new; do
    timeout 30 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --index 9 --out "$R/small_${v}_r$rep.json" > "$R/small_${v}_r$rep.txt" 2>&1
    log "small $v r$rep: $(awk 'NR>2 {print $8, $9}' "$R/small_${v}_r$rep.txt")"
  done
done
for rep in 1 2; do
  for v in base new; do
    c=$C; [ $v = base ] && c=$CB
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit $c --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
for v in base new; do
  for s in "flashmla_table 9" "ragged_mix 4" "ragged_mix 2" "flashmla_table 7" "kimi_k3_dcp8 2"; do
    set -- $s
    timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 20 --launch-count 6 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --filter $1 --index $2 --reps 10 > "$R/ncu_${v}_$1_$2.txt" 2>&1
    log "ncu $v $s: $(grep -E '^  void|duration' "$R/ncu_${v}_$1_$2.txt" | tail -4 | awk '/void/ {split($0,a,"("); n=a[1]} /duration/ {printf "%s %s %s; ", n, $2, $3}')"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
