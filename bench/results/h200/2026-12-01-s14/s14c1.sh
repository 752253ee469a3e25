#!/usr/bin/env bash
# Session 14 call 1 (one H200): wip/per-tile-promotion (5774d4e: the L2 promotion chosen per
# thread block, two tensor maps) against main (9402618), validated (GPU tests, sanitizers, demo),
# whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/.." || exit 1
scripts/device_ab.sh devrun/s14 --validate tile --reps 3 base tile
