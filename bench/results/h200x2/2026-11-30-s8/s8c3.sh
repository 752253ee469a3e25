#!/usr/bin/env bash
# Session 8 call 3 (2 H200s): main at 842d14e (peer exchange under PDL; fence A/B knob).
# Build; the collectives alone (dcpmla_exchange_bench, NCCL vs peer; then peer with
# DCPMLA_PEER_FENCE=one and with DCPMLA_NO_PDL=1); the peer and DCP multi-GPU suites; the
# breakdown at 32K x 32 W = 2 over both communicators (no launch events, twice); 128K W 1/2 peer.
set -u
cd "$(dirname "$0")/s8/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg"
OUT="$R/mg" DCPMLA_COMMIT=842d14e DCPMLA_STEPS="build" timeout 200 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "build rc $?"
X=build-multigpu/bench/multigpu/dcpmla_exchange_bench
DCPMLA_COMMIT=842d14e timeout 60 $X --out "$R/exchange.json" > "$R/exchange.txt" 2>&1; log "exchange rc $?"; cat "$R/exchange.txt"
DCPMLA_PEER_FENCE=one DCPMLA_COMMIT=842d14e timeout 40 $X --comm peer --out "$R/exchange_fence_one.json" > "$R/exchange_fence_one.txt" 2>&1; log "exchange fence=one rc $?"; cat "$R/exchange_fence_one.txt"
DCPMLA_NO_PDL=1 DCPMLA_COMMIT=842d14e timeout 40 $X --comm peer --out "$R/exchange_nopdl.json" > "$R/exchange_nopdl.txt" 2>&1; log "exchange no PDL rc $?"; cat "$R/exchange_nopdl.txt"
timeout 200 ctest --test-dir build-multigpu -R "peer_|nccl_dcp_test$" --output-on-failure --timeout 190 > "$R/tests.log" 2>&1; log "peer + DCP suites rc $? $(grep 'tests passed' "$R/tests.log")"
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
for rep in 1 2; do for comm in peer nccl; do
DCPMLA_COMMIT=842d14e timeout 40 $B --comm $comm --contexts 32768 --batches 32 --heads 128 --worlds 2 --steps 100 --no-launch-events --alone-calls 0 --out "$R/breakdown_${comm}_r$rep.json" > "$R/breakdown_${comm}_r$rep.txt" 2>&1; log "breakdown $comm r$rep rc $?"
grep -E "^ 2 " "$R/breakdown_${comm}_r$rep.txt"
done; done
DCPMLA_COMMIT=842d14e timeout 60 $B --comm peer --contexts 131072 --batches 8 --heads 128 96 --worlds 1 2 --steps 100 --no-launch-events --alone-calls 0 --out "$R/peer_w12_128k.json" > "$R/peer_w12_128k.txt" 2>&1; log "peer 128K rc $?"
grep -E "target" "$R/peer_w12_128k.txt" | cut -c1-180
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
