#!/usr/bin/env bash
# Session 7 call 8 (one H200): which commit since b7acaa1 slowed (1, 65536, 128, 1) from ~60 to
# ~74 us (call 7)? The FlashMLA table at each commit of the session, built side by side, two
# runs each, alternating.
set -u
cd "$(dirname "$0")/s7" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
C="b7acaa1 7a23db8 bdb0d09 b339134 b80204a 2531a8d"
for t in $C; do
  (cd $t && timeout 100 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
    -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON > $R/build_$t.log 2>&1 && cmake --build build-b -j 16 --target dcpmla_gpu_bench >> $R/build_$t.log 2>&1") &
done
wait
log "builds done"
for rep in 1 2; do
  for t in $C; do
    timeout 40 $t/build-b/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --commit $t --out "$R/${t}_r$rep.json" > "$R/${t}_r$rep.txt" 2>&1
    log "$t r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/${t}_r$rep.txt")"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
