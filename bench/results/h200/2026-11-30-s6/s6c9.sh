#!/usr/bin/env bash
# Session 6 call 9 (branch wip/v3-multicast): does v3's refill cost scale with the bytes copied
# into shared memory? Bulk refills by both output warpgroups (0), by one (1: 4-5 of 9 chunks),
# by none (2); timing only, multicast off.
set -u
cd "$(dirname "$0")/s6" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
C=${1:-unknown}
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
log "build $C with -DDCPMLA_V3_DIAG"
timeout 240 bash -c "cmake -S . -B build-diag -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
  -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_NCCL=OFF -DCMAKE_CUDA_FLAGS=-DDCPMLA_V3_DIAG \
  > $R/build.log 2>&1 && cmake --build build-diag -j 16 --target dcpmla_gpu_bench >> $R/build.log 2>&1" ||
  { log "build failed"; tail -30 "$R/build.log"; exit 1; }
B=build-diag/bench/gpu/dcpmla_gpu_bench
for rep in 1 2; do
  for d in 0 1 2; do
    DCPMLA_NO_MULTICAST=1 DCPMLA_V3_DIAG=$d timeout 60 $B --filter flashmla_table --commit "$C+v3diag$d" \
      --out "$R/v3_diag${d}_r$rep.json" > "$R/v3_diag${d}_r$rep.txt" 2>&1
    log "v3 diag $d r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9}' "$R/v3_diag${d}_r$rep.txt")"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
