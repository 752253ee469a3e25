#!/usr/bin/env bash
# Session 9 call 11 (one H200): narrow tiles up to 32 pairs for fp8 caches (311e8c2) against the same
# tree with -DDCPMLA_NARROW_PAIRS_FP8=16 (main before it): GPU tests, then the cache_formats
# group of both builds, three runs each, alternating.
set -u
cd "$(dirname "$0")/s9/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(timeout 200 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_BENCH=ON > $R/build_n32.log 2>&1 && cmake --build build-b -j 11 >> $R/build_n32.log 2>&1"; echo "n32 build rc $?" >> $R/summary.txt) &
(timeout 200 bash -c "cmake -S . -B build-n16 -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON -DCMAKE_CUDA_FLAGS=-DDCPMLA_NARROW_PAIRS_FP8=16 > $R/build_n16.log 2>&1 && cmake --build build-n16 -j 5 --target dcpmla_gpu_bench >> $R/build_n16.log 2>&1"; echo "n16 build rc $?" >> $R/summary.txt) &
wait
log "builds done"
timeout 120 ctest --test-dir build-b -L '^(gpu|cuda)$' -j 4 --timeout 100 > "$R/gpu_tests.log" 2>&1
log "gpu tests rc $? $(grep 'tests passed' "$R/gpu_tests.log")"
grep -E "Failed|\*\*\*" "$R/gpu_tests.log" | head -10 | tee -a "$R/summary.txt"
for rep in 1 2 3; do
  for v in n32 n16; do
    b=$([ $v = n32 ] && echo build-b || echo build-n16)
    timeout 40 $b/bench/gpu/dcpmla_gpu_bench --filter cache_formats --commit "311e8c2-fp8$v" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/${v}_r$rep.txt")"
  done
done
