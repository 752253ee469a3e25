#!/usr/bin/env bash
# Session 11 call 6 (one H200): the seesaw kernel (v7) with SM-cycle stamps of block 0's steps
# (diagnostic build, devrun snapshot only): (64, 4096, 128, 8) and (64, 4096, 128, 1).
set -u
cd "$(dirname "$0")/s11" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd new && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/build.log" 2>&1; echo "build rc $?" >> "$R/summary.txt")
tail -3 "$R/build.log"
for idx in 3 0; do
  timeout 60 new/build-gpu/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --index $idx --reps 100 > "$R/stamps_$idx.txt" 2>&1
  log "index $idx rc $?: $(grep -v stamp "$R/stamps_$idx.txt" | tail -1)"
done
bash ../../scripts/pack_outputs.sh "$R"
