#!/usr/bin/env bash
# Session 6 call 2: where the v6 seesaw's time goes (timing diagnostics, wrong results) against
# v3, compute-bound FlashMLA shapes; one build with -DDCPMLA_SEESAW_DIAG.
set -u
cd "$(dirname "$0")/s6" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
C=${1:-unknown}
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
log "build $C with -DDCPMLA_SEESAW_DIAG"
timeout 240 bash -c "cmake -S . -B build-diag -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
  -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_NCCL=OFF -DCMAKE_CUDA_FLAGS=-DDCPMLA_SEESAW_DIAG \
  > $R/build.log 2>&1 && cmake --build build-diag -j 16 >> $R/build.log 2>&1" ||
  { log "build failed"; tail -30 "$R/build.log"; bash ../../scripts/pack_outputs.sh "$R"; exit 1; }
B=build-diag/bench/gpu/dcpmla_gpu_bench
run() {  # name, env...
  local name=$1; shift
  env "$@" timeout 60 $B --filter flashmla_table --commit "$C+$name" --out "$R/$name.json" > "$R/$name.txt" 2>&1
  log "$name rc $?"
}
for rep in 1 2; do
  run v3_r$rep DCPMLA_DECODE_KERNEL=v3
  for d in 0 1 2 3 4 5 8 9; do run seesaw_d${d}_r$rep DCPMLA_DECODE_KERNEL=seesaw DCPMLA_SEESAW_DIAG=$d; done
  run stagger_d0_r$rep DCPMLA_DECODE_KERNEL=seesaw-stagger
  run stagger_d1_r$rep DCPMLA_DECODE_KERNEL=seesaw-stagger DCPMLA_SEESAW_DIAG=1
done
for f in "$R"/*_r1.txt; do echo "== $(basename $f)"; awk 'NR>2 {printf "%s ", $9} END {print ""}' "$f"; done
cat "$R/summary.txt"
bash ../../scripts/pack_outputs.sh "$R"
