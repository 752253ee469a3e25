#!/usr/bin/env bash
# Session 20, call 3 (one H200): why W = 1's first combine variant ran ~12 % faster than the
# others in every multi-GPU benchmark of sessions 3-8 (W = 1 runs the same step for every
# variant; the 128K ratio target divided W = 2's a2a step by W = 1's a2a step). The multi-GPU
# benchmark at W = 1 on one GPU, variants sequential (the old order) and interleaved (the new
# default), twice each, 128K x 8 and 32K x 32, H 128, Q 1 and ragged, with nvidia-smi sampling the
# SM clock, power and the clock-event reasons every 50 ms.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/out}
START=$(date +%s)
stamp() { echo "== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/call.txt"; }
mkdir -p "$OUT/mg"
OUT=$OUT/mg DCPMLA_STEPS="build" DCPMLA_BUDGET_S=200 timeout 210 bash scripts/device_multigpu.sh > "$OUT/mg/stdout.txt" 2>&1
stamp "build rc $?"
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
Q="timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"
nvidia-smi --query-gpu=$Q --format=csv -i 0 > /dev/null 2>&1 || Q="timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu"
nvidia-smi --query-gpu=$Q --format=csv -lms 50 -i 0 > "$OUT/smi.csv" 2>&1 &
SMI=$!
nvidia-smi -q -d PERFORMANCE,CLOCK,POWER > "$OUT/smi_q_before.txt" 2>&1
for rep in 1 2; do
  for order in sequential interleaved; do
    flag=""; [ $order = sequential ] && flag="--sequential-variants"
    for shape in "131072 8" "32768 32"; do
      set -- $shape
      name=w1_${order}_${1}_r${rep}
      stamp "start $name"
      timeout 120 $B --worlds 1 --contexts $1 --batches $2 --heads 128 --steps 100 --no-launch-events \
        --alone-calls 0 $flag --commit "${DCPMLA_COMMIT:-unknown}" --out "$OUT/mg/$name.json" > "$OUT/mg/$name.txt" 2>&1
      stamp "end $name rc $?"
      grep -E "^ ?1 " "$OUT/mg/$name.txt" | tee -a "$OUT/call.txt"
      sleep 1
    done
  done
done
nvidia-smi -q -d PERFORMANCE,CLOCK,POWER > "$OUT/smi_q_after.txt" 2>&1
kill $SMI
stamp done
bash scripts/pack_outputs.sh "$OUT/mg"
