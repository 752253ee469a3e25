#!/usr/bin/env bash
# Session 13 call 11 (one H200): scripts/device_ab.sh's first run on the device, as an A/A test:
# two snapshots of the same commit, the cache_formats group twice each (the spread between
# identical builds).
set -u
cd "$(dirname "$0")/.." || exit 1
scripts/device_ab.sh devrun/s13 --reps 2 --bench-args "--filter cache_formats" a b
