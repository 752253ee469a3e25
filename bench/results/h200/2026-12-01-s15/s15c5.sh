#!/usr/bin/env bash
# Session 15, call 5: main (1dffa9b, v3) against wip/seesaw-sfirst with RETIRE 2 (the other
# warpgroup signals its P.V(i) done as soon as it is, and the owner refills), in both orders
# (r2pv: P.V(i) before S(i + 1); r2s: S(i + 1) first), whole benchmark 3x alternating; r2pv
# validated (GPU tests incl. the rising-scores test, sanitizers).
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$OUT/summary.txt" 2>&1
timeout 540 scripts/device_ab.sh devrun/s15 --validate r2pv --reps 3 base r2pv r2s
echo "device_ab rc $?" >> "$OUT/summary.txt"
