#!/usr/bin/env bash
# Session 9 call 4 (one H200): the decode launched with PDL (main d509208) against
# fc587f5 (before it): GPU tests and a synccheck / memcheck of the PDL build, then the whole GPU
# benchmark: pdl, pdl with DCPMLA_NO_PDL=1, base; three runs each, alternating.
set -u
cd "$(dirname "$0")/s9" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd pdl && timeout 280 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_BENCH=ON > $R/build_pdl.log 2>&1 && cmake --build build-b -j 11 >> $R/build_pdl.log 2>&1"; echo "pdl build rc $?" >> $R/summary.txt) &
(cd base && timeout 280 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON > $R/build_base.log 2>&1 && cmake --build build-b -j 5 --target dcpmla_gpu_bench >> $R/build_base.log 2>&1"; echo "base build rc $?" >> $R/summary.txt) &
wait
log "builds done"
timeout 150 ctest --test-dir pdl/build-b -L '^(gpu|cuda)$' -j 4 --timeout 120 > "$R/gpu_tests.log" 2>&1
log "gpu tests rc $? $(grep 'tests passed' "$R/gpu_tests.log")"
grep -E "Failed|\*\*\*" "$R/gpu_tests.log" | head -10 | tee -a "$R/summary.txt"
multi='CudaBackend.InvalidDeviceBlockIdsReadNoMemory:CudaBackend.DecodeRepeatsAndGrowsItsPlanBuffers:CudaBackend.GraphReplaysPlansUpdatedInPlace'
timeout 120 compute-sanitizer --tool synccheck --error-exitcode 3 pdl/build-b/tests/cuda/cuda_backend_test --gtest_filter="$multi" > "$R/synccheck.log" 2>&1
log "synccheck rc $? $(grep -h 'ERROR SUMMARY' $R/synccheck.log)"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 pdl/build-b/tests/cuda/cuda_backend_test --gtest_filter="$multi" > "$R/memcheck.log" 2>&1
log "memcheck rc $? $(grep -h 'ERROR SUMMARY' $R/memcheck.log)"
for rep in 1 2 3; do
  for v in pdl nopdl base; do
    b=$([ $v = base ] && echo base/build-b || echo pdl/build-b)
    env $([ $v = nopdl ] && echo DCPMLA_NO_PDL=1) timeout 60 $b/bench/gpu/dcpmla_gpu_bench --commit "$(cat COMMIT_$v)" --out "$R/n${v}_r$rep.json" > "$R/n${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/n${v}_r$rep.txt")"
  done
done
cat "$R/npdl_r1.txt"
bash ../../scripts/pack_outputs.sh "$R"
