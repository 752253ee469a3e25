#!/usr/bin/env bash
# Session 7 call 7 (one H200): is (1, 65536, 128, 1) slower at 2531a8d than at b7acaa1 (the session's
# start), or is it the 2-GPU machine? The FlashMLA table, both builds, three runs each, alternating.
set -u
cd "$(dirname "$0")/s7" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
for t in head base; do
  (cd $t && timeout 200 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF     -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON > $R/build_$t.log 2>&1 && cmake --build build-b -j 16 --target dcpmla_gpu_bench >> $R/build_$t.log 2>&1")
  log "build $t rc $?"
done
for rep in 1 2 3; do
  for t in head base; do
    c=$([ $t = head ] && echo 2531a8d || echo b7acaa1)
    timeout 40 $t/build-b/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --commit $c --out "$R/${t}_r$rep.json" > "$R/${t}_r$rep.txt" 2>&1
    log "$t r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/${t}_r$rep.txt")"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
