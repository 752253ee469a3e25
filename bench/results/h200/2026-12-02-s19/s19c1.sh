#!/usr/bin/env bash
# Session 19, call 1: v3's stamps (wip/stamps-main 64ed214, main a452b19's kernels + stamps) on main
# and on the skeleton diagnostics (scripts/diag_variants.py): st (stamps only), stpv
# (nopv,noexp,nomax: S kept), stsk (nopv,nos,noexp,nomax: no MMA), stnr (stsk + norefill).
# base = main a452b19 without stamps. (64, 4096, 128, 8), 2 runs each.
set -u
scripts/device_ab.sh devrun/s19 --reps 2 --stamps --bench-args "--shape 64,4096,128,8" base st stpv stsk stnr
