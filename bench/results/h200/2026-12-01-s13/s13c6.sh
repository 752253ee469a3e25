#!/usr/bin/env bash
# Session 13 call 6 (one H200): new = the L2 promotion of the KV tensor map chosen per launch
# (none where each KV token is read by one thread block, 256 bytes where most are read by
# several row tiles); base = main 5969931. new validated by scripts/device_gpu.sh (GPU tests,
# sanitizers, demo); then the whole benchmark three times each, alternating.
set -u
cd "$(dirname "$0")/s13" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CN=$(cat COMMIT_NEW)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/base_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/base_build.log" 2>&1; echo "base build rc $?" >> "$R/summary.txt") &
(cd new && OUT="$R/new_gpu" DCPMLA_COMMIT="$CN" timeout 400 bash scripts/device_gpu.sh > "$R/new_device_gpu.out" 2>&1; echo "new device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/new_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
log "builds done"
for rep in 1 2 3; do
  for v in base new; do
    c=$C; [ $v = new ] && c=$CN
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$c-$v" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
