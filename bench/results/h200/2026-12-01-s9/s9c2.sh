#!/usr/bin/env bash
# Session 9 call 2 (one H200): wip/narrow-tiles with narrow tiles for <= 16 pairs (default):
# scripts/device_gpu.sh (GPU tests, sanitizers, benchmark, demo), then bench-only builds with
# -DDCPMLA_NARROW_PAIRS=0 (main's kernel) and =32, three runs of each variant, alternating.
set -u
cd "$(dirname "$0")/s9/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
for v in 0 32; do
  (timeout 400 bash -c "cmake -S . -B build-n$v -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
    -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON -DCMAKE_CUDA_FLAGS=-DDCPMLA_NARROW_PAIRS=$v > $R/build_n$v.log 2>&1 && nice cmake --build build-n$v -j 2 --target dcpmla_gpu_bench >> $R/build_n$v.log 2>&1"; echo "n$v build rc $?" >> $R/summary.txt) &
done
mkdir -p "$R/gpu"
OUT="$R/gpu" DCPMLA_COMMIT=$(cat ../COMMIT) timeout 420 bash scripts/device_gpu.sh > "$R/device_gpu.out" 2>&1
log "device_gpu rc $?"
cat "$R/gpu/summary.txt" >> "$R/summary.txt"
wait
log "variant builds done"
for rep in 1 2 3; do
  for v in 16 0 32; do
    b=$([ $v = 16 ] && echo build-gpu || echo build-n$v)
    timeout 60 $b/bench/gpu/dcpmla_gpu_bench --commit "$(cat ../COMMIT)-n$v" --out "$R/n${v}_r$rep.json" > "$R/n${v}_r$rep.txt" 2>&1
    log "n$v r$rep rc $?: $(awk 'NR>2 {printf "%s ", $9} END {print ""}' "$R/n${v}_r$rep.txt")"
  done
done
cat "$R/n16_r1.txt"
bash ../../../scripts/pack_outputs.sh "$R"
