#!/usr/bin/env bash
# Session 6 call 8 (branch wip/v3-multicast): v3 with TMA multicast in clusters of 2 against v3
# without (DCPMLA_NO_MULTICAST=1), one build: GPU tests, sanitizers, the whole benchmark twice.
set -u
cd "$(dirname "$0")/s6" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
C=${1:-unknown}
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
log "build $C"
timeout 240 bash -c "cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
  -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_NCCL=OFF > $R/build.log 2>&1 && cmake --build build-gpu -j 16 >> $R/build.log 2>&1" ||
  { log "build failed"; tail -30 "$R/build.log"; exit 1; }
timeout 150 ctest --test-dir build-gpu -L '^(gpu|cuda)$' -j 4 --timeout 60 > "$R/tests_multicast.log" 2>&1
log "tests multicast rc $? $(grep 'tests passed' "$R/tests_multicast.log")"
grep -E "\*\*\*Failed|Timeout|FAILED" "$R/tests_multicast.log" | head -8
B=build-gpu/bench/gpu/dcpmla_gpu_bench
for rep in 1 2; do
  timeout 60 $B --commit "$C+multicast" --out "$R/bench_mc_r$rep.json" > "$R/bench_mc_r$rep.txt" 2>&1
  log "bench multicast r$rep rc $?"
  DCPMLA_NO_MULTICAST=1 timeout 60 $B --commit "$C+nomulticast" --out "$R/bench_nomc_r$rep.json" > "$R/bench_nomc_r$rep.txt" 2>&1
  log "bench no multicast r$rep rc $?"
done
T=build-gpu/tests/cuda/cuda_backend_test
F='CudaBackend.InvalidDeviceBlockIdsReadNoMemory:CudaBackend.DecodeRepeatsAndGrowsItsPlanBuffers'
timeout 60 compute-sanitizer --tool synccheck --error-exitcode 3 $T --gtest_filter="$F" > "$R/synccheck.log" 2>&1
log "synccheck rc $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $T \
  --gtest_filter="$F:CudaBackend.DecodeMatchesCpuBackend:CudaBackend.GraphReplaysPlansUpdatedInPlace" > "$R/memcheck.log" 2>&1
log "memcheck rc $?"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 $T \
  --gtest_filter='CudaBackend.DecodeRepeatsAndGrowsItsPlanBuffers' > "$R/racecheck.log" 2>&1
log "racecheck rc $?"
paste <(cut -c1-62 "$R/bench_nomc_r1.txt") <(awk '{print $9}' "$R/bench_nomc_r1.txt") <(awk '{print $9}' "$R/bench_nomc_r2.txt") <(awk '{print $9}' "$R/bench_mc_r1.txt") <(awk '{print $9}' "$R/bench_mc_r2.txt")
bash ../../scripts/pack_outputs.sh "$R"
