#!/usr/bin/env bash
# Session 17, call 6: the last wave's requests cut (wip/tail-split) against main (base), the
# ragged mixes only (the one shape the planner changes is the ragged L 4K H 128 mix), 5 runs.
set -u
scripts/device_ab.sh devrun/s17 --reps 5 --bench-args "--filter ragged_mix" base tail
