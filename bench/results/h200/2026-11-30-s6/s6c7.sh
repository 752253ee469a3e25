#!/usr/bin/env bash
# Session 6 call 7 (branch wip/v6-seesaw): is the seesaw's refill cost waiting (latency) or
# moving bytes (bandwidth)? Diag 16 issues every refill but never waits for one after round 0;
# then ncu counters of v3 and the seesaw on (64, 4096, 128, 8).
set -u
cd "$(dirname "$0")/s6" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
C=${1:-unknown}
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
log "build $C with -DDCPMLA_SEESAW_DIAG"
timeout 240 bash -c "cmake -S . -B build-diag -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
  -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_NCCL=OFF -DCMAKE_CUDA_FLAGS=-DDCPMLA_SEESAW_DIAG \
  > $R/build.log 2>&1 && cmake --build build-diag -j 16 --target dcpmla_gpu_bench >> $R/build.log 2>&1" ||
  { log "build failed"; tail -30 "$R/build.log"; exit 1; }
B=build-diag/bench/gpu/dcpmla_gpu_bench
run() {  # name, env...
  local name=$1; shift
  env "$@" timeout 60 $B --filter flashmla_table --commit "$C+$name" --out "$R/$name.json" > "$R/$name.txt" 2>&1
  log "$name rc $?: $(awk 'NR>2 {printf "%s ", $9}' "$R/$name.txt")"
}
for rep in 1 2; do
  run v3_r$rep DCPMLA_DECODE_KERNEL=v3
  run seesaw_r$rep DCPMLA_DECODE_KERNEL=seesaw
  run seesaw_d1_r$rep DCPMLA_DECODE_KERNEL=seesaw DCPMLA_SEESAW_DIAG=1
  run seesaw_d16_r$rep DCPMLA_DECODE_KERNEL=seesaw DCPMLA_SEESAW_DIAG=16
done
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_op_read.sum,lts__t_sector_op_read_hit_rate.pct
M+=,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed
M+=,l1tex__m_xbar2l1tex_read_bytes.sum,smsp__cycles_active.avg
for k in v3 seesaw; do
  DCPMLA_DECODE_KERNEL=$k timeout 120 ncu --clock-control none --kernel-name regex:decode --launch-skip 3 \
    --launch-count 1 --metrics "$M" $B --filter flashmla_table --index 3 --reps 5 --out "$R/ncu_$k.json" \
    > "$R/ncu_$k.txt" 2>&1
  log "ncu $k rc $?"
  grep -E "gpu__time|dram__|lts__|sm__pipe|l1tex__|smsp__" "$R/ncu_$k.txt" | tee -a "$R/summary.txt"
done
bash ../../scripts/pack_outputs.sh "$R"
