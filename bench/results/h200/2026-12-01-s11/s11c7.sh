#!/usr/bin/env bash
# Session 11 call 7 (one H200): block ids of the refills read a step ahead (rows computed at the
# issue). seesaw = the seesaw kernel (v7) with SM-cycle stamps of block 0's steps (diagnostic
# build); v3new = v3 with the same loader change; base = HEAD (v3). Stamps of (64, 4096, 128, 8)
# and (64, 4096, 128, 1); the whole benchmark: base / v3new alternating twice, seesaw once.
set -u
cd "$(dirname "$0")/s11" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CB=$(cat BASE)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
for v in base v3new new; do
  (cd $v && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/${v}_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/${v}_build.log" 2>&1; echo "$v build rc $?" >> "$R/summary.txt") &
done
wait
cat "$R/summary.txt"
for idx in 3 0; do
  timeout 60 new/build-gpu/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --index $idx --reps 100 > "$R/stamps_$idx.txt" 2>&1
  log "seesaw stamps index $idx rc $?: $(grep -v stamp "$R/stamps_$idx.txt" | tail -1)"
done
for rep in 1 2; do
  for v in base v3new; do
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
timeout 60 new/build-gpu/bench/gpu/dcpmla_gpu_bench --out "$R/seesaw_r1.json" > "$R/seesaw_r1.txt" 2>&1
log "seesaw r1 rc $?"
bash ../../scripts/pack_outputs.sh "$R"
