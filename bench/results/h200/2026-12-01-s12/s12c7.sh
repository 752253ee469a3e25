#!/usr/bin/env bash
# Session 12 call 7 (one H200): fp8 = fp8 caches stage each tile's e4m3 bytes by bulk tensor
# copies (a second view of the cache as 16-bit elements, staged mbarriers) instead of the
# threads' cp.async, then widen as before; base = HEAD (565dfd2: the spread box issue for pages
# smaller than a box, not yet run). fp8 is validated by scripts/device_gpu.sh (which also
# validates HEAD's change, included); then the whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CB=$(cat BASE)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/base_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/base_build.log" 2>&1; echo "base build rc $?" >> "$R/summary.txt") &
(cd fp8 && OUT="$R/fp8_gpu" DCPMLA_COMMIT="$C" timeout 400 bash scripts/device_gpu.sh > "$R/fp8_device_gpu.out" 2>&1; echo "fp8 device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/fp8_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
log "builds done"
for rep in 1 2 3; do
  for v in base fp8; do
    c=$C; [ $v = base ] && c=$CB
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$c" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
