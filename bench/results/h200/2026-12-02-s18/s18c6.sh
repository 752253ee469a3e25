#!/usr/bin/env bash
# Session 18, call 6 (diagnostics, wrong results, time only): main 7768784 (base) against the
# same without P.V (nopv: the output warpgroups issue no wgmma, barriers and refills as before)
# and without S (nos: no wgmma for S; ptxas then spills 140 bytes); the FlashMLA table's shapes, 3 runs each.
set -u
scripts/device_ab.sh devrun/s18 --reps 3 --bench-args "--filter flashmla_table" base nopv nos
