#!/usr/bin/env bash
# Session 8 call 1 (4 H200s): main at 5e71aad. scripts/device_multigpu.sh (build, multi-GPU tests at W = 4,
# demos at W = 4, breakdown at 32K x 32 for W = 2 and 4), then the step times at 32K (batch 32) and
# 128K (batches 1, 8) for W = 1, 2, 4, H 128 and 96, Q 1 and ragged, without launch events.
set -u
cd "$(dirname "$0")/s8/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg"
OUT="$R/mg" DCPMLA_COMMIT=5e71aad DCPMLA_STEPS="build tests demo breakdown" DCPMLA_BUDGET_S=330 timeout 345 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "device_multigpu (build tests demo breakdown) rc $?"
tail -40 "$R/mg/device_multigpu.out"
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
DCPMLA_COMMIT=5e71aad timeout 130 $B --contexts 131072 --batches 1 8 --heads 128 96 --worlds 1 2 4 --steps 100 --no-launch-events --alone-calls 0 --budget-s 115 --out "$R/w124_128k.json" > "$R/w124_128k.txt" 2>&1
log "128K W 1/2/4 rc $?"
DCPMLA_COMMIT=5e71aad timeout 80 $B --contexts 32768 --batches 32 --heads 128 96 --worlds 1 2 4 --steps 100 --no-launch-events --alone-calls 0 --budget-s 65 --out "$R/w124_32k.json" > "$R/w124_32k.txt" 2>&1
log "32K W 1/2/4 rc $?"
grep -E "target" "$R/w124_128k.txt" "$R/w124_32k.txt" | cut -c1-220 | tail -60
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
