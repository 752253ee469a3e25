#!/usr/bin/env bash
# Session 10 call 12 (one H200): phase and per-tile stamps (branch wip/phase-stamps): each decode block's entry,
# prologue done, first S done, loop done, stores issued, on the global timer, for (1, 65536, 128,
# 1), (64, 4096, 128, 1), (64, 4096, 128, 8) and (128, 8192, 16, 1).
set -u
cd "$(dirname "$0")/s10/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat ../COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
cmake -S . -B build-ps -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF \
  -DCMAKE_CUDA_FLAGS=-DDCPMLA_PHASE_STAMPS -DCMAKE_CXX_FLAGS=-DDCPMLA_PHASE_STAMPS > "$R/cmake.log" 2>&1
cmake --build build-ps --target dcpmla_gpu_bench > "$R/build.log" 2>&1
log "build rc $?"
for i in ${DCPMLA_PS_INDICES:-9 0 3 4}; do
  timeout 60 build-ps/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --index $i --reps 20 --commit $C --out "$R/ps_$i.json" > "$R/ps_$i.txt" 2>&1
  log "index $i rc $?: $(grep -v '^stamp' "$R/ps_$i.txt" | awk 'NR>2 {print $8, $9}') stamps $(grep -c '^stamp' "$R/ps_$i.txt")"
done
bash ../../../scripts/pack_outputs.sh "$R"
