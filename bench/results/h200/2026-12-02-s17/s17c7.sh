#!/usr/bin/env bash
# Session 17, call 7: tile i + 2's pages read while P.V of tile i runs (wip/late-read-ahead)
# against main f7dffd1 (base: with the last-wave cut); rau validated (GPU tests, sanitizers,
# benchmarks, demo), 3 runs each.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
timeout 570 scripts/device_ab.sh devrun/s17 --validate rau --reps 3 base rau
echo "device_ab rc $?" >> "$OUT/summary.txt"
