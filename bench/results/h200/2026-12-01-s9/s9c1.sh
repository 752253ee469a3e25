#!/usr/bin/env bash
# Session 9 call 1 (one H200): narrow tiles (wip/narrow-tiles 39da5d7). Builds the tree twice
# (narrow on; -DDCPMLA_NARROW_PAIRS=0 = main's kernel), runs the GPU tests of the narrow build,
# then the whole GPU benchmark for both builds, two runs each, alternating.
set -u
cd "$(dirname "$0")/s9" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
cd narrow
(timeout 280 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_BENCH=ON > $R/build_narrow.log 2>&1 && cmake --build build-b -j 12 >> $R/build_narrow.log 2>&1"; echo "narrow build rc $?" >> $R/summary.txt) &
(timeout 280 bash -c "cmake -S . -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON -DCMAKE_CUDA_FLAGS=-DDCPMLA_NARROW_PAIRS=0 > $R/build_base.log 2>&1 && cmake --build build-base -j 4 --target dcpmla_gpu_bench >> $R/build_base.log 2>&1"; echo "base build rc $?" >> $R/summary.txt) &
wait
log "builds done"
tail -3 $R/build_narrow.log
timeout 60 build-b/tests/cuda/cuda_dcp_test --gtest_filter='*NarrowAndWide*:*FlattenedMatches*' > "$R/narrow_bits.log" 2>&1
log "narrow bit tests rc $?: $(grep -E 'PASSED|FAILED|max' "$R/narrow_bits.log" | head -8 | tr '\n' ' ')"
timeout 150 ctest --test-dir build-b -L '^(gpu|cuda)$' -j 4 --timeout 120 > "$R/gpu_tests.log" 2>&1
log "gpu tests rc $? $(grep 'tests passed' "$R/gpu_tests.log")"
grep -E "Failed|\*\*\*" "$R/gpu_tests.log" | head -10 | tee -a "$R/summary.txt"
for rep in 1 2; do
  for t in narrow base; do
    b=$([ $t = narrow ] && echo build-b || echo build-base)
    timeout 90 $b/bench/gpu/dcpmla_gpu_bench --commit "39da5d7-$t" --out "$R/${t}_r$rep.json" > "$R/${t}_r$rep.txt" 2>&1
    log "$t r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/${t}_r$rep.txt")"
  done
done
cat "$R/narrow_r1.txt"
bash ../../../scripts/pack_outputs.sh "$R"
