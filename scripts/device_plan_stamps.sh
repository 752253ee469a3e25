#!/usr/bin/env bash
# Where the GPU planner's time goes, on a GPU machine: builds dcpmla_gpu_bench with
# DCPMLA_PLAN_STAMPS (thread 0 of the planner's block reads the SM clock after every block-wide
# step) into build-stamps and runs its device_planning group, which prints each step's kind and
# cycles beside the planner's times (per call and in a CUDA graph). Output under $OUT
# (default ./gpu-out): plan_stamps.txt, plan_stamps.json, build.log.
#
#   run (from the repository root, .devdeps copied along where the system lacks the build
#   dependencies): scripts/device_plan_stamps.sh [extra dcpmla_gpu_bench options]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
JOBS=$(nproc 2>/dev/null || echo 8)
log() { echo "== [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
# shellcheck source=scripts/device_deps.sh
source scripts/device_deps.sh
{ cmake -S . -B build-stamps -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
    -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_NCCL=OFF -DDCPMLA_PLAN_STAMPS=ON \
    ${prefix_arg[@]+"${prefix_arg[@]}"} &&
  cmake --build build-stamps -j "$JOBS" --target dcpmla_gpu_bench; } > "$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; log "FAIL: build"; exit 1; }
log "built"
timeout 300 build-stamps/bench/gpu/dcpmla_gpu_bench --filter device_planning "$@" \
  --out "$OUT/plan_stamps.json" > "$OUT/plan_stamps.txt" 2>&1
rc=$?
cat "$OUT/plan_stamps.txt"
log "device_planning rc $rc"
exit $rc
