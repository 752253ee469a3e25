#!/usr/bin/env bash
# Session 18, call 3: P.V in 2 or 4 commit groups with tile i + 2's bulk copies issued group by
# group (wip/pv-groups ed3bf78: g2, g4; g1 = the branch with one group, main's order) against main
# 7768784 (base); whole benchmark, 3 runs each, alternating; g4 validated.
set -u
scripts/device_ab.sh devrun/s18 --validate g4 --reps 3 base g1 g2 g4
