#!/usr/bin/env bash
# Session 18, call 2: full fp8 tiles' P.V in turn (wip/pv-in-turn-fp8, validated; its bf16 SASS
# is main's) against main b920543 (base): the cache-format shapes, 6 runs each, alternating.
set -u
scripts/device_ab.sh devrun/s18 --validate pit8 --reps 6 --bench-args "--filter cache_formats" base pit8
