#!/usr/bin/env bash
# Session 12 call 2 (one H200): build options A/B'd on 18f70bb (the work-item block order):
# base = 18f70bb; ef = KV bulk copies with an L2 evict-first policy; pf = prefetch.tensormap by the
# issuing threads at the start; efpf = both; nof = S of the next tile not waiting for P.V's issue
# (DCPMLA_O_FIRST 0). Whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
CB=$(cat BASE)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
V="base ef pf efpf nof"
for v in $V; do
  (cd $v && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/${v}_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/${v}_build.log" 2>&1; echo "$v build rc $?" >> "$R/summary.txt") &
done
wait
log "builds done"
for rep in 1 2 3; do
  for v in $V; do
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$CB+$v" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
