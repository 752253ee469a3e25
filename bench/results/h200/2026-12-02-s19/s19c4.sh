#!/usr/bin/env bash
# Session 19, call 4 (diagnostic, wrong results for sa*, time only): branch wip/s-ahead-diag.
# base = main a452b19; uwg = the warpgroup index warp-uniform to ptxas (correct); saK = the first
# K k-steps of S(j + 1) issued from tile j's stage as soon as S(j) is done (beside the softmax of
# tile j), the rest from tile j + 1's own stage; sa0 is the same code with no head (control).
# FlashMLA table, 3 runs each.
set -u
scripts/device_ab.sh devrun/s19b --reps 3 --bench-args "--filter flashmla_table" base uwg sa0 sa16 sa28 sa36
