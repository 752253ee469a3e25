#!/usr/bin/env bash
# Session 10 call 1 (one H200): dcpmla_mma_bench (the decode tile's tensor-core streams), twice;
# (128, 8192, 16, 1) with the split forced (--kv-chunk-blocks 0 = the planner's choice).
set -u
cd "$(dirname "$0")/s10/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat ../COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/cmake.log" 2>&1
cmake --build build-gpu --target dcpmla_mma_bench dcpmla_gpu_bench > "$R/build.log" 2>&1
log "build rc $?"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > "$R/env.txt" 2>&1
for rep in 1 2; do
  timeout 60 build-gpu/bench/gpu/dcpmla_mma_bench --commit $C --date "$(date -u +%FT%TZ)" --out "$R/mma_r$rep.json" > "$R/mma_r$rep.txt" 2>&1
  log "mma r$rep rc $?"
done
cat "$R/mma_r1.txt" >> "$R/summary.txt"
B=build-gpu/bench/gpu/dcpmla_gpu_bench
for rep in 1 2; do
  for c in 0 16 32 43 64; do
    timeout 30 $B --filter flashmla_table --index 4 --kv-chunk-blocks $c --commit $C --out "$R/mb_c${c}_r$rep.json" > "$R/mb_c${c}_r$rep.txt" 2>&1
    log "(128, 8192, 16, 1) chunk $c r$rep: $(awk 'NR>2 {print $8, $9, $10, $11, $12}' "$R/mb_c${c}_r$rep.txt")"
  done
done
bash ../../../scripts/pack_outputs.sh "$R"
