#!/usr/bin/env bash
# Session 12 call 10 (one H200): where the memory-bound narrow decode's time goes, for the next
# session: ncu warp-state, scheduler and memory sections of one (128, 8192, 16, 1) decode (bf16
# and fp8) on main.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd head && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/build.log" 2>&1; echo "build rc $?" >> "$R/summary.txt")
B=head/build-gpu/bench/gpu/dcpmla_gpu_bench
timeout 120 ncu --clock-control none -k regex:decode --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy $B --filter flashmla_table --index 4 --reps 5 > "$R/ncu_bf16_128x8192.txt" 2>&1
log "ncu bf16 rc $?"
timeout 120 ncu --clock-control none -k regex:decode --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis $B --filter cache_formats --index 2 --reps 5 > "$R/ncu_fp8_128x8192.txt" 2>&1
log "ncu fp8 rc $?"
bash ../../scripts/pack_outputs.sh "$R"
