#!/usr/bin/env bash
# A diagnostic build of dcpmla_gpu_bench on a GPU machine, into build-<kind>, and its run:
#   plan-stamps   DCPMLA_PLAN_STAMPS: thread 0 of the GPU planner's block reads the SM clock after
#                 every block-wide step; the device_planning group prints each step's kind and
#                 cycles beside the planner's times (per call and in a CUDA graph).
#   block-times   DCPMLA_BLOCK_TIMES: thread 0 of every sm90 decode block reads the global timer
#                 at its start, its query's landing, its first S, its last tile, the other
#                 warpgroups' finish and its end (the SM clock at first S and last tile); each shape
#                 prints the launch's span and where its blocks' time goes (start, start-up and its
#                 query part, walk, cycles a tile, end and its wait for the other warpgroups; the
#                 last block to end). Pass the shapes, e.g.
#                 --filter flashmla_table or --shape 64,4096,128,1; DCPMLA_DECODE_ROUNDS=1 in the
#                 environment times the round decode.
# Output under $OUT (default ./gpu-out): <kind>.txt, <kind>.json, build.log, summary.txt.
#
#   run (from the repository root, .devdeps copied along where the system lacks the build
#   dependencies): scripts/device_diagnostic.sh plan-stamps|block-times [dcpmla_gpu_bench options]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
kind=${1:-}
case $kind in
  plan-stamps) option=DCPMLA_PLAN_STAMPS default_args=(--filter device_planning) ;;
  block-times) option=DCPMLA_BLOCK_TIMES default_args=() ;;
  *) echo "usage: $0 plan-stamps|block-times [dcpmla_gpu_bench options]" >&2; exit 2 ;;
esac
shift
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
JOBS=$(nproc 2>/dev/null || echo 8)
log() { echo "== [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
# shellcheck source=scripts/device_deps.sh
source scripts/device_deps.sh
{ cmake -S . -B "build-$kind" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
    -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_NCCL=OFF "-D$option=ON" \
    ${prefix_arg[@]+"${prefix_arg[@]}"} &&
  cmake --build "build-$kind" -j "$JOBS" --target dcpmla_gpu_bench; } > "$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; log "FAIL: build"; exit 1; }
log "built"
timeout 300 "build-$kind/bench/gpu/dcpmla_gpu_bench" ${default_args[@]+"${default_args[@]}"} "$@" \
  --out "$OUT/$kind.json" > "$OUT/$kind.txt" 2>&1
rc=$?
cat "$OUT/$kind.txt"
log "$kind rc $rc"
exit $rc
