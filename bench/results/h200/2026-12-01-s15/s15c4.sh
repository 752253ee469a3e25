#!/usr/bin/env bash
# Session 15, call 4: main (1dffa9b, v3) against wip/seesaw-sfirst with the owner's early retire and sessions 11-13's order (P.V(i) before S(i + 1))
# (sspvr: the refill of tile i + 1 no longer waits for the owner's softmax), whole benchmark 3x
# alternating; sspvr validated (GPU tests incl. the rising-scores test, sanitizers).
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$OUT/summary.txt" 2>&1
timeout 540 scripts/device_ab.sh devrun/s15 --validate sspvr --reps 3 base sspvr
echo "device_ab rc $?" >> "$OUT/summary.txt"
