#!/usr/bin/env bash
# Session 20, call 4 (one H200): what the power cap does to the one-GPU benchmark. dcpmla_gpu_bench
# on the FlashMLA table, as before (100 ms of warm-up per shape, 3 calls per ceiling) and with
# --steady-ms 1500 (1.5 s of each ceiling and shape before its timed calls), in the order
# default, steady, steady, default; then the dcp_scaling group once with --steady-ms 1500.
# nvidia-smi samples the SM clock, power and clock-event reasons every 100 ms.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/out}
START=$(date +%s)
stamp() { echo "== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/call.txt"; }
mkdir -p "$OUT/runs"
{ cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON &&
  cmake --build build-gpu -j 16 --target dcpmla_gpu_bench; } > "$OUT/runs/build.log" 2>&1
stamp "build rc $?"
B=build-gpu/bench/gpu/dcpmla_gpu_bench
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 100 -i 0 > "$OUT/runs/smi.csv" 2>&1 &
SMI=$!
run() {
  local name=$1
  shift
  stamp "start $name"
  timeout 150 $B --commit "${DCPMLA_COMMIT:-unknown}" --out "$OUT/runs/$name.json" "$@" > "$OUT/runs/$name.txt" 2>&1
  stamp "end $name rc $?: $(grep '^device' "$OUT/runs/$name.txt")"
}
run table_default_1 --filter flashmla_table
run table_steady_1 --filter flashmla_table --steady-ms 1500
run table_steady_2 --filter flashmla_table --steady-ms 1500
run table_default_2 --filter flashmla_table
run scaling_steady --filter dcp_scaling --steady-ms 1500
kill $SMI
for f in "$OUT"/runs/table_*.txt; do echo "## $(basename $f)"; grep "^flashmla_table" "$f" | awk '{print $2, $3, $4, $5, $8, $14}'; done | tee -a "$OUT/call.txt"
grep "dcp_scaling B" "$OUT/runs/scaling_steady.txt" | tee -a "$OUT/call.txt"
stamp done
bash scripts/pack_outputs.sh "$OUT/runs"
