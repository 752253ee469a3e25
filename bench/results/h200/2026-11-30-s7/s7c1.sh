#!/usr/bin/env bash
# Session 7 call 1: main (b7acaa1) validated with scripts/device_gpu.sh; then the producer-warpgroup
# v6 seesaw (wip/v6-seesaw d1435e9): its GPU tests, then FlashMLA-table timing against v3 and v6.
set -u
cd "$(dirname "$0")/s7" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/main" "$R/v6"
(cd main && OUT="$R/main" DCPMLA_COMMIT=b7acaa1 timeout 300 bash scripts/device_gpu.sh > "$R/main/device_gpu.out" 2>&1)
log "main device_gpu rc $?"
cd v6
timeout 200 bash -c "cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
  -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_NCCL=OFF > $R/v6/build.log 2>&1 && cmake --build build-gpu -j 16 >> $R/v6/build.log 2>&1" ||
  { log "v6 build failed"; tail -30 "$R/v6/build.log"; bash ../../../scripts/pack_outputs.sh "$R"; exit 1; }
B=build-gpu/bench/gpu/dcpmla_gpu_bench
DCPMLA_DECODE_KERNEL=seesaw DCPMLA_SEESAW_PRODUCER=1 timeout 100 ctest --test-dir build-gpu -L '^(gpu|cuda)$' -j 4 --timeout 60 \
  > "$R/v6/tests_producer.log" 2>&1
log "v6 producer tests rc $? $(grep 'tests passed' "$R/v6/tests_producer.log")"
DCPMLA_DECODE_KERNEL=seesaw DCPMLA_SEESAW_PRODUCER=1 timeout 60 compute-sanitizer --tool synccheck --error-exitcode 3 \
  build-gpu/tests/cuda/cuda_backend_test \
  --gtest_filter='CudaBackend.InvalidDeviceBlockIdsReadNoMemory:CudaBackend.DecodeRepeatsAndGrowsItsPlanBuffers' \
  > "$R/v6/producer_synccheck.log" 2>&1
log "producer synccheck rc $?"
for rep in 1 2; do
  DCPMLA_DECODE_KERNEL=v3 timeout 40 $B --filter flashmla_table --commit "d1435e9+v3" --out "$R/v6/v3_r$rep.json" > "$R/v6/v3_r$rep.txt" 2>&1
  log "v3 r$rep rc $?"
  DCPMLA_DECODE_KERNEL=seesaw timeout 40 $B --filter flashmla_table --commit "d1435e9+seesaw" --out "$R/v6/seesaw_r$rep.json" > "$R/v6/seesaw_r$rep.txt" 2>&1
  log "seesaw r$rep rc $?"
  DCPMLA_DECODE_KERNEL=seesaw DCPMLA_SEESAW_PRODUCER=1 timeout 40 $B --filter flashmla_table --commit "d1435e9+producer" --out "$R/v6/producer_r$rep.json" > "$R/v6/producer_r$rep.txt" 2>&1
  log "producer r$rep rc $?"
done
for f in "$R"/v6/*_r1.txt "$R"/v6/*_r2.txt; do echo "== $(basename $f)"; awk 'NR>2 {printf "%s ", $9} END {print ""}' "$f"; done
tail -15 "$R/main/summary.txt"
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
