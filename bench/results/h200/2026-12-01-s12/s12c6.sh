#!/usr/bin/env bash
# Session 12 call 6 (one H200): spread = a tile's bulk copies are issued by lane 0 of each of the
# output warpgroup's 4 warps (every 4th box each) instead of by one thread
# (DCPMLA_SPREAD_BOX_ISSUE 1); base = the same tree with it 0. Block size 16 issues 36 boxes a
# tile (4 a chunk) and runs compute-bound shapes 1.5x slower than 64. spread is validated by
# scripts/device_gpu.sh; then the whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/base_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/base_build.log" 2>&1; echo "base build rc $?" >> "$R/summary.txt") &
(cd spread && OUT="$R/spread_gpu" DCPMLA_COMMIT="$C" timeout 400 bash scripts/device_gpu.sh > "$R/spread_device_gpu.out" 2>&1; echo "spread device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/spread_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
log "builds done"
for rep in 1 2 3; do
  for v in base spread; do
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$C-$v" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
