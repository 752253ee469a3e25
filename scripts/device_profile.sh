#!/usr/bin/env bash
# Nsight Compute profile of the decode kernel on a GPU machine, after scripts/device_gpu.sh has
# built build-gpu: for each shape, one decode launch's speed-of-light, pipe utilisation,
# shared-memory, warp-stall and L2 sections, and how much of the KV reads the L2's request
# coalescer merged (requests of several SMs for the same sectors answered by one L2 lookup), in
# $OUT/profile-<n>.txt. A shape is group:index (the index-th shape of that benchmark group;
# default: a compute-bound and the memory-bound FlashMLA shape), B,L,H,Q (a uniform bf16
# shape) or plan:B (the GPU planner's batch of B requests, with
# DCPMLA_PROFILE_KERNEL=plan_kernel). With FLASHMLA_DIR (a FlashMLA tree whose dense decode
# extension is built, see bench/gpu/vs_flashmla.py) each B,L,H,Q shape is profiled in FlashMLA's
# dense decode as well (bench/gpu/flashmla_calls.py), into $OUT/profile-<n>-flashmla.txt, with
# the same sections.
# With DCPMLA_PROFILE_SOURCE=1 the source-counter section is collected too and the
# per-instruction (SASS) stall samples are written as CSV to $OUT/profile-<n>-sass.csv.
# DCPMLA_PROFILE_KERNEL overrides the kernel-name regular expression (default: every kernel whose
# name contains "decode").
#
#   run: [FLASHMLA_DIR=DIR] scripts/device_profile.sh [group:index | B,L,H,Q | plan:B]...
#        (after scripts/device_gpu.sh)
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
shapes=("$@")
[ $# -gt 0 ] || shapes=(flashmla_table:0 flashmla_table:4)
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
metrics+="smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__cycles_active.avg,"
# KV reads that reach the L2 slices, and those the request coalescer answered together.
metrics+="lts__t_sectors_srcunit_tex.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,"
metrics+="lrc__request_sectors_op_read_coalescable.sum,"
metrics+="lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum,"
metrics+="lrc__xbar2gpc_sectors_op_read.sum,lrc__lts2lrc_sectors_op_read.sum"
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
  --section WarpStateStats --section SchedulerStats --section Occupancy)
summary() {
  grep -E "Duration|SM Frequency|Elapsed Cycles|Throughput|Issued Ipc|Eligible Warps|issue_stalled|pipe_tensor|wavefronts|inst_executed|cycles|lts__|lrc__|dram__" \
    "$1" | awk '$NF+0 > 0.05 || !/issue_stalled/' | head -70
}
for spec in "${shapes[@]}"; do
  n=$((n + 1))
  if [[ $spec == *,* ]]; then
    shape_args=(--shape "$spec")
  elif [[ $spec == plan:* ]]; then
    shape_args=(--filter device_planning --planning-requests "${spec#plan:}")
  else
    shape_args=(--filter "${spec%%:*}" --index "${spec##*:}")
  fi
  # Past the 5 warm-up calls.
  # Clocks as in the benchmark (not locked to base), plus the stall reasons and pipe activity.
  source_args=()
  [ "${DCPMLA_PROFILE_SOURCE:-0}" = 1 ] &&
    source_args=(--section SourceCounters --export "/tmp/profile-$n" --force-overwrite)
  timeout 240 ncu --kernel-name "regex:${DCPMLA_PROFILE_KERNEL:-decode}" \
    --launch-skip 5 --launch-count 1 --clock-control none "${sections[@]}" \
    ${source_args[@]+"${source_args[@]}"} --metrics "$metrics" \
    "$bench" "${shape_args[@]}" --reps 1 --out /tmp/profile.json > "$OUT/profile-$n.txt" 2>&1
  echo "== profile $n ($spec): rc $?"
  if [ "${DCPMLA_PROFILE_SOURCE:-0}" = 1 ] && [ -f "/tmp/profile-$n.ncu-rep" ]; then
    # With --export the sections go to the report only: print them from it.
    ncu --import "/tmp/profile-$n.ncu-rep" --page details >> "$OUT/profile-$n.txt" 2>&1
    # Per-instruction stall samples (SASS), as CSV.
    ncu --import "/tmp/profile-$n.ncu-rep" --page source --print-source sass --csv \
      > "$OUT/profile-$n-sass.csv" 2> "$OUT/profile-$n-sass.err"
  fi
  summary "$OUT/profile-$n.txt"
  if [ -n "${FLASHMLA_DIR:-}" ] && [[ $spec == *,* ]]; then
    # FlashMLA's split-KV kernel of its 5th call (its metadata and combine kernels are skipped).
    timeout 240 ncu --kernel-name regex:splitkv_mla --launch-skip 4 --launch-count 1 \
      --clock-control none "${sections[@]}" --metrics "$metrics" \
      python3 bench/gpu/flashmla_calls.py --flashmla "$FLASHMLA_DIR" --shape "$spec" \
      > "$OUT/profile-$n-flashmla.txt" 2>&1
    echo "== profile $n ($spec), FlashMLA: rc $?"
    summary "$OUT/profile-$n-flashmla.txt"
  fi
done
