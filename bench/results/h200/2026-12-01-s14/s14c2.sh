#!/usr/bin/env bash
# Session 14 call 2 (one H200): L2 prefetch of KV pages by wide tiles (a bulk prefetch per page,
# cp.async.bulk.prefetch.L2, of tile i + d when tile i + 2's copies are prepared): pf3 / pf4 (d 3
# or 4 where one thread block reads the KV alone), pf3all (d 3 everywhere, validated: GPU tests,
# sanitizers, demo), and nofirst (main with o_first off: S of tile i + 1 no longer waits for P.V
# of tile i to be issued; re-measured since the loaders changed). base = main 9402618. Whole
# benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/.." || exit 1
scripts/device_ab.sh devrun/s14 --validate pf3all --reps 3 base pf3 pf4 pf3all nofirst
