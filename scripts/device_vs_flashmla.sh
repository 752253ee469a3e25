#!/usr/bin/env bash
# dcpmla against FlashMLA in one run, on a machine with an sm_90 GPU, nvcc, CMake, ninja and
# PyTorch (no network needed): builds dcpmla_gpu_bench (Release, CUDA sm_90a) and, at the same
# time, FlashMLA's dense decode extension in FLASHMLA_DIR, then runs bench/gpu/vs_flashmla.py,
# which alternates the two on the same shapes and writes $OUT/vs_flashmla.json (default OUT:
# ./gpu-out; with each side's median SM clock and board power, nvidia-smi sampling every 20 ms),
# its table (vs_flashmla.txt), every round's timings (vs_flashmla_raw.json) and the build logs.
#
# FLASHMLA_DIR is a FlashMLA source tree (CUTLASS in csrc/cutlass) with a setup_dense.py at its
# top that builds the dense sm90 decode only; scripts/flashmla_source.sh makes one from git
# clones or mirrors of FlashMLA and CUTLASS in the ignored .flashmla/, to take along to the GPU
# machine. FLASHMLA_COMMIT is recorded with the results;
# so is DCPMLA_COMMIT (default: git describe --always --dirty). VS_FLASHMLA_ARGS adds options to
# vs_flashmla.py (e.g. "--rounds 2").
#
#   run: scripts/device_vs_flashmla.sh FLASHMLA_DIR [FLASHMLA_COMMIT]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [ $# -lt 1 ] || [ ! -f "$1/setup_dense.py" ]; then
  echo "usage: $0 FLASHMLA_DIR [FLASHMLA_COMMIT] (FLASHMLA_DIR/setup_dense.py must exist)" >&2
  exit 2
fi
command_line="scripts/device_vs_flashmla.sh $*"
fm=$(cd "$1" && pwd)
fm_commit=${2:-unknown}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5  # CMake 4 and the older config files of the deps
JOBS=$(nproc 2>/dev/null || echo 8)
COMMIT=${DCPMLA_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
START=$(date +%s)
log() { echo "== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi > "$OUT/env.txt" 2>&1
log "FlashMLA extension build in $fm (background)"
(cd "$fm" && timeout 300 python3 setup_dense.py build_ext --inplace) > "$OUT/flashmla_build.log" 2>&1 &
fm_pid=$!

# shellcheck source=scripts/device_deps.sh
source scripts/device_deps.sh
log "dcpmla_gpu_bench build"
if ! { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
         -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_NCCL=OFF \
         ${prefix_arg[@]+"${prefix_arg[@]}"} &&
       timeout 300 cmake --build build-gpu --target dcpmla_gpu_bench -j "$JOBS"; } \
    >> "$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"
  log "FAIL: dcpmla build (see build.log)"
  exit 1
fi
if ! wait "$fm_pid"; then
  tail -30 "$OUT/flashmla_build.log"
  log "FAIL: FlashMLA build (see flashmla_build.log)"
  exit 1
fi
log "builds done"

# shellcheck disable=SC2086  # VS_FLASHMLA_ARGS is a list of options
PYTHONUNBUFFERED=1 timeout 400 python3 bench/gpu/vs_flashmla.py \
  --bench build-gpu/bench/gpu/dcpmla_gpu_bench --flashmla "$fm" \
  --out "$OUT/vs_flashmla.json" --raw "$OUT/vs_flashmla_raw.json" \
  --commit "$COMMIT" --flashmla-commit "$fm_commit" --command "$command_line" --board-ms 20 \
  ${VS_FLASHMLA_ARGS:-} 2>&1 | tee "$OUT/vs_flashmla.txt"
status=${PIPESTATUS[0]}
log "done, status $status"
exit "$status"
