#!/usr/bin/env bash
# Session 19, call 3: main a452b19's whole GPU benchmark 4 more times (closing figures of issue 3;
# the run-to-run spread of the card).
set -u
scripts/device_ab.sh devrun/s19 --reps 4 base
