#!/usr/bin/env bash
# Session 12 call 8 (one H200): stg = narrow (16-pair) fp8 tiles stage their e4m3 bytes a tile ahead by bulk copies in
# shared memory the narrow form leaves unused (decode_narrow_fp8.cuh), and widen them into the
# stage once it is free; base = HEAD. stg is validated by scripts/device_gpu.sh; then the
# whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CB=$(cat BASE)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/base_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/base_build.log" 2>&1; echo "base build rc $?" >> "$R/summary.txt") &
(cd stg && OUT="$R/stg_gpu" DCPMLA_COMMIT="$C" timeout 400 bash scripts/device_gpu.sh > "$R/stg_device_gpu.out" 2>&1; echo "stg device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/stg_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
log "builds done"
for rep in 1 2 3; do
  for v in base stg; do
    c=$C; [ $v = base ] && c=$CB
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$c" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
