#!/usr/bin/env bash
# Session 7 call 5 (2 H200s): main at 2531a8d (the decode reads the gathered query in place). Single-GPU tests
# (ctest -L gpu, incl. DecodeIntoSendRowsEqualsDecodeThenPack:CudaBackend.MergeReadsTheOwnPartialFromOwn:CudaBackend.GraphReplaysPlansUpdatedInPlace) and a memcheck of that test, then
# scripts/device_multigpu.sh (build, multi-GPU tests, demos, breakdown at 32K x 32, the benchmark).
set -u
cd "$(dirname "$0")/s7/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg" "$R/gpu"
OUT="$R/mg" DCPMLA_COMMIT=2531a8d DCPMLA_STEPS="build tests demo breakdown" DCPMLA_BUDGET_S=300 timeout 320 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "device_multigpu (build tests demo breakdown) rc $?"
timeout 150 cmake --build build-multigpu -j 32 > "$R/gpu/build_all.log" 2>&1
log "build all rc $?"
timeout 100 ctest --test-dir build-multigpu -L '^(gpu|cuda)$' -j 4 --timeout 90 > "$R/gpu/gpu_tests.log" 2>&1
log "gpu tests rc $? $(grep 'tests passed' "$R/gpu/gpu_tests.log")"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 build-multigpu/tests/cuda/cuda_backend_test   --gtest_filter='CudaBackend.DecodeIntoSendRowsEqualsDecodeThenPack:CudaBackend.MergeReadsTheOwnPartialFromOwn:CudaBackend.GraphReplaysPlansUpdatedInPlace' > "$R/gpu/memcheck_send.log" 2>&1
log "memcheck send rc $? $(grep 'ERROR SUMMARY' "$R/gpu/memcheck_send.log")"
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
DCPMLA_COMMIT=2531a8d timeout 150 $B --contexts 131072 --batches 1 8 --heads 128 96 --worlds 1 2 --steps 100   --no-launch-events --alone-calls 0 --budget-s 130 --out "$R/mg/w1w2_128k.json" > "$R/mg/w1w2_128k.txt" 2>&1
log "128K W1/W2 rc $?"
DCPMLA_NO_PDL=1 DCPMLA_COMMIT=2531a8d+nopdl timeout 60 $B --contexts 32768 --batches 32 --heads 128 --worlds 2 --steps 100   --no-launch-events --alone-calls 0 --out "$R/mg/breakdown_nopdl.json" > "$R/mg/breakdown_nopdl.txt" 2>&1
log "breakdown without PDL rc $?"
DCPMLA_COMMIT=2531a8d timeout 60 $B --contexts 32768 --batches 32 --heads 128 --worlds 2 --steps 100   --no-launch-events --alone-calls 0 --out "$R/mg/breakdown_pdl2.json" > "$R/mg/breakdown_pdl2.txt" 2>&1
log "breakdown with PDL (again) rc $?"
grep -E " 2  32768|target" "$R/mg/breakdown_nopdl.txt" "$R/mg/breakdown_pdl2.txt" | grep -v ragged | cut -c1-220
G=build-multigpu/bench/gpu/dcpmla_gpu_bench
for rep in 1 2; do
  timeout 40 $G --filter flashmla_table --commit 2531a8d --out "$R/gpu/flashmla_r$rep.json" > "$R/gpu/flashmla_r$rep.txt" 2>&1
  log "flashmla table r$rep rc $?"
done
awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/gpu/flashmla_r1.txt" "$R/gpu/flashmla_r2.txt"
grep -E "target|a2a" "$R/mg/w1w2_128k.txt" | tail -30
tar xzf "$R/mg/outputs.tgz" -O ./multigpu_breakdown_noevents.txt | grep -E " W |32768|target" | head -30
DCPMLA_COMMIT=2531a8d timeout 200 $B --steps 50 --budget-s 170 --out "$R/mg/multigpu_bench.json" > "$R/mg/multigpu_bench.txt" 2>&1
log "full multigpu bench rc $?"
grep -E "^target" "$R/mg/multigpu_bench.txt" | grep -E "a2a/bf16\]|a2a\]" | cut -c1-200
cat "$R/mg/summary.txt" "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
