#!/usr/bin/env bash
# Session 9 call 5 (one H200): fp8 tiles widened before the wait for P (844fae5) against the same tree
# built with -DDCPMLA_FP8_WIDEN_EARLY=0 (widened while P.V runs, as before): GPU tests of 844fae5,
# synccheck and racecheck of a decode test with fp8 caches, then the benchmark's cache_formats
# and flashmla_table groups, three runs each, alternating.
set -u
cd "$(dirname "$0")/s9/head" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(timeout 280 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_BENCH=ON > $R/build_early.log 2>&1 && cmake --build build-b -j 11 >> $R/build_early.log 2>&1"; echo "early build rc $?" >> $R/summary.txt) &
(timeout 280 bash -c "cmake -S . -B build-late -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON -DCMAKE_CUDA_FLAGS=-DDCPMLA_FP8_WIDEN_EARLY=0 > $R/build_late.log 2>&1 && cmake --build build-late -j 5 --target dcpmla_gpu_bench >> $R/build_late.log 2>&1"; echo "late build rc $?" >> $R/summary.txt) &
wait
log "builds done"
timeout 150 ctest --test-dir build-b -L '^(gpu|cuda)$' -j 4 --timeout 120 > "$R/gpu_tests.log" 2>&1
log "gpu tests rc $? $(grep 'tests passed' "$R/gpu_tests.log")"
grep -E "Failed|\*\*\*" "$R/gpu_tests.log" | head -10 | tee -a "$R/summary.txt"
timeout 150 compute-sanitizer --tool synccheck --error-exitcode 3 build-b/tests/cuda/cuda_backend_test --gtest_filter='CudaBackend.DecodeMatchesCpuBackend' > "$R/synccheck.log" 2>&1
log "synccheck rc $? $(grep -h 'ERROR SUMMARY' $R/synccheck.log)"
timeout 150 compute-sanitizer --tool racecheck build-b/tests/cuda/cuda_backend_test --gtest_filter='CudaBackend.DecodeMatchesCpuBackend' > "$R/racecheck.log" 2>&1
log "racecheck (not a verdict, see scripts/device_gpu.sh) rc $? $(grep -h 'RACECHECK SUMMARY' $R/racecheck.log)"
for rep in 1 2 3; do
  for v in early late; do
    b=$([ $v = early ] && echo build-b || echo build-late)
    for g in cache_formats flashmla_table; do
      timeout 60 $b/bench/gpu/dcpmla_gpu_bench --filter $g --commit "844fae5-$v" --out "$R/n${v}_${g}_r$rep.json" > "$R/n${v}_${g}_r$rep.txt" 2>&1
      log "$v $g r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/n${v}_${g}_r$rep.txt")"
    done
  done
done
cat "$R/nearly_cache_formats_r1.txt"
bash ../../../scripts/pack_outputs.sh "$R"
