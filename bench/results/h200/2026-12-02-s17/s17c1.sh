#!/usr/bin/env bash
# Session 17, call 1: seesaw stamps of RETIRE 3 (ssP3), RETIRE 4 (ssP4) and EARLY_SET with one
# issuer (ssPE) beside the branch default (ssP: P.V first, RETIRE 2) and main (base);
# wip/seesaw-stamps 750577a, one shape, two runs each, stamps on.
set -u
scripts/device_ab.sh devrun/s17 --reps 2 --stamps --bench-args "--shape 64,4096,128,8" base ssP ssP3 ssP4 ssPE
