#!/usr/bin/env bash
# Session 11 call 1 (one H200): HEAD validated by scripts/device_gpu.sh (incl. the micro-benches
# of 5e1446b), then the ragged L 4K H 128 mix and (64, 4096, 128, 8) with forced KV chunk sizes,
# and per-kernel durations (ncu) of the ragged mix.
set -u
cd "$(dirname "$0")/s11" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd new && OUT="$R/new_gpu" DCPMLA_COMMIT=$C timeout 420 bash scripts/device_gpu.sh > "$R/new_device_gpu.out" 2>&1; echo "new device_gpu rc $?" >> "$R/summary.txt")
B=new/build-gpu/bench/gpu/dcpmla_gpu_bench
for rep in 1 2; do
  for ch in 0 64 32 16 8; do
    a=(); [ $ch != 0 ] && a=(--kv-chunk-blocks $ch)
    timeout 30 $B --filter ragged_mix --index 0 "${a[@]}" --out "$R/rag_c${ch}_r$rep.json" > "$R/rag_c${ch}_r$rep.txt" 2>&1
    log "ragged L4K H128 chunk $ch r$rep: $(awk 'NR>2 {print $8, $9}' "$R/rag_c${ch}_r$rep.txt")"
    timeout 30 $B --filter flashmla_table --index 3 "${a[@]}" --out "$R/q8_c${ch}_r$rep.json" > "$R/q8_c${ch}_r$rep.txt" 2>&1
    log "Q8 chunk $ch r$rep: $(awk 'NR>2 {print $8, $9}' "$R/q8_c${ch}_r$rep.txt")"
  done
done
for ch in 0 64; do
  a=(); [ $ch != 0 ] && a=(--kv-chunk-blocks $ch)
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 20 --launch-count 12 $B --filter ragged_mix --index 0 --reps 10 "${a[@]}" > "$R/ncu_rag_c$ch.txt" 2>&1
  log "ncu ragged chunk $ch rc $?"
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 20 --launch-count 12 $B --filter flashmla_table --index 3 --reps 10 "${a[@]}" > "$R/ncu_q8_c$ch.txt" 2>&1
done
bash ../../scripts/pack_outputs.sh "$R"
