#!/usr/bin/env bash
# Session 12 call 4 (one H200): rope = output warpgroup 2 copies each bulk tile's rope chunk right
# after its P.V is issued, so warpgroup 1 issues 4 boxes after its P.V instead of 5
# (DCPMLA_EARLY_ROPE 1); norope = the same tree with DCPMLA_EARLY_ROPE 0. rope is validated by
# scripts/device_gpu.sh; then the whole benchmark three times each, alternating; then, for the
# memory-bound question (does using 128 of 132 SMs cost bandwidth?), custom shapes with the
# same bytes on 128 and 132 thread blocks, three times each.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd norope && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/norope_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/norope_build.log" 2>&1; echo "norope build rc $?" >> "$R/summary.txt") &
(cd rope && OUT="$R/rope_gpu" DCPMLA_COMMIT="$C" timeout 400 bash scripts/device_gpu.sh > "$R/rope_device_gpu.out" 2>&1; echo "rope device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/rope_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
log "builds done"
for rep in 1 2 3; do
  for v in norope rope; do
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$C-$v" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
for rep in 1 2 3; do
  for sh in 128,8192,16,1 132,7936,16,1 120,8704,16,1 66,15872,16,1; do
    timeout 30 rope/build-gpu/bench/gpu/dcpmla_gpu_bench --shape $sh --out "$R/sm_${sh//,/_}_r$rep.json" > "$R/sm_${sh//,/_}_r$rep.txt" 2>&1
    log "shape $sh r$rep: $(awk 'NR>2 {print $8, $9, $11, $12}' "$R/sm_${sh//,/_}_r$rep.txt")"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
