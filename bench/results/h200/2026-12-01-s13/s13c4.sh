#!/usr/bin/env bash
# Session 13 call 4 (one H200): why the chunk ring of call 2 ran narrow tiles ~25 % slower.
# v2: S^T chunks 0-3 as soon as they land, then 4-8 (wide order); the refill targets computed once a round.
# r18 = the same code with 18 slots; base = main 5969931. GPU tests of new; the whole
# benchmark twice each, alternating; ncu per-instruction stall samples (source page, SASS) of the
# flattened H 16 shape (narrow, L2-bound) for r18 and base.
set -u
cd "$(dirname "$0")/s13" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CN=$(cat COMMIT_NEW)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
for v in base r18; do
  (cd $v && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/${v}_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/${v}_build.log" 2>&1; echo "$v build rc $?" >> "$R/summary.txt") &
done
(cd new && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > "$R/new_cmake.log" 2>&1 && cmake --build build-gpu > "$R/new_build.log" 2>&1; echo "new build rc $?" >> "$R/summary.txt")
wait
log "builds done"
(cd new/build-gpu && timeout 120 ctest -L gpu -j 4 --output-on-failure > "$R/new_gpu_tests.log" 2>&1; echo "new gpu tests rc $?" >> "$R/summary.txt")
tail -3 "$R/new_gpu_tests.log" >> "$R/summary.txt"
for rep in 1 2; do
  for v in base new r18; do
    c=$C; [ $v != base ] && c=$CN-$v
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$c" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
for v in base r18; do
  timeout 90 ncu --clock-control none -k regex:decode --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv $v/build-gpu/bench/gpu/dcpmla_gpu_bench --filter native_vs_flattened --index 1 --reps 5 > "$R/ncu_src_flat16_$v.csv" 2>&1
  log "ncu $v rc $?"
done
bash ../../scripts/pack_outputs.sh "$R"
