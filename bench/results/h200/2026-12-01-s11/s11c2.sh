#!/usr/bin/env bash
# Session 11 call 2 (one H200): new = warp-per-item split merge + split cost in the GPU planner,
# validated by scripts/device_gpu.sh; base = 5e1446b's benchmark beside it. Then the whole
# benchmark twice each (alternating), and a KV-chunk sweep of the split-prone shapes on new.
set -u
cd "$(dirname "$0")/s11" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CB=$(cat BASE)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/base_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/base_build.log" 2>&1; echo "base build rc $?" >> "$R/summary.txt") &
(cd new && OUT="$R/new_gpu" DCPMLA_COMMIT=$C timeout 420 bash scripts/device_gpu.sh > "$R/new_device_gpu.out" 2>&1; echo "new device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/new_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
for rep in 1 2; do
  for v in base new; do
    c=$C; [ $v = base ] && c=$CB
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit $c --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
B=new/build-gpu/bench/gpu/dcpmla_gpu_bench
sweep() {  # group index chunks...
  local g=$1 i=$2; shift 2
  for ch in "$@"; do
    a=(); [ $ch != 0 ] && a=(--kv-chunk-blocks $ch)
    timeout 30 $B --filter $g --index $i "${a[@]}" --out "$R/sweep_${g}_${i}_c$ch.json" > "$R/sweep_${g}_${i}_c$ch.txt" 2>&1
    log "sweep $g $i chunk $ch: $(awk 'NR>2 {print $8, $9, $NF}' "$R/sweep_${g}_${i}_c$ch.txt")"
  done
}
sweep ragged_mix 0 0 64 32
sweep ragged_mix 2 0 512 256 128 64 32
sweep ragged_mix 4 0 64 32 16
sweep ragged_mix 6 0 512 256 171 128
sweep native_vs_flattened 1 0 512 256 128 64
sweep native_vs_flattened 3 0 512 256 128
sweep kimi_k3_dcp8 0 0 64 32 16
sweep kimi_k3_dcp8 1 0 64 32 16 11
sweep kimi_k3_dcp8 2 0 64 32 16
sweep flashmla_table 5 0 512 256 128
sweep flashmla_table 7 0 2048 1024 512 256
sweep flashmla_table 9 0 32 16 8
bash ../../scripts/pack_outputs.sh "$R"
