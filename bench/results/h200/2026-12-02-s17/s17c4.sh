#!/usr/bin/env bash
# Session 17, call 4: partial last tiles by bulk copies (wip/bulk-partial) against main (base);
# bp validated (GPU tests, sanitizers), 5 runs each.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
timeout 570 scripts/device_ab.sh devrun/s17 --validate bp --reps 5 base bp
echo "device_ab rc $?" >> "$OUT/summary.txt"
