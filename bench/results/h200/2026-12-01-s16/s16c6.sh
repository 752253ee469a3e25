#!/usr/bin/env bash
# Session 16, call 6: SM-clock stamps of block 0 of the seesaw (wip/seesaw-stamps 5181856) on
# (64, 4096, 128, 8): P.V first (ssP, the branch's default) and S first (ssS), each built with
# -DDCPMLA_STAMPS; the shape's time from the same builds, and main (base) for reference.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
for v in ssP ssS base; do
  (cd devrun/s16/$v && flags=""; [ $v != base ] && flags="-DDCPMLA_STAMPS";
   cmake -S . -B build-st -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF \
     -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CUDA_FLAGS="$flags" > "$OUT/${v}_cmake.log" 2>&1 &&
   cmake --build build-st --target dcpmla_gpu_bench > "$OUT/${v}_build.log" 2>&1
   echo "$v build rc $?" >> "$OUT/summary.txt") &
done
wait
for rep in 1 2; do
  for v in ssP ssS base; do
    DCPMLA_STAMPS_OUT="$OUT/${v}_stamps_r$rep.txt" timeout 60 devrun/s16/$v/build-st/bench/gpu/dcpmla_gpu_bench \
      --shape 64,4096,128,8 --commit "5181856-$v" --out "$OUT/${v}_r$rep.json" > "$OUT/${v}_r$rep.txt" 2>&1
    echo "$v r$rep rc $?" >> "$OUT/summary.txt"
  done
done
cat "$OUT/summary.txt"; grep -h "custom" "$OUT"/*_r*.txt
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz ./* && find . -maxdepth 1 -type f ! -name all.tgz ! -name summary.txt -delete)
