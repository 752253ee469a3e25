#!/usr/bin/env bash
# Session 11 call 11 (one H200): stamps (diagnostic build) of the seesaw kernel of call 10
# (refills by the warpgroup waiting for P), (64, 4096, 128, 8).
set -u
cd "$(dirname "$0")/s11" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd new && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/build.log" 2>&1; echo "build rc $?" >> "$R/summary.txt")
timeout 60 new/build-gpu/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --index 3 --reps 100 > "$R/stamps_3.txt" 2>&1
log "seesaw stamps index 3 rc $?: $(grep -v stamp "$R/stamps_3.txt" | tail -1)"
bash ../../scripts/pack_outputs.sh "$R"
