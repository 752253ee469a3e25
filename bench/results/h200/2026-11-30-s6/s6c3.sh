#!/usr/bin/env bash
# Session 6 call 3: v6 order 2 (seesaw-late): correctness, and its time against v3 and order 0,
# with and without refills; one build with -DDCPMLA_SEESAW_DIAG (the diagnostics stay off unless
# DCPMLA_SEESAW_DIAG is set).
set -u
cd "$(dirname "$0")/s6" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
C=${1:-unknown}
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
log "build $C with -DDCPMLA_SEESAW_DIAG"
timeout 240 bash -c "cmake -S . -B build-diag -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
  -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_NCCL=OFF -DCMAKE_CUDA_FLAGS=-DDCPMLA_SEESAW_DIAG \
  > $R/build.log 2>&1 && cmake --build build-diag -j 16 >> $R/build.log 2>&1" ||
  { log "build failed"; tail -30 "$R/build.log"; bash ../../scripts/pack_outputs.sh "$R"; exit 1; }
DCPMLA_DECODE_KERNEL=seesaw-late timeout 100 ctest --test-dir build-diag -L '^(gpu|cuda)$' -j 4 --timeout 60 \
  > "$R/tests_late.log" 2>&1
log "tests seesaw-late rc $? $(grep 'tests passed' "$R/tests_late.log")"
grep -E "Failed|FAILED|Timeout" "$R/tests_late.log" | head -5
B=build-diag/bench/gpu/dcpmla_gpu_bench
run() {  # name, filter, env...
  local name=$1 filter=$2; shift 2
  env "$@" timeout 60 $B --filter "$filter" --commit "$C+$name" --out "$R/$name.json" > "$R/$name.txt" 2>&1
  log "$name rc $?"
}
for rep in 1 2; do
  run v3_r$rep flashmla_table DCPMLA_DECODE_KERNEL=v3
  run seesaw_r$rep flashmla_table DCPMLA_DECODE_KERNEL=seesaw
  run late_r$rep flashmla_table DCPMLA_DECODE_KERNEL=seesaw-late
  run late_d1_r$rep flashmla_table DCPMLA_DECODE_KERNEL=seesaw-late DCPMLA_SEESAW_DIAG=1
done
run full_v3 "" DCPMLA_DECODE_KERNEL=v3
run full_late "" DCPMLA_DECODE_KERNEL=seesaw-late
DCPMLA_DECODE_KERNEL=seesaw-late timeout 60 compute-sanitizer --tool synccheck --error-exitcode 3 \
  build-diag/tests/cuda/cuda_backend_test \
  --gtest_filter='CudaBackend.InvalidDeviceBlockIdsReadNoMemory:CudaBackend.DecodeRepeatsAndGrowsItsPlanBuffers' \
  > "$R/late_synccheck.log" 2>&1
log "seesaw-late synccheck rc $?"
for f in "$R"/*_r1.txt "$R"/*_r2.txt; do echo "== $(basename $f)"; awk 'NR>2 {printf "%s ", $9} END {print ""}' "$f"; done
for k in v3 late; do echo "== full $k"; cut -c1-150 "$R/full_$k.txt"; done
bash ../../scripts/pack_outputs.sh "$R"
