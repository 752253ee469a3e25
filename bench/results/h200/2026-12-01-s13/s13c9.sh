#!/usr/bin/env bash
# Session 13 call 9 (one H200): new = narrow fp8 tiles widened by all three warpgroups (three
# chunks each; the output threads signal the scores warpgroup that their staged bytes landed)
# instead of the output warpgroups' five and four; base = main (COMMIT). new validated by
# scripts/device_gpu.sh; then the cache_formats group (the fp8 shapes) three times each,
# alternating, and the whole benchmark once each.
set -u
cd "$(dirname "$0")/s13" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT); CN=$(cat COMMIT_NEW)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
(cd base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/base_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/base_build.log" 2>&1; echo "base build rc $?" >> "$R/summary.txt") &
(cd new && OUT="$R/new_gpu" DCPMLA_COMMIT="$CN" DCPMLA_BENCH_ARGS="--filter cache_formats" timeout 400 bash scripts/device_gpu.sh > "$R/new_device_gpu.out" 2>&1; echo "new device_gpu rc $?" >> "$R/summary.txt")
wait
cat "$R/new_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
log "builds done"
for rep in 1 2 3; do
  for v in base new; do
    c=$C; [ $v = new ] && c=$CN
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --filter cache_formats --commit "$c-$v" --out "$R/${v}_fp8_r$rep.json" > "$R/${v}_fp8_r$rep.txt" 2>&1
    log "$v fp8 r$rep rc $?"
  done
done
for v in base new; do
  c=$C; [ $v = new ] && c=$CN
  timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --commit "$c-$v" --out "$R/${v}_all.json" > "$R/${v}_all.txt" 2>&1
  log "$v all rc $?"
done
bash ../../scripts/pack_outputs.sh "$R"
