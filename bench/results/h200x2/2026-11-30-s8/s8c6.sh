#!/usr/bin/env bash
# Session 8 call 6 (2 H200s): main at 428601c. Which rank is slow in the bf16-payload variants over
# the peer communicator, and does it follow the rank or the GPU: the 32K x 32 breakdown over peer
# with the GPUs in order and swapped (CUDA_VISIBLE_DEVICES=1,0), over NCCL, and 128K x 8 over peer.
set -u
cd "$(dirname "$0")/s8/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg"
OUT="$R/mg" DCPMLA_COMMIT=428601c DCPMLA_STEPS="build" timeout 200 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "build rc $?"
B=build-multigpu/bench/multigpu/dcpmla_multigpu_bench
run() { name=$1; shift; DCPMLA_COMMIT=428601c timeout 60 "$@" --steps 100 --no-launch-events --alone-calls 0 --out "$R/$name.json" > "$R/$name.txt" 2>&1; log "$name rc $?"; grep -E "^ 2 |ranks" "$R/$name.txt" | cut -c1-150; }
run peer_order $B --comm peer --contexts 32768 --batches 32 --heads 128 --worlds 2
CUDA_VISIBLE_DEVICES=1,0 run peer_swapped $B --comm peer --contexts 32768 --batches 32 --heads 128 --worlds 2
run nccl_order $B --comm nccl --contexts 32768 --batches 32 --heads 128 --worlds 2
run peer_order_again $B --comm peer --contexts 32768 --batches 32 --heads 128 --worlds 2
run peer_128k $B --comm peer --contexts 131072 --batches 8 --heads 128 --worlds 1 2
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
