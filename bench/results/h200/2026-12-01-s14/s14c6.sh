#!/usr/bin/env bash
# Session 14 call 6 (one H200): call 5's fp8 bulk staging kept for narrow tiles only (wide fp8
# tiles keep the threads' copies): fp8n (validated: GPU tests, sanitizers, demo) reads the next
# tile's block ids a round ahead as bf16 does; fp8late reads them when it issues. base = main
# 9402618. Whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/.." || exit 1
scripts/device_ab.sh devrun/s14 --validate fp8n --reps 3 base fp8n fp8late
