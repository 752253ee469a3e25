#!/usr/bin/env bash
# Session 14 call 3 (one H200): L2 prefetch of KV rows by the output threads of wide tiles
# (prefetch.global.L2, every fourth 128-byte line of a token's row per thread, tile i + d at the
# start of round i; the rows' block ids read a round ahead): tp3 / tp4 (d 3 or 4 where one thread
# block reads the KV alone), tp3all (d 3 everywhere; validated: GPU tests, sanitizers, demo), and
# allfirst (main with o_first for partly filled wide tiles too). base = main 9402618. Whole
# benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/.." || exit 1
scripts/device_ab.sh devrun/s14 --validate tp3all --reps 3 base tp3 tp4 tp3all allfirst
