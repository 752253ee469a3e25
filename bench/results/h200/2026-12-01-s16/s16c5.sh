#!/usr/bin/env bash
# Session 16, call 5: the mma bench with one copy in flight timed from issue to landing.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
cmake -S . -B build-lb -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$OUT/cmake.log" 2>&1
cmake --build build-lb --target dcpmla_mma_bench > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
build-lb/bench/gpu/dcpmla_mma_bench --commit "$commit" --out "$OUT/mma_bench.json" | tee "$OUT/mma_bench.txt"
