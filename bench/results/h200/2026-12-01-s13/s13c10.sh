#!/usr/bin/env bash
# Session 13 call 10 (one H200): n32 = tiles of up to 32 pairs run the narrow form
# (DCPMLA_NARROW_PAIRS 32: Kimi H 96's 32-pair tails, ragged H 16 rows of Q 2 and 6); base =
# main (COMMIT, 16). Session 9 measured 32 slower; the block order and the L2 promotion changed
# since. The whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/s13" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
for v in base n32; do
  (cd $v && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/${v}_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/${v}_build.log" 2>&1; echo "$v build rc $?" >> "$R/summary.txt") &
done
wait
log "builds done"
for rep in 1 2 3; do
  for v in base n32; do
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$C-$v" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
