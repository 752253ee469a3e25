#!/usr/bin/env bash
# Session 12 call 1 (one H200): new = the launch plan keeps a work item's thread blocks together
# (longest KV walk in 64-token tiles first, stable) instead of sorting blocks by exact visible KV;
# base = 453f055. seesaw_new / seesaw_old = session 11 call 10's seesaw kernel (every bf16 decode)
# on new / base. new is validated by scripts/device_gpu.sh; then whole benchmarks alternating
# (base, new), the FlashMLA table on the seesaw builds, and ncu DRAM bytes / L2 hit rate of
# (64, 4096, 128, 8) and the ragged L 4K H 128 mix on base and new.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CB=$(cat BASE)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
for v in base seesaw_new seesaw_old; do
  (cd $v && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/${v}_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/${v}_build.log" 2>&1; echo "$v build rc $?" >> "$R/summary.txt") &
done
(cd new && OUT="$R/new_gpu" DCPMLA_COMMIT="$C" timeout 400 bash scripts/device_gpu.sh > "$R/new_device_gpu.out" 2>&1; echo "new device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/new_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
log "builds done"
for rep in 1 2; do
  for v in base new; do
    c=$C; [ $v = base ] && c=$CB
    timeout 70 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$c" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
  for v in seesaw_old seesaw_new; do
    timeout 40 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
for v in base new; do
  for s in "flashmla_table 3" "ragged_mix 0"; do
    set -- $s
    timeout 60 ncu --clock-control none -k regex:decode --launch-skip 2 --launch-count 1 --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum $v/build-gpu/bench/gpu/dcpmla_gpu_bench --filter $1 --index $2 --reps 5 > "$R/ncu_${v}_$1_$2.txt" 2>&1
    log "ncu $v $s: $(grep -E 'duration|dram__bytes|hit_rate|sectors' "$R/ncu_${v}_$1_$2.txt" | awk '{printf "%s %s %s; ", $1, $2, $3}')"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
