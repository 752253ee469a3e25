#!/usr/bin/env bash
# Session 9 call 7 (one H200): the split merge loading batches of 8 splits over 4 thread groups
# (cb4d0b1) against 0d3f794: GPU tests of cb4d0b1, memcheck / initcheck / synccheck of split
# decodes, ncu kernel times of (1, 65536, 128, 1), then the flashmla_table, kimi_k3_dcp8 and
# cache_formats groups of both builds, three runs each, alternating.
set -u
cd "$(dirname "$0")/s9" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd new && timeout 280 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_BENCH=ON > $R/build_new.log 2>&1 && cmake --build build-b -j 11 >> $R/build_new.log 2>&1"; echo "new build rc $?" >> $R/summary.txt) &
(cd old && timeout 280 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON > $R/build_old.log 2>&1 && cmake --build build-b -j 5 --target dcpmla_gpu_bench >> $R/build_old.log 2>&1"; echo "old build rc $?" >> $R/summary.txt) &
wait
log "builds done"
timeout 150 ctest --test-dir new/build-b -L '^(gpu|cuda)$' -j 4 --timeout 120 > "$R/gpu_tests.log" 2>&1
log "gpu tests rc $? $(grep 'tests passed' "$R/gpu_tests.log")"
grep -E "Failed|\*\*\*" "$R/gpu_tests.log" | head -10 | tee -a "$R/summary.txt"
f='CudaBackend.DecodeRepeatsAndGrowsItsPlanBuffers:CudaBackend.GraphReplaysPlansUpdatedInPlace:CudaBackend.DecodeMatchesCpuBackend'
for tool in memcheck initcheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 new/build-b/tests/cuda/cuda_backend_test --gtest_filter="$f" > "$R/$tool.log" 2>&1
  log "$tool rc $? $(grep -h 'ERROR SUMMARY' $R/$tool.log)"
done
for v in new old; do
  timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct \
    -k regex:"split_merge" --launch-skip 10 --launch-count 3 $v/build-b/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --index 9 --reps 30 --out /tmp/x.json > "$R/ncu_$v.txt" 2>&1
  log "ncu merge $v rc $?: $(grep -E 'gpu__time_duration' "$R/ncu_$v.txt" | awk '{print $3}' | tr '\n' ' ')"
done
for rep in 1 2 3; do
  for v in new old; do
    for g in flashmla_table kimi_k3_dcp8 cache_formats; do
      timeout 60 $v/build-b/bench/gpu/dcpmla_gpu_bench --filter $g --commit "$([ $v = new ] && echo cb4d0b1 || echo 0d3f794)" --out "$R/n${v}_${g}_r$rep.json" > "$R/n${v}_${g}_r$rep.txt" 2>&1
      log "$v $g r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/n${v}_${g}_r$rep.txt")"
    done
  done
done
bash ../../scripts/pack_outputs.sh "$R"
