#!/usr/bin/env bash
# Session 8 call 2 (2 H200s): main at 61cfe6e (the peer communicator: direct NVLink stores).
# scripts/device_multigpu.sh (build; multi-GPU tests incl. the peer suites and the DCP suite over
# both communicators at W = 2; demos over both; breakdown at 32K x 32 for W = 2 over both),
# then step times W = 1, 2 at 128K (batches 1, 8) and 32K (batch 32) over the peer
# communicator, without launch events.
set -u
cd "$(dirname "$0")/s8/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg"
OUT="$R/mg" DCPMLA_61cfe6e=61cfe6e DCPMLA_STEPS="build tests demo breakdown" DCPMLA_BUDGET_S=400 timeout 410 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "device_multigpu (build tests demo breakdown) rc $?"
grep -E "tests passed|FAIL|Failed|\*\*\*" "$R/mg/device_multigpu.out" | head -30
grep -E "^ [24] |target" "$R/mg/device_multigpu.out" | grep -v "^target" | head -40
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
DCPMLA_61cfe6e=61cfe6e timeout 100 $B --comm peer --contexts 131072 --batches 1 8 --heads 128 96 --worlds 1 2 --steps 100 --no-launch-events --alone-calls 0 --budget-s 90 --out "$R/peer_w124_128k.json" > "$R/peer_w124_128k.txt" 2>&1
log "peer 128K W 1/2 rc $?"
DCPMLA_61cfe6e=61cfe6e timeout 60 $B --comm peer --contexts 32768 --batches 32 --heads 128 96 --worlds 1 2 --steps 100 --no-launch-events --alone-calls 0 --budget-s 50 --out "$R/peer_w124_32k.json" > "$R/peer_w124_32k.txt" 2>&1
log "peer 32K W 1/2 rc $?"
grep -E "target" "$R/peer_w124_128k.txt" "$R/peer_w124_32k.txt" | cut -c1-200 | tail -40
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
