#!/usr/bin/env bash
# Session 17, call 5: v3 stamped with the stamps in shared memory (wip/late-half 2nd stamps
# commit, DCPMLA_LATE_HALF 0 = main's order): (64, 4096, 128, 8) and (64, 4096, 128, 1), two
# runs each; main (base) beside, no stamps.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
for v in st0s base; do
  (cd devrun/s17/$v && flags=""; [ $v != base ] && flags="-DDCPMLA_STAMPS";
   cmake -S . -B build-st -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_BUILD_TESTS=OFF \
     -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CUDA_FLAGS="$flags" > "$OUT/${v}_cmake.log" 2>&1 &&
   cmake --build build-st --target dcpmla_gpu_bench > "$OUT/${v}_build.log" 2>&1
   echo "$v build rc $?" >> "$OUT/summary.txt") &
done
wait
commit=$(cat devrun/s17/COMMIT)
for rep in 1 2; do
  for q in 8 1; do
    for v in st0s base; do
      DCPMLA_STAMPS_OUT="$OUT/${v}_q${q}_stamps_r$rep.txt" timeout 60 \
        devrun/s17/$v/build-st/bench/gpu/dcpmla_gpu_bench --shape 64,4096,128,$q \
        --commit "$commit-$v" --out "$OUT/${v}_q${q}_r$rep.json" > "$OUT/${v}_q${q}_r$rep.txt" 2>&1
      echo "$v q$q r$rep rc $?" >> "$OUT/summary.txt"
    done
  done
done
cat "$OUT/summary.txt"; grep -h "^custom" "$OUT"/*_r*.txt
bash scripts/pack_outputs.sh "$OUT"
