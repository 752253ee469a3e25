#!/usr/bin/env bash
# Session 20, call 2: call 1 again on the warm machine (its builds kept), since call 1's logs did
# not come back (more than 8 files under $OUT): device_gpu.sh (GPU tests, benchmark with the
# dcp_scaling group, sanitizers), the multigpu / nccl labels, nccl_rank_process at world 1 and two
# ranks on one GPU, and call 1's two W = 8 fp8 demos; everything packed into one archive.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/out}
START=$(date +%s)
stamp() { echo "== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/call.txt"; }
stamp "tree: $(git rev-parse --short HEAD 2>/dev/null) (the device's .git; the files are the session's working tree)"
mkdir -p "$OUT/gpu" "$OUT/mg" "$OUT/procs" "$OUT/demos"
OUT=$OUT/gpu timeout 200 bash scripts/device_gpu.sh > "$OUT/gpu/stdout.txt" 2>&1
stamp "device_gpu.sh rc $?"
OUT=$OUT/mg DCPMLA_STEPS="build tests" DCPMLA_BUDGET_S=120 timeout 130 bash scripts/device_multigpu.sh > "$OUT/mg/stdout.txt" 2>&1
stamp "device_multigpu.sh build tests rc $?"
RP=build-multigpu/tests/nccl/nccl_rank_process
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
stamp "two NCCL ranks on GPU 0: rc $R0 / $?: $(grep -h 'Duplicate\|error' "$OUT"/procs/same_gpu_rank*.txt | head -2 | tr '\n' ' ')"
run_demo() {
  local name=$1
  shift
  { echo "### dcpmla demo $*"; timeout 120 build-gpu/tools/dcpmla demo "$@"; echo "rc $?"; } > "$OUT/demos/$name.txt" 2>&1
  stamp "demo $name: $(tail -2 "$OUT/demos/$name.txt" | tr '\n' ' ')"
}
for combine in ag_rs a2a; do
  run_demo "w8_fp8_${combine}" --backend cuda --dcp 8 --heads 128 --dtype fp8 --combine $combine --max-context 32768
done
stamp "done"
cp "$OUT/gpu/summary.txt" "$OUT/gpu_summary.txt"
bash scripts/pack_outputs.sh "$OUT/gpu"; bash scripts/pack_outputs.sh "$OUT/mg"
tar czf "$OUT/all.tgz" -C "$OUT" gpu mg procs demos && rm -rf "$OUT/gpu" "$OUT/mg" "$OUT/procs" "$OUT/demos"
