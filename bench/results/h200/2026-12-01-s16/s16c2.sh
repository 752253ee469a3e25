#!/usr/bin/env bash
# Session 16, call 2: main (f7c4c5b) against ROPE_EARLY 1 (wip/s-head 9725988) and
# wip/fp8-bulk-staging-m again, whole benchmark 5x alternating; rope validated (GPU tests,
# sanitizers).
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
timeout 570 scripts/device_ab.sh devrun/s16 --validate rope --reps 5 base rope fp8m
echo "device_ab rc $?" >> "$OUT/summary.txt"
