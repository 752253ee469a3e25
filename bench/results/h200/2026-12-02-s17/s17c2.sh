#!/usr/bin/env bash
# Session 17, call 2: the late half (wip/late-half: output warpgroup 1's P.V(i) issued once
# S(i + 1) is done) against main (base); late validated (GPU tests, sanitizers), 5 runs each.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
timeout 570 scripts/device_ab.sh devrun/s17 --validate late --reps 5 base late
echo "device_ab rc $?" >> "$OUT/summary.txt"
