#!/usr/bin/env bash
# Session 19, call 5 (diagnostics, wrong results, time only): does the S head beside the softmax
# pay once refills no longer gate the ring? base = main a452b19; sa0 / sa36 as call 4 (wip/s-ahead-diag);
# *nr = the same without refills (scripts/diag_variants.py norefill: the stages keep tiles 0 and 1).
# FlashMLA table, 2 runs each.
set -u
scripts/device_ab.sh devrun/s19b --reps 2 --bench-args "--filter flashmla_table" base sa0 sa36 nr sa0nr sa36nr
