#!/usr/bin/env bash
# Session 8 call 5 (2 H200s): main at 4011327. scripts/device_multigpu.sh (build; every multi-GPU
# suite; demos over NCCL and peer; breakdown at 32K x 32 over both), the peer suite with
# DCPMLA_PEER_FENCE=all, the collectives alone (NCCL vs peer), the breakdown over peer twice more
# and over NCCL once more, 128K W 1/2 over peer and NCCL.
set -u
cd "$(dirname "$0")/s8/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg"
OUT="$R/mg" DCPMLA_COMMIT=4011327 DCPMLA_STEPS="build tests demo breakdown" DCPMLA_BUDGET_S=330 timeout 340 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "device_multigpu rc $?"
T=build-multigpu/tests/peer/peer_communicator_test
DCPMLA_PEER_FENCE=all timeout 60 $T > "$R/peer_test_fence_all.log" 2>&1; log "peer test fence all rc $? $(tail -1 $R/peer_test_fence_all.log)"
X=build-multigpu/bench/multigpu/dcpmla_exchange_bench
DCPMLA_COMMIT=4011327 timeout 40 $X --out "$R/exchange.json" > "$R/exchange.txt" 2>&1; log "exchange rc $?"; cat "$R/exchange.txt"
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
for run in peer_r1 nccl_r1 peer_r2; do comm=${run%_*}
DCPMLA_COMMIT=4011327 timeout 40 $B --comm $comm --contexts 32768 --batches 32 --heads 128 --worlds 2 --steps 100 --no-launch-events --alone-calls 0 --out "$R/breakdown_$run.json" > "$R/breakdown_$run.txt" 2>&1; log "breakdown $run rc $?"
grep -E "^ 2 " "$R/breakdown_$run.txt"
done
for comm in peer nccl; do
DCPMLA_COMMIT=4011327 timeout 60 $B --comm $comm --contexts 131072 --batches 1 8 --heads 128 96 --worlds 1 2 --steps 100 --no-launch-events --alone-calls 0 --out "$R/${comm}_w12_128k.json" > "$R/${comm}_w12_128k.txt" 2>&1; log "$comm 128K rc $?"
grep -E "target" "$R/${comm}_w12_128k.txt" | cut -c1-180
done
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
