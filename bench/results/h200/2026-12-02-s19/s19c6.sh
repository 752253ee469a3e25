#!/usr/bin/env bash
# Session 19, call 6 (diagnostics, time and stamps; wrong results but st): branch
# wip/s-ahead-stamps (wip/stamps-main + wip/s-ahead-diag): st = main's kernel with stamps; st0 /
# st36 = the S head with 0 / 36 k-steps; *nr = without refills. (64, 4096, 128, 8), 2 runs each.
set -u
scripts/device_ab.sh devrun/s19c --reps 2 --stamps --bench-args "--shape 64,4096,128,8" st st0 st36 st0nr st36nr
