#!/usr/bin/env bash
# Session 9 call 10 (one H200): ncu profiles of main (0338d12) for the next session: the decode kernel
# of (1, 65536, 128, 1) and of (128, 8192, 16, 1) (speed of light, memory workload, warp states,
# scheduler), one launch each.
set -u
cd "$(dirname "$0")/s9/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
timeout 200 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
  -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON > $R/build.log 2>&1 && cmake --build build-b -j 16 --target dcpmla_gpu_bench >> $R/build.log 2>&1"
log "build rc $?"
B=build-b/bench/gpu/dcpmla_gpu_bench
for ix in 9 4; do
  timeout 120 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section LaunchStats -k regex:decode_ws --launch-skip 5 --launch-count 1 \
    $B --filter flashmla_table --index $ix --reps 10 --out /tmp/x.json > "$R/ncu_index$ix.txt" 2>&1
  log "ncu index $ix rc $?"
done
grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|Stall|Warp Cycles|Issued Warp|No Eligible|Active Warps" "$R/ncu_index9.txt" | head -30
