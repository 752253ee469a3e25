#!/usr/bin/env bash
# Nsight Compute profile of the decode kernel on a GPU machine, after scripts/device_gpu.sh has
# built build-gpu: for each benchmark shape given as group:index (default: a compute-bound and the
# memory-bound FlashMLA shape), one decode launch's speed-of-light, pipe utilisation,
# shared-memory and warp-stall sections, in $OUT/profile-<n>.txt. With DCPMLA_PROFILE_SOURCE=1 the
# source-counter section is collected too and the per-instruction (SASS) stall samples are
# written as CSV to $OUT/profile-<n>-sass.csv. DCPMLA_PROFILE_KERNEL overrides the kernel-name
# regular expression (default: every kernel whose name contains "decode").
#
#   run: scripts/device_profile.sh [group:index]... (after scripts/device_gpu.sh)
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
stalls=""
for r in barrier long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle \
  lg_throttle membar dispatch_stall sleeping selected not_selected no_instruction branch_resolving \
  drain misc tex_throttle imc_miss; do
  stalls+="smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio,"
done
metrics="${stalls}sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,"
metrics+="sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,"
metrics+="l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,"
metrics+="smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__cycles_active.avg"
for spec in ${shapes[@]}; do
  group=${spec%%:*}
  index=${spec##*:}
  n=$((n + 1))
  # Past the 5 warm-up calls.
  # Clocks as in the benchmark (not locked to base), plus the stall reasons and pipe activity.
  source_args=()
  [ "${DCPMLA_PROFILE_SOURCE:-0}" = 1 ] &&
    source_args=(--section SourceCounters --export "/tmp/profile-$n" --force-overwrite)
  timeout 240 ncu --kernel-name "regex:${DCPMLA_PROFILE_KERNEL:-decode}" \
    --launch-skip 5 --launch-count 1 --clock-control none \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy \
    ${source_args[@]+"${source_args[@]}"} --metrics "$metrics" \
    "$bench" --filter "$group" --index "$index" --reps 1 --out /tmp/profile.json > "$OUT/profile-$n.txt" 2>&1
  echo "== profile $n ($spec): rc $?"
  if [ "${DCPMLA_PROFILE_SOURCE:-0}" = 1 ] && [ -f "/tmp/profile-$n.ncu-rep" ]; then
    # With --export the sections go to the report only: print them from it.
    ncu --import "/tmp/profile-$n.ncu-rep" --page details >> "$OUT/profile-$n.txt" 2>&1
    # Per-instruction stall samples (SASS), as CSV.
    ncu --import "/tmp/profile-$n.ncu-rep" --page source --print-source sass --csv \
      > "$OUT/profile-$n-sass.csv" 2> "$OUT/profile-$n-sass.err"
  fi
  grep -E "Duration|SM Frequency|Throughput|Issued Ipc|Eligible Warps|issue_stalled|pipe_tensor|wavefronts|inst_executed|cycles" \
    "$OUT/profile-$n.txt" | awk '$NF+0 > 0.05 || !/issue_stalled/' | head -60
done
