#!/usr/bin/env bash
# Session 18, call 7 (diagnostics, wrong results, time only): the two-loop model's prediction.
# main 7768784 (base), nos (no S wgmma, as in call 6) and ranos (the same on wip/ra-main 9af5cbd:
# the block-id read under P.V); the FlashMLA table's shapes, 3 runs each.
set -u
scripts/device_ab.sh devrun/s18 --reps 3 --bench-args "--filter flashmla_table" base nos ranos
