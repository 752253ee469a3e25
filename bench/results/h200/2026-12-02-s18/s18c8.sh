#!/usr/bin/env bash
# Session 18, call 8 (diagnostics, wrong results, time only): main 7768784 (base), nopv (as in
# call 6), nos (as in call 6) and nomma (neither S's nor P.V's wgmmas: the barriers, waits,
# softmax and refills alone); the FlashMLA table's shapes, 3 runs each.
set -u
scripts/device_ab.sh devrun/s18 --reps 3 --bench-args "--filter flashmla_table" base nopv nos nomma
