#!/usr/bin/env bash
# Session 14 call 5 (one H200): fp8 caches staged by bulk tensor copies (a UINT8 tensor map, a
# 64-byte x 64-row box per chunk into the chunk's staging area, on a staging mbarrier; the
# output threads then widen as before) instead of the threads' 16-byte copies, for block sizes
# whose pages hold whole boxes. fp8b validated (GPU tests, sanitizers, demo). base = main
# 9402618. Whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/.." || exit 1
scripts/device_ab.sh devrun/s14 --validate fp8b --reps 3 base fp8b
