#!/usr/bin/env bash
# Session 18, call 5 (diagnostics, time only): main 7768784 (base); noexp (the softmax's exp2
# removed); ra = the block-id read under P.V (wip/ra-main 9af5cbd, correct); ranoexp = ra +
# noexp; ranoexpnf = ra + noexp + no proxy fence before P's publication (races). Whether the
# scores and output loops bind together: the FlashMLA table's shapes, 3 runs each, alternating.
set -u
scripts/device_ab.sh devrun/s18 --reps 3 --bench-args "--filter flashmla_table" base noexp ra ranoexp ranoexpnf
