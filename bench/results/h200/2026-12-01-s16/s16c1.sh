#!/usr/bin/env bash
# Session 16, call 1: main (f7c4c5b) against wip/s-head (9725988) with S_HEAD 8, S_HEAD 20 and
# ROPE_EARLY 1, and wip/fp8-bulk-staging-m (fp8 bulk staging with main merged in); whole
# benchmark 3x alternating; head20 validated (GPU tests, sanitizers).
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
timeout 570 scripts/device_ab.sh devrun/s16 --validate head20 --reps 3 base head8 head20 rope fp8m
echo "device_ab rc $?" >> "$OUT/summary.txt"
