#!/usr/bin/env bash
# Session 18, call 1: output warpgroup 1's P.V after warpgroup 0's (wip/pv-in-turn 438cc4e,
# validated) and the same with the block-id read under P.V (wip/pit-read-ahead 3a5291b) against
# main b920543 (base); whole benchmark, 4 runs each, variants alternating.
set -u
scripts/device_ab.sh devrun/s18 --validate pit --reps 4 base pit pitra
