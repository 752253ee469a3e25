#!/usr/bin/env bash
# Session 8 call 4 (2 H200s): main at 6354415 (peer exchange without acks, fence at the flag writers).
# Build; multi-GPU suites (label multigpu: peer + DCP over both + NCCL), the peer suite again with
# 128 lanes and with DCPMLA_PEER_FENCE=all; the collectives alone with 32, 64 and 128 lanes;
# breakdown at 32K x 32 W = 2 over peer (twice) and 128K W 1/2 over peer.
set -u
cd "$(dirname "$0")/s8/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg"
OUT="$R/mg" DCPMLA_COMMIT=6354415 DCPMLA_STEPS="build tests" timeout 300 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "build + multigpu tests rc $? $(grep 'tests passed' $R/mg/device_multigpu.out)"
T=build-multigpu/tests/peer/peer_communicator_test
DCPMLA_PEER_LANES=128 timeout 60 $T > "$R/peer_test_lanes128.log" 2>&1; log "peer test lanes 128 rc $? $(tail -1 $R/peer_test_lanes128.log)"
DCPMLA_PEER_FENCE=all timeout 60 $T > "$R/peer_test_fence_all.log" 2>&1; log "peer test fence all rc $? $(tail -1 $R/peer_test_fence_all.log)"
X=build-multigpu/bench/multigpu/dcpmla_exchange_bench
for lanes in 64 32 128; do
DCPMLA_PEER_LANES=$lanes DCPMLA_COMMIT=6354415 timeout 40 $X --comm peer --out "$R/exchange_lanes$lanes.json" > "$R/exchange_lanes$lanes.txt" 2>&1; log "exchange lanes $lanes rc $?"; cat "$R/exchange_lanes$lanes.txt"
done
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
for rep in 1 2; do
DCPMLA_COMMIT=6354415 timeout 40 $B --comm peer --contexts 32768 --batches 32 --heads 128 --worlds 2 --steps 100 --no-launch-events --alone-calls 0 --out "$R/breakdown_peer_r$rep.json" > "$R/breakdown_peer_r$rep.txt" 2>&1; log "breakdown peer r$rep rc $?"
grep -E "^ 2 " "$R/breakdown_peer_r$rep.txt"
done
DCPMLA_COMMIT=6354415 timeout 60 $B --comm peer --contexts 131072 --batches 8 --heads 128 96 --worlds 1 2 --steps 100 --no-launch-events --alone-calls 0 --out "$R/peer_w12_128k.json" > "$R/peer_w12_128k.txt" 2>&1; log "peer 128K rc $?"
grep -E "target" "$R/peer_w12_128k.txt" | cut -c1-180
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
