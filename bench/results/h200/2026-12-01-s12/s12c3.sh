#!/usr/bin/env bash
# Session 12 call 3 (one H200): split = the scores warpgroup computes S in two m64n32 halves and
# runs the first half's softmax while the second half's MMAs run (decode_split_scores.cuh,
# DCPMLA_SPLIT_SOFTMAX 1, bf16 caches); base = HEAD of the session so far. split is validated by
# scripts/device_gpu.sh (GPU tests incl. the flattened = native bit-identity, micro-benchmarks
# with the "S in halves" scenarios, sanitizers); then the whole benchmark three times each,
# alternating.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CB=$(cat BASE)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/base_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/base_build.log" 2>&1; echo "base build rc $?" >> "$R/summary.txt") &
(cd split && OUT="$R/split_gpu" DCPMLA_COMMIT="$C" timeout 400 bash scripts/device_gpu.sh > "$R/split_device_gpu.out" 2>&1; echo "split device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/split_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
log "builds done"
for rep in 1 2 3; do
  for v in base split; do
    c=$C; [ $v = base ] && c=$CB
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$c" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
