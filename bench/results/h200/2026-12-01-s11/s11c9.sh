#!/usr/bin/env bash
# Session 11 call 9 (one H200): the sink_scores shapes (a sink token in every request's first
# token). new = working tree (lazy rescale, slack 8); eager = the same with
# DCPMLA_RESCALE_SLACK 0 (a rescale at every rise of the running max, as before session 10).
# The whole benchmark once on new; then (64, 4096, 128, 2) and (1, 65536, 128, 1) on random and
# on sink data, both builds, alternating, three rounds.
set -u
cd "$(dirname "$0")/s11" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
for v in new eager; do
  (cd $v && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/${v}_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/${v}_build.log" 2>&1; echo "$v build rc $?" >> "$R/summary.txt") &
done
wait
cat "$R/summary.txt"
timeout 90 new/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$C" --date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --out "$R/new_full.json" > "$R/new_full.txt" 2>&1
log "new full rc $?"
for rep in 1 2 3; do
  for v in new eager; do
    for s in "flashmla_table 1" "flashmla_table 9" "sink_scores 0" "sink_scores 1"; do
      set -- $s
      timeout 30 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --filter $1 --index $2 --out "$R/${v}_$1_$2_r$rep.json" > "$R/${v}_$1_$2_r$rep.txt" 2>&1
      log "$v $s r$rep: $(awk 'NR>2 {print $8, $9, $6}' "$R/${v}_$1_$2_r$rep.txt")"
    done
  done
done
bash ../../scripts/pack_outputs.sh "$R"
