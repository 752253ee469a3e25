#!/usr/bin/env bash
# Session 17, call 3: v3 stamped (wip/late-half with DCPMLA_STAMPS): st0 = main's order
# (DCPMLA_LATE_HALF 0), st1 = the late half; main (base, no stamps) beside; one shape, 3 runs.
set -u
scripts/device_ab.sh devrun/s17 --reps 3 --stamps --bench-args "--shape 64,4096,128,8" base st0 st1
