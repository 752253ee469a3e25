#!/usr/bin/env bash
# Session 13 call 7 (one H200): L2 prefetch hints on the threads' 16-byte copies (cp_async16 in
# decode_tc_common.cuh: fp8 cache bytes, the query, the bf16 tiles the threads copy): base =
# main 00e69b7 (none), pf128 = .L2::128B, pf256 = .L2::256B. The cache_formats group (fp8 and
# block sizes 16, 32) three times each, alternating.
set -u
cd "$(dirname "$0")/s13" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
C=$(cat COMMIT)
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
for v in base pf128 pf256; do
  (cd $v && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF > "$R/${v}_cmake.log" 2>&1 && cmake --build build-gpu --target dcpmla_gpu_bench > "$R/${v}_build.log" 2>&1; echo "$v build rc $?" >> "$R/summary.txt") &
done
wait
log "builds done"
for rep in 1 2 3; do
  for v in base pf128 pf256; do
    timeout 60 $v/build-gpu/bench/gpu/dcpmla_gpu_bench --filter cache_formats --commit "$C-$v" --out "$R/${v}_r$rep.json" > "$R/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash ../../scripts/pack_outputs.sh "$R"
