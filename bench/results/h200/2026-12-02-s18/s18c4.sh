#!/usr/bin/env bash
# Session 18, call 4 (diagnostic, wrong results, time only): main 7768784 (base) against the same
# with the softmax's exp2 removed (noexp: P = S * scale - m) and without the proxy fence before
# P's publication (nofence: races); the FlashMLA table's shapes, 3 runs each, alternating.
set -u
scripts/device_ab.sh devrun/s18 --reps 3 --bench-args "--filter flashmla_table" base noexp nofence
