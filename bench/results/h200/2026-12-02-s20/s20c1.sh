#!/usr/bin/env bash
# Session 20, call 1 (one H200; no multi-GPU kind lent): main validated on one GPU and what one
# GPU allows of issues 4 and 5.
#  1. scripts/device_gpu.sh: build, GPU tests, benchmark (with the new dcp_scaling group:
#     rank 0's decode at W = 1, 2, 4, 8), micro-benchmarks, demo, compute-sanitizer.
#  2. scripts/device_multigpu.sh DCPMLA_STEPS="build tests": the NCCL build and the multigpu /
#     nccl labels (the 2-GPU tests skip on one GPU; the host-side ones run).
#  3. nccl_rank_process at world 1 (NCCL, then the peer communicator joined over it): the
#     multi-process helper's checks, including the collectives captured in a CUDA graph and
#     replayed with new inputs (fc587f5), on a GPU for the first time (W = 1 only).
#  4. Two NCCL ranks in two processes on the same GPU (expected: NCCL refuses duplicate GPUs).
#  5. dcpmla demo, every rank simulated on GPU 0: W = 4 and 8, bf16 / fp8, ag_rs / a2a, and a
#     Kimi K3-like W = 8, H 96 batch, and a W = 8, H 128, 128K one.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/out}
export DCPMLA_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo "${DCPMLA_COMMIT:-unknown}")
START=$(date +%s)
stamp() { echo "== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/call.txt"; }
stamp "commit $DCPMLA_COMMIT"
mkdir -p "$OUT/gpu" "$OUT/mg" "$OUT/procs" "$OUT/demos"
OUT=$OUT/gpu DCPMLA_BUDGET_S=230 timeout 250 bash scripts/device_gpu.sh > "$OUT/gpu/stdout.txt" 2>&1
stamp "device_gpu.sh rc $?"
OUT=$OUT/mg DCPMLA_STEPS="build tests" DCPMLA_BUDGET_S=150 timeout 160 bash scripts/device_multigpu.sh > "$OUT/mg/stdout.txt" 2>&1
stamp "device_multigpu.sh build tests rc $?"
RP=build-multigpu/tests/nccl/nccl_rank_process
[ -x "$RP" ] || RP=$(find build-multigpu -name nccl_rank_process -type f | head -1)
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN
rm -f /tmp/dcpmla-id1
timeout 60 "$RP" --world 1 --rank 0 --device 0 --id-file /tmp/dcpmla-id1 --create-id --peer > "$OUT/procs/world1_nccl_peer.txt" 2>&1
stamp "rank process world 1 (nccl + peer) rc $?: $(tail -1 "$OUT/procs/world1_nccl_peer.txt")"
rm -f /tmp/dcpmla-id2
timeout 45 "$RP" --world 2 --rank 1 --device 0 --id-file /tmp/dcpmla-id2 > "$OUT/procs/same_gpu_rank1.txt" 2>&1 &
P1=$!
timeout 45 "$RP" --world 2 --rank 0 --device 0 --id-file /tmp/dcpmla-id2 --create-id > "$OUT/procs/same_gpu_rank0.txt" 2>&1
R0=$?
wait $P1
R1=$?
stamp "two NCCL ranks on GPU 0: rc $R0 / $R1: $(tail -1 "$OUT/procs/same_gpu_rank0.txt")"
DEMO=build-gpu/tools/dcpmla
run_demo() {
  local name=$1
  shift
  { echo "### dcpmla demo $*"; timeout 120 "$DEMO" demo "$@"; echo "rc $?"; } > "$OUT/demos/$name.txt" 2>&1
  stamp "demo $name: $(tail -2 "$OUT/demos/$name.txt" | tr '\n' ' ')"
}
for W in 4 8; do
  for dtype in bf16 fp8; do
    for combine in ag_rs a2a; do
      run_demo "w${W}_${dtype}_${combine}" --backend cuda --dcp $W --heads $((16 * W)) --dtype $dtype --combine $combine --max-context 32768
    done
  done
done
run_demo kimi_w8_h96 --backend cuda --dcp 8 --heads 96 --requests 32 --max-drafts 7 --max-context 32768
run_demo w8_h128_128k --backend cuda --dcp 8 --heads 128 --requests 8 --max-drafts 7 --max-context 131072 --dtype fp8 --combine a2a
stamp "done"
