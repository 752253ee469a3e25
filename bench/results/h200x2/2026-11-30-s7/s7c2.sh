#!/usr/bin/env bash
# Session 7 call 2 (2 H200s): main at 7a23db8 (a2a pack fused into the decode). Single-GPU tests
# (ctest -L gpu, incl. DecodeIntoSendRowsEqualsDecodeThenPack) and a memcheck of that test, then
# scripts/device_multigpu.sh (build, multi-GPU tests, demos, breakdown at 32K x 32, the benchmark).
set -u
cd "$(dirname "$0")/s7/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg" "$R/gpu"
OUT="$R/mg" DCPMLA_COMMIT=7a23db8 DCPMLA_STEPS="build tests demo breakdown" DCPMLA_BUDGET_S=300 timeout 320 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "device_multigpu (build tests demo breakdown) rc $?"
timeout 150 cmake --build build-multigpu -j 32 > "$R/gpu/build_all.log" 2>&1
log "build all rc $?"
timeout 100 ctest --test-dir build-multigpu -L '^(gpu|cuda)$' -j 4 --timeout 90 > "$R/gpu/gpu_tests.log" 2>&1
log "gpu tests rc $? $(grep 'tests passed' "$R/gpu/gpu_tests.log")"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 build-multigpu/tests/cuda/cuda_backend_test   --gtest_filter='CudaBackend.DecodeIntoSendRowsEqualsDecodeThenPack' > "$R/gpu/memcheck_send.log" 2>&1
log "memcheck send rc $? $(grep 'ERROR SUMMARY' "$R/gpu/memcheck_send.log")"
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
DCPMLA_COMMIT=7a23db8 timeout 150 $B --contexts 131072 --batches 1 8 --heads 128 96 --worlds 1 2 --steps 100   --no-launch-events --alone-calls 0 --budget-s 130 --out "$R/mg/w1w2_128k.json" > "$R/mg/w1w2_128k.txt" 2>&1
log "128K W1/W2 rc $?"
grep -E "target|a2a" "$R/mg/w1w2_128k.txt" | tail -30
tar xzf "$R/mg/outputs.tgz" -O ./multigpu_breakdown_noevents.txt | grep -E " W |32768|target" | head -30
cat "$R/mg/summary.txt" "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
