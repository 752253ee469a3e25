#!/usr/bin/env bash
# Session 14 call 7 (one H200): call 6's fp8n with one prologue per kernel (the bulk choice a
# runtime flag, not a second instantiation), validated (GPU tests, sanitizers, demo); base = main
# 9402618. Whole benchmark twice each, alternating (the device time left).
set -u
cd "$(dirname "$0")/.." || exit 1
scripts/device_ab.sh devrun/s14 --validate fp8n2 --reps 2 base fp8n2
