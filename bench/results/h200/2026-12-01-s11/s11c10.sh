#!/usr/bin/env bash
# Session 11 call 10 (one H200): new = the seesaw kernel (v7; the warpgroup waiting for P issues both chunk sets of each refill) for bf16 decodes with bulk copies, validated by
# scripts/device_gpu.sh; base = HEAD (v3).
# The small batch alone 2x each and the whole benchmark twice each (alternating).
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
bash ../../scripts/pack_outputs.sh "$R"
