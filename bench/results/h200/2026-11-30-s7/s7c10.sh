#!/usr/bin/env bash
# Session 7 call 10 (one H200): main's head (2531a8d) against the fix of the split-decode
# slowdown (the packed a2a stores of the v3 epilogue in their own function, the partial and plain
# stores as before 7a23db8): the FlashMLA table, three runs each alternating, and the GPU tests
# of the fix.
set -u
cd "$(dirname "$0")/s7" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd head && timeout 150 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON > $R/build_head.log 2>&1 && cmake --build build-b -j 6 --target dcpmla_gpu_bench >> $R/build_head.log 2>&1") &
(cd fix && timeout 150 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_BENCH=ON > $R/build_fix.log 2>&1 && cmake --build build-b -j 10 >> $R/build_fix.log 2>&1") &
wait
log "builds done"
for rep in 1 2 3; do
  for t in head fix; do
    timeout 40 $t/build-b/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --commit $t --out "$R/${t}_r$rep.json" > "$R/${t}_r$rep.txt" 2>&1
    log "$t r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/${t}_r$rep.txt")"
  done
done
timeout 100 ctest --test-dir fix/build-b -L '^(gpu|cuda)$' -j 4 --timeout 90 > "$R/fix_gpu_tests.log" 2>&1
log "fix gpu tests rc $? $(grep 'tests passed' "$R/fix_gpu_tests.log")"
bash ../../scripts/pack_outputs.sh "$R"
