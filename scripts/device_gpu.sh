#!/usr/bin/env bash
# GPU validation and benchmark, on a machine with an sm_90 GPU, nvcc, CMake and ninja (no network
# needed): configures a Release build with the CUDA backend into build-gpu, builds, runs the GPU
# and CUDA tests, the Python tests (torch's CUDA ones included where torch is installed),
# dcpmla_gpu_bench, the torch op against it (bench/python/torch_vs_cpp.py), the demo on the CUDA
# backend, and compute-sanitizer memcheck, racecheck and synccheck on small GPU test cases. Logs and the benchmark JSON go to $OUT
# (default ./gpu-out); the exit status is non-zero when any step failed.
#
# Build dependencies (fmt, GoogleTest, CLI11, nlohmann_json) come from the system when CMake
# finds them there; otherwise from .devdeps/ (copied along with the tree), which holds the
# Debian packages' files (.devdeps/root/usr, or .devdeps/debs/*.deb unpacked here). From it only
# headers and sources are used: fmt header-only, CLI11 and nlohmann_json headers, GoogleTest
# built from source, so no binary built on another distribution is linked.
#
# DCPMLA_COMMIT is recorded with the benchmark (default: git describe --always --dirty, which
# marks a tree that differs from the HEAD its git metadata names, as a copy of a working tree
# on another machine can);
# DCPMLA_BENCH_ARGS adds options to dcpmla_gpu_bench (e.g. "--filter flashmla_table").
# DCPMLA_DECODE_ROUNDS=1 (read when a CUDA backend is made) runs the tests and the benchmark on
# the round decode wherever it applies (docs/design/decode-kernel.md, "The round decode").
# DCPMLA_PYTHON=0 leaves out the Python steps (the package's tests, torch_vs_cpp.py; ~200 s),
# for a change to the kernels only.
#
#   run: scripts/device_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5  # CMake 4 and the older config files of the deps
JOBS=$(nproc 2>/dev/null || echo 8)
COMMIT=${DCPMLA_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
START=$(date +%s)
log() { echo "== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/summary.txt"; }
status=0

{
  nvidia-smi || true
  nvcc --version || true
  cmake --version || true
  c++ --version || true
  head -2 /etc/os-release 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
log "environment in env.txt"

# --- dependencies -------------------------------------------------------------------------
# shellcheck source=scripts/device_deps.sh
source scripts/device_deps.sh

# --- build --------------------------------------------------------------------------------
# Each step's timeout is capped so that the whole script ends within DCPMLA_TIME_LIMIT_S seconds.
LIMIT=${DCPMLA_TIME_LIMIT_S:-560}
left() { local l=$((LIMIT - ($(date +%s) - START))); [ "$l" -gt 10 ] && echo "$l" || echo 10; }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }

log "configure + build (Release, CUDA sm_90a)"
# The tests are asked for by name: build-gpu may hold another script's cache without them
# (scripts/device_vs_flashmla.sh builds the benchmark alone).
{ cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
    -DDCPMLA_BUILD_TESTS=ON -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_NCCL=OFF \
    ${prefix_arg[@]+"${prefix_arg[@]}"} &&
  timeout "$(cap 270)" cmake --build build-gpu -j "$JOBS"; } >> "$OUT/build.log" 2>&1
build_rc=$?
grep -E "error|warning:" "$OUT/build.log" | head -30
if [ $build_rc -ne 0 ]; then
  tail -30 "$OUT/build.log"
  log "FAIL: build (rc $build_rc, see build.log)"
  exit 1
fi
log "build done"
# SASS of the CUDA backend's kernels, for reading the instruction schedule (DCPMLA_SASS=1).
if [ "${DCPMLA_SASS:-0}" = 1 ] && command -v cuobjdump > /dev/null; then
  find build-gpu/src -name '*.cu.o' -print0 | xargs -0 -r -n1 cuobjdump -sass > "$OUT/kernels.sass" 2>&1
fi

# --- tests --------------------------------------------------------------------------------
log "ctest -L gpu (and the host-side cuda label)"
timeout "$(cap 200)" ctest --test-dir build-gpu -L '^(gpu|cuda)$' --output-on-failure -j 4 \
  --timeout 180 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "FAIL: gpu tests"; }
if grep -q "Skipped\|Not Run" "$OUT/gpu_tests.log"; then
  log "WARNING: some tests were skipped (no usable CUDA device?)"
fi

# --- Python -------------------------------------------------------------------------------
# The package's tests on the build tree's modules: the numpy path, the torch ops and
# BatchMLADecodeWrapper (their CUDA tests run here, skipped without a GPU), the serving harness.
# The wheel test is left out (it builds in a new virtual environment, which needs the network).
python=${DCPMLA_PYTHON:-1}
[ "$python" = 1 ] || log "Python steps left out (DCPMLA_PYTHON=0)"
if [ "$python" = 1 ] && [ -d build-gpu/python/dcpmla ]; then
  log "Python tests (ctest -L python, wheel excluded)"
  timeout "$(cap 300)" ctest --test-dir build-gpu -L python -E python_wheel --output-on-failure \
    -j 4 --timeout 280 2>&1 | tee "$OUT/python_tests.log" | tail -15
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "FAIL: python tests"; }
fi

# --- benchmark ----------------------------------------------------------------------------
if [ -x build-gpu/bench/gpu/dcpmla_gpu_bench ]; then
  log "GPU benchmark (ceilings, FlashMLA shapes, ragged mixes, flattened, DCP per-rank shapes)"
  timeout "$(cap 170)" build-gpu/bench/gpu/dcpmla_gpu_bench --out "$OUT/gpu_bench.json" \
    --commit "$COMMIT" --date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    ${DCPMLA_BENCH_ARGS:-} 2>&1 | tee "$OUT/gpu_bench.txt" | tail -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "FAIL: gpu benchmark"; }
fi

# The torch op against the C++ benchmark on the same shapes (the Python modules and torch needed).
if [ "$python" = 1 ] && [ -x build-gpu/bench/gpu/dcpmla_gpu_bench ] &&
  [ -f build-gpu/python/dcpmla/_torch_ops.so ]; then
  log "torch op against the C++ benchmark (bench/python/torch_vs_cpp.py)"
  PYTHONPATH=$PWD/build-gpu/python timeout "$(cap 150)" python3 bench/python/torch_vs_cpp.py \
    --bench build-gpu/bench/gpu/dcpmla_gpu_bench --out "$OUT/torch_vs_cpp.json" \
    --commit "$COMMIT" 2>&1 | tee "$OUT/torch_vs_cpp.txt" | tail -18
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "FAIL: torch op against the C++ benchmark"; }
fi

# --- demo ---------------------------------------------------------------------------------
log "demo on the CUDA backend"
timeout "$(cap 60)" build-gpu/tools/dcpmla demo --backend cuda 2>&1 | tee "$OUT/demo.log" |
  tail -20
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "FAIL: demo"; }

# --- compute-sanitizer --------------------------------------------------------------------
if command -v compute-sanitizer > /dev/null; then
  # The small decodes every sanitizer runs: plain and gathered queries, staged rows of both widths.
  small='CudaBackend.DecodeRepeatsAndGrowsItsPlanBuffers:CudaBackend.GatheredQueryGivesThePlainQuerysBits'
  log "compute-sanitizer memcheck (small cases)"
  filter="$small:CudaBackend.InvalidDeviceBlockIdsReadNoMemory"
  filter+=':CudaBackend.SpecMergeVectors:CudaBackend.WriteKvMatchesCpuAndSkipsBadSlots'
  filter+=':CudaBackend.LayoutKernelsMatchCpuExactly:CudaBackend.CombineKernelsMatchCpu'
  filter+=':CudaBackend.GraphReplaysPlansUpdatedInPlace:CudaBackend.DecodeMatchesCpuBackend'
  timeout "$(cap 90)" compute-sanitizer --tool memcheck --error-exitcode 3 \
    build-gpu/tests/cuda/cuda_backend_test --gtest_filter="$filter" 2>&1 |
    tee "$OUT/memcheck.log" | tail -15
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "FAIL: memcheck"; }
  log "compute-sanitizer memcheck and racecheck of the GPU planner (faults, graphs of schedules)"
  planner='CudaSchedule.BadDeviceBatchFaultsAndPoisonsEveryRow'
  timeout "$(cap 90)" compute-sanitizer --tool memcheck --error-exitcode 3 \
    build-gpu/tests/cuda/cuda_schedule_graph_test \
    --gtest_filter="$planner:CudaSchedule.GraphsOfSeveralSchedulesReplayInAnyOrder" 2>&1 |
    tee "$OUT/memcheck_planner.log" | tail -6
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "FAIL: memcheck of the planner"; }
  # The planner's shared-memory scans and sort on 60 random batches (no decode kernels run).
  DCPMLA_RANDOM_BATCHES=60 timeout "$(cap 120)" compute-sanitizer --tool racecheck --error-exitcode 3 \
    build-gpu/tests/cuda/cuda_schedule_graph_test \
    --gtest_filter="CudaSchedule.DevicePlanEqualsHostPlanOnRandomBatches" 2>&1 |
    tee "$OUT/racecheck_planner.log" | tail -6
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "FAIL: racecheck of the planner"; }
  # racecheck does not order a bar.arrive before the bar.sync of the same named barrier (see
  # below). The round decode hands each row's m and l between its consumer warpgroups that way
  # (publish_rows, arrive; sync, read_rows) in every decode, so a hazard between those two is
  # not a verdict; any other hazard is.
  log "compute-sanitizer racecheck (small decodes: plain and gathered queries, staged rows)"
  timeout "$(cap 90)" compute-sanitizer --tool racecheck \
    build-gpu/tests/cuda/cuda_backend_test --gtest_filter="$small" > "$OUT/racecheck.log" 2>&1
  rc=$?
  hazard_sides=$(grep -A1 "Race reported between" "$OUT/racecheck.log" | grep " access at ")
  sides=$(grep -c . <<< "$hazard_sides")
  handoff_sides=$(grep -c -E "rounds::(read_rows|publish_rows)\(" <<< "$hazard_sides")
  tail -3 "$OUT/racecheck.log"
  log "racecheck: $((sides / 2)) hazards, $((handoff_sides / 2)) of them the round decode's m / l hand-off"
  if [ "$rc" -ne 0 ] || ! grep -q "RACECHECK SUMMARY" "$OUT/racecheck.log" ||
    [ "$sides" -ne "$handoff_sides" ]; then
    status=1
    log "FAIL: racecheck"
  fi
  # Items of several tiles: synccheck (barrier use) must be clean. racecheck does not order a
  # bar.arrive before the bar.sync of the same named barrier, which is how the warpgroups hand
  # over P, the rescale factors and the stages, so there it reports hazards on the factors (and,
  # with the kOIssued hand-off, on the final m and l across the closing __syncthreads); its log
  # is kept for reading, not as a verdict.
  log "compute-sanitizer synccheck (decodes of several tiles, bulk and threads' copies)"
  multi="CudaBackend.InvalidDeviceBlockIdsReadNoMemory:$small"
  timeout "$(cap 120)" compute-sanitizer --tool synccheck --error-exitcode 3 \
    build-gpu/tests/cuda/cuda_backend_test --gtest_filter="$multi" 2>&1 |
    tee "$OUT/synccheck.log" | tail -4
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "FAIL: synccheck"; }
  timeout "$(cap 90)" compute-sanitizer --tool racecheck build-gpu/tests/cuda/cuda_backend_test \
    --gtest_filter='CudaBackend.InvalidDeviceBlockIdsReadNoMemory' > "$OUT/racecheck_tiles.log" 2>&1
  log "racecheck of several tiles (not a verdict, see above): $(grep -h "RACECHECK SUMMARY" \
    "$OUT/racecheck_tiles.log" | sed 's/=* *//')"
else
  log "compute-sanitizer not found; skipped"
fi

log "done, status $status"
exit $status
