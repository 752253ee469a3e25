#!/usr/bin/env bash
# Session 15, call 6: main (1dffa9b, v3) against wip/seesaw-sfirst with P.V first and RETIRE 3
# (r3pv: S(i + 1) issued right behind P.V(i), P.V's retirement told at a wait<1>) and RETIRE 2
# (r2pv, as call 5), whole benchmark 3x alternating; r3pv validated.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$OUT/summary.txt" 2>&1
timeout 540 scripts/device_ab.sh devrun/s15 --validate r3pv --reps 3 base r3pv r2pv
echo "device_ab rc $?" >> "$OUT/summary.txt"
