#!/usr/bin/env bash
# Session 14 call 4 (one H200): an mbarrier per KV chunk of a stage (18 instead of 4), so S of a
# tile starts on each chunk as it lands instead of on each output warpgroup's chunk set. cbar: S
# takes the chunks in the old order (0-3, 8, 4-7); cbar2 (validated: GPU tests, sanitizers, demo):
# in the order the two warpgroups' copies land (0, 4, 1, 5, 2, 6, 3, 7, 8). base = main 9402618.
# Whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/.." || exit 1
scripts/device_ab.sh devrun/s14 --validate cbar2 --reps 3 base cbar cbar2
