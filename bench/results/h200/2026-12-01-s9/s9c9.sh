#!/usr/bin/env bash
# Session 9 call 9 (one H200): L2 prefetch of tile i + 3 (976d7a7) against the same tree built with
# -DDCPMLA_L2_PREFETCH=0: GPU tests, memcheck / synccheck of decode tests, then the whole GPU
# benchmark of both builds, two runs each, alternating.
set -u
cd "$(dirname "$0")/s9/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(timeout 280 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_BENCH=ON > $R/build_pf.log 2>&1 && cmake --build build-b -j 11 >> $R/build_pf.log 2>&1"; echo "pf build rc $?" >> $R/summary.txt) &
(timeout 280 bash -c "cmake -S . -B build-nopf -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON -DCMAKE_CUDA_FLAGS=-DDCPMLA_L2_PREFETCH=0 > $R/build_nopf.log 2>&1 && cmake --build build-nopf -j 5 --target dcpmla_gpu_bench >> $R/build_nopf.log 2>&1"; echo "nopf build rc $?" >> $R/summary.txt) &
wait
log "builds done"
timeout 150 ctest --test-dir build-b -L '^(gpu|cuda)$' -j 4 --timeout 120 > "$R/gpu_tests.log" 2>&1
log "gpu tests rc $? $(grep 'tests passed' "$R/gpu_tests.log")"
grep -E "Failed|\*\*\*" "$R/gpu_tests.log" | head -10 | tee -a "$R/summary.txt"
f='CudaBackend.DecodeRepeatsAndGrowsItsPlanBuffers:CudaBackend.InvalidDeviceBlockIdsReadNoMemory:CudaBackend.DecodeMatchesCpuBackend:CudaBackend.BulkCopyBlockSizesMatchCpuBackend'
for tool in memcheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 build-b/tests/cuda/cuda_backend_test --gtest_filter="$f" > "$R/$tool.log" 2>&1
  log "$tool rc $? $(grep -h 'ERROR SUMMARY' $R/$tool.log)"
done
for rep in 1 2; do
  for v in pf nopf; do
    b=$([ $v = pf ] && echo build-b || echo build-nopf)
    timeout 90 $b/bench/gpu/dcpmla_gpu_bench --commit "976d7a7-$v" --out "$R/n${v}_r$rep.json" > "$R/n${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/n${v}_r$rep.txt")"
  done
done
bash ../../../scripts/pack_outputs.sh "$R"
