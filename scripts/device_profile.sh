#!/usr/bin/env bash
# Nsight Compute profile of the decode kernel on the GPU machine, after scripts/device_gpu.sh has
# built build-gpu: for each benchmark group given (default: the memory-bound and a compute-bound
# FlashMLA shape), the first decode launch's speed-of-light, pipe utilisation, shared-memory and
# warp-stall sections. Reports go to $OUT/profile-<n>.txt.
#
#   run: scripts/device_profile.sh [--filter group]... (after scripts/device_gpu.sh)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
bench=build-gpu/bench/gpu/dcpmla_gpu_bench
[ -x "$bench" ] || { echo "build-gpu is missing: run scripts/device_gpu.sh first" >&2; exit 1; }
command -v ncu > /dev/null || { echo "ncu not found" >&2; exit 1; }
# group:index (the index-th shape of that benchmark group); default: (64, 4096, 128, 1) and the
# memory-bound (128, 8192, 16, 1) of the FlashMLA table.
shapes=("${@:-flashmla_table:0 flashmla_table:4}")
n=0
for spec in ${shapes[@]}; do
  group=${spec%%:*}
  index=${spec##*:}
  n=$((n + 1))
  # Past the 5 warm-up calls.
  timeout 240 ncu --kernel-name regex:decode_tc_kernel --launch-skip 5 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy \
    "$bench" --filter "$group" --index "$index" --reps 1 --out /tmp/profile.json > "$OUT/profile-$n.txt" 2>&1
  echo "== profile $n ($spec): rc $?"
  grep -E "Duration|Throughput|Pipe|Shared|Stall|Issued|Eligible|Warp Cycles|SM Busy|Tensor" \
    "$OUT/profile-$n.txt" | head -40
done
