#!/usr/bin/env bash
# Session 15, call 2: main (1dffa9b, v3) against wip/seesaw-sfirst (949ae80: the seesaw on 256
# threads, the other warpgroup refilling) in both orders (ss: S of the other's next tile before
# its wait for P; sspv: after its P.V, sessions 11-13's order), whole benchmark 3x alternating;
# ss validated (GPU tests incl. the rising-scores test, sanitizers).
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$OUT/summary.txt" 2>&1
timeout 540 scripts/device_ab.sh devrun/s15 --validate ss --reps 3 base ss sspv
echo "device_ab rc $?" >> "$OUT/summary.txt"
