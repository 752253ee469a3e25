#!/usr/bin/env bash
# Session 7 call 6 (2 H200s): main at 2531a8d validated with scripts/device_gpu.sh (GPU tests, bench,
# sanitizers, on GPU 0); then an a2a merge experiment: items per block 16 / group (main) against
# 4 / group (devrun/s7/merge4, sed of combine_merge.cu), the 32K x 32 breakdown without events,
# two runs each, alternating.
set -u
cd "$(dirname "$0")/s7" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/gpu" "$R/merge"
(cd main && OUT="$R/gpu" DCPMLA_COMMIT=2531a8d timeout 280 bash scripts/device_gpu.sh > "$R/gpu/device_gpu.out" 2>&1)
log "device_gpu rc $?"
for t in main merge4; do
  (cd $t && timeout 150 bash -c "cmake -S . -B build-mg -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=ON     -DCMAKE_CUDA_ARCHITECTURES=90a -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON > $R/merge/build_$t.log 2>&1 &&     cmake --build build-mg -j 32 --target dcpmla_multigpu_bench >> $R/merge/build_$t.log 2>&1")
  log "build $t rc $?"
done
for rep in 1 2; do
  for t in main merge4; do
    DCPMLA_COMMIT=2531a8d+$t timeout 60 $t/build-mg/bench/multigpu/dcpmla_multigpu_bench --contexts 32768 --batches 32       --heads 128 --worlds 2 --steps 100 --no-launch-events --alone-calls 0 --out "$R/merge/${t}_r$rep.json"       > "$R/merge/${t}_r$rep.txt" 2>&1
    log "$t r$rep rc $?: $(grep ' a2a/bf16 ' "$R/merge/${t}_r$rep.txt" | cut -c60-160)"
  done
done
DCPMLA_COMMIT=2531a8d+merge4 timeout 60 merge4/build-mg/bench/multigpu/dcpmla_multigpu_bench --contexts 32768 --batches 32   --heads 128 --worlds 2 --steps 100 --alone-calls 0 --out "$R/merge/merge4_events.json" > "$R/merge/merge4_events.txt" 2>&1
log "merge4 with events rc $?"
grep -E "combine:" "$R/merge/merge4_events.txt"
cat "$R/gpu/summary.txt" "$R/summary.txt"
bash ../../scripts/pack_outputs.sh "$R"
