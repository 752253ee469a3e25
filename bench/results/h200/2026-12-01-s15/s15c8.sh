#!/usr/bin/env bash
# Session 15, call 8: main (1dffa9b) against wip/fp8-bulk-staging (0fad944: fp8 bytes staged by
# bulk tensor copies, only for launches with narrow tiles), whole benchmark 3x alternating; fp8
# validated (GPU tests, sanitizers): session 14's next list, item 1.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
timeout 250 scripts/device_ab.sh devrun/s15 --validate fp8 --reps 3 base fp8
echo "device_ab rc $?" >> "$OUT/summary.txt"
