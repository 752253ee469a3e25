#!/usr/bin/env bash
# Session 8 call 10 (2 H200s): main at c1311e2 (thread blocks per exchange from the chunk's size).
# Build; every multi-GPU suite; the collectives alone; the 32K x 32 breakdown over peer.
set -u
cd "$(dirname "$0")/s8/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg"
OUT="$R/mg" DCPMLA_COMMIT=c1311e2 DCPMLA_STEPS="build tests" DCPMLA_BUDGET_S=200 timeout 210 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "build + multigpu tests rc $? $(grep 'tests passed' $R/mg/device_multigpu.out)"
X=build-multigpu/bench/multigpu/dcpmla_exchange_bench
DCPMLA_COMMIT=c1311e2 timeout 40 $X --comm peer --out "$R/exchange.json" > "$R/exchange.txt" 2>&1; log "exchange rc $?"; cat "$R/exchange.txt"
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
DCPMLA_COMMIT=c1311e2 timeout 40 $B --comm peer --contexts 32768 --batches 32 --heads 128 --worlds 2 --steps 100 --no-launch-events --alone-calls 0 --out "$R/breakdown_peer.json" > "$R/breakdown_peer.txt" 2>&1; log "breakdown rc $?"
grep -E "^ 2 " "$R/breakdown_peer.txt" | cut -c1-150
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
