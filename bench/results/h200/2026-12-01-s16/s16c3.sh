#!/usr/bin/env bash
# Session 16, call 3: the load bench with issue cycles (main + the load-bench change), 400 and
# 100 tiles a block.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
commit=$(git rev-parse --short HEAD 2>/dev/null || cat devrun/s16/COMMIT)
cmake -S . -B build-lb -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$OUT/cmake.log" 2>&1
cmake --build build-lb --target dcpmla_load_bench > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/clocks.txt" 2>&1
for t in 400 100; do
  build-lb/bench/gpu/dcpmla_load_bench --tiles $t --commit "$commit" --out "$OUT/load_bench_t$t.json" | tee "$OUT/load_bench_t$t.txt"
done
