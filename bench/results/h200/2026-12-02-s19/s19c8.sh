#!/usr/bin/env bash
# Session 19, call 8: uwg2 = wip/uniform-wg with wide fp8 tiles on the plain warpgroup index,
# validated (scripts/device_gpu.sh) and timed against main a452b19 and call 7's uwg (all tiles
# uniform), the whole benchmark 3 times each, alternating.
set -u
scripts/device_ab.sh devrun/s19d --validate uwg2 --reps 3 base uwg uwg2
