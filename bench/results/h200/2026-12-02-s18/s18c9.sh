#!/usr/bin/env bash
# Session 18, call 9 (diagnostics, wrong results, time only; snapshots of main fff6de4 (kernels as 7768784) edited by
# scripts/diag_variants.py): base; nomma (nopv,nos: no MMAs); nommanr (nopv,nos,norefill: no
# MMAs, no bulk refills); nommasm (nopv,nos,noexp,nomax: no MMAs, no exp2 or row max). The
# FlashMLA table's shapes, 2 runs each.
set -u
scripts/device_ab.sh devrun/s18 --reps 2 --bench-args "--filter flashmla_table" base nomma nommanr nommasm
