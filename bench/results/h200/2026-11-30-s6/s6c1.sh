#!/usr/bin/env bash
# Session 6 call 1 (snapshot of main in devrun/s6): v6 seesaw (and its staggered form) against
# v3 in one build, PDL on/off for the dependent launches, and the graph-overhead check.
set -u
cd "$(dirname "$0")/s6" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
C=${1:-unknown}
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
nvidia-smi > "$R/env.txt" 2>&1
log "build $C"
timeout 240 bash -c "cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
  -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_NCCL=OFF > $R/build.log 2>&1 && cmake --build build-gpu -j 16 >> $R/build.log 2>&1" ||
  { log "build failed"; tail -30 "$R/build.log"; bash ../../scripts/pack_outputs.sh "$R"; exit 1; }
B=build-gpu/bench/gpu/dcpmla_gpu_bench
for k in v3 seesaw seesaw-stagger; do
  DCPMLA_DECODE_KERNEL=$k timeout 100 ctest --test-dir build-gpu -L '^(gpu|cuda)$' -j 4 --timeout 60 \
    > "$R/tests_$k.log" 2>&1
  log "tests $k rc $? $(grep 'tests passed' "$R/tests_$k.log")"
done
for k in v3 seesaw seesaw-stagger; do
  DCPMLA_DECODE_KERNEL=$k timeout 110 $B --commit "$C+$k" --out "$R/bench_$k.json" > "$R/bench_$k.txt" 2>&1
  log "bench $k rc $?"
done
# PDL on / off, and each graph-check shape alone (the plan capacity is then the shape's own).
for i in 9 5 0 7; do
  timeout 30 $B --filter flashmla_table --index $i --commit "$C" --out "$R/alone_$i.json" > "$R/alone_$i.txt" 2>&1
  DCPMLA_NO_PDL=1 timeout 30 $B --filter flashmla_table --index $i --commit "$C+nopdl" \
    --out "$R/alone_${i}_nopdl.json" > "$R/alone_${i}_nopdl.txt" 2>&1
  log "alone $i: $(tail -1 "$R/alone_$i.txt" | cut -c1-120) | nopdl $(tail -1 "$R/alone_${i}_nopdl.txt" | cut -c60-100)"
done
DCPMLA_DECODE_KERNEL=seesaw timeout 60 compute-sanitizer --tool synccheck --error-exitcode 3 \
  build-gpu/tests/cuda/cuda_backend_test \
  --gtest_filter='CudaBackend.InvalidDeviceBlockIdsReadNoMemory:CudaBackend.DecodeRepeatsAndGrowsItsPlanBuffers' \
  > "$R/seesaw_synccheck.log" 2>&1
log "seesaw synccheck rc $?"
DCPMLA_DECODE_KERNEL=seesaw timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 \
  build-gpu/tests/cuda/cuda_backend_test \
  --gtest_filter='CudaBackend.InvalidDeviceBlockIdsReadNoMemory:CudaBackend.DecodeMatchesCpuBackend' \
  > "$R/seesaw_memcheck.log" 2>&1
log "seesaw memcheck rc $?"
for k in v3 seesaw seesaw-stagger; do echo "== $k"; cut -c1-150 "$R/bench_$k.txt"; done
cat "$R/summary.txt"
bash ../../scripts/pack_outputs.sh "$R"
