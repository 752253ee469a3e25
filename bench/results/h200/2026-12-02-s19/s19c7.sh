#!/usr/bin/env bash
# Session 19, call 7: uwg = wip/uniform-wg (the warpgroup index warp-uniform to ptxas) validated
# (scripts/device_gpu.sh: GPU tests, sanitizers, demo, benchmark) and timed against main a452b19,
# the whole benchmark 3 times each, alternating.
set -u
scripts/device_ab.sh devrun/s19d --validate uwg --reps 3 base uwg
