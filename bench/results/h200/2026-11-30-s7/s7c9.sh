#!/usr/bin/env bash
# Session 7 call 9 (one H200): per-kernel times of (1, 65536, 128, 1) at b7acaa1 and at main's
# head (call 8: 7a23db8 slowed it from ~60 to ~71 us), from nsys (or ncu if nsys is missing).
set -u
cd "$(dirname "$0")/s7" || exit 1
export PATH="/usr/local/cuda/bin:$PATH:/opt/nvidia/nsight-systems/bin"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
for t in base head; do
  (cd $t && timeout 150 bash -c "cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=OFF \
    -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON > $R/build_$t.log 2>&1 && cmake --build build-b -j 8 --target dcpmla_gpu_bench >> $R/build_$t.log 2>&1") &
done
wait
log "builds done; nsys: $(command -v nsys || ls /opt/nvidia 2>&1 | head -3); ncu: $(command -v ncu)"
for t in base head; do
  B=$t/build-b/bench/gpu/dcpmla_gpu_bench
  timeout 30 $B --filter flashmla_table --index 9 --out "$R/${t}_alone.json" > "$R/${t}_alone.txt" 2>&1
  log "$t alone: $(tail -1 "$R/${t}_alone.txt" | cut -c1-110)"
  if command -v nsys > /dev/null; then
    timeout 90 nsys profile -o "$R/$t" --force-overwrite true $B --filter flashmla_table --index 9 --out /tmp/x.json > "$R/${t}_nsys.log" 2>&1
    timeout 60 nsys stats --report cuda_gpu_kern_sum "$R/$t.nsys-rep" > "$R/${t}_kernels.txt" 2>&1
    rm -f "$R/$t.nsys-rep" "$R/$t.sqlite"
  else
    timeout 120 ncu --metrics gpu__time_duration.sum --launch-skip 40 --launch-count 12 $B --filter flashmla_table --index 9 --out /tmp/x.json > "$R/${t}_kernels.txt" 2>&1
  fi
  log "$t profile rc $?"
  grep -E "decode|merge|fill|Time|gpu__time" "$R/${t}_kernels.txt" | cut -c1-200 | head -14
done
bash ../../scripts/pack_outputs.sh "$R"
