#!/usr/bin/env bash
# Session 13 call 1 (one H200): branch wip/seesaw-spread rebased on main (7669f13): session 11's
# seesaw with each refill's boxes issued by lane 0 of the warpgroup's 4 warps (DCPMLA_SEESAW 1),
# against v3 (main 5969931). GPU tests on the seesaw build (it serves every bf16 decode), then
# the whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/s13" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CS=$(cat COMMIT_SEESAW)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/base_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/base_build.log" 2>&1; echo "base build rc $?" >> "$R/summary.txt") &
(cd seesaw && OUT="$R/seesaw_gpu" DCPMLA_COMMIT="$CS" timeout 400 bash scripts/device_gpu.sh > "$R/seesaw_device_gpu.out" 2>&1; echo "seesaw device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/seesaw_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
log "builds done"
for rep in 1 2 3; do
  for v in base seesaw; do
    c=$C; [ $v = seesaw ] && c=$CS
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$c-$v" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
