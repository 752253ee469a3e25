#!/usr/bin/env bash
# Session 13 call 12 (one H200): the benchmark's warm-up of at least 100 ms a shape (uncommitted on
# 353cc74): the cache_formats group three times (its first shape, right after the GEMM ceiling,
# spread 354-392 us by median in call 11's A/A runs) and the whole benchmark once.
set -u
cd "$(dirname "$0")/.." || exit 1
scripts/device_ab.sh devrun/s13 --reps 3 --bench-args "--filter cache_formats" warm
B=devrun/s13/warm/build-gpu/bench/gpu/dcpmla_gpu_bench
mkdir -p "$OUT/all" && timeout 120 $B --commit "$(cat devrun/s13/COMMIT)-warm" --out "$OUT/all/warm_all.json" > "$OUT/all/warm_all.txt" 2>&1
echo "== all rc $? ($SECONDS s)" >> "$OUT/summary.txt"
