#!/usr/bin/env bash
# Session 15, call 1: main (1dffa9b, v3) against wip/seesaw-loader (34f8894: v8, the seesaw fed
# by a loader warp) in both orders (ssl: S of the other's next tile before its wait for P;
# sslpv: after its P.V), whole benchmark 3x alternating; ssl validated (GPU tests incl. the new
# rising-scores test, sanitizers); main's cuda_backend_test built alongside and run after.
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
X=$PWD/devrun/s15-extra
mkdir -p "$X"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$X/gpu_state_start.txt" 2>&1
(cd devrun/s15/base && cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=Release > "$X/base_test_cmake.log" 2>&1 &&
  cmake --build build-test --target cuda_backend_test > "$X/base_test_build.log" 2>&1; echo "base test build rc $?" > "$X/base_test_build_rc.txt") &
timeout 520 scripts/device_ab.sh devrun/s15 --validate ssl --reps 3 base ssl sslpv
echo "device_ab rc $?" >> "$OUT/summary.txt"
wait
cat "$X/base_test_build_rc.txt" >> "$OUT/summary.txt"
(cd devrun/s15/base && timeout 60 build-test/tests/cuda/cuda_backend_test --gtest_filter='*Rising*:*DecodeMatchesCpu*' > "$X/base_backend_test.txt" 2>&1; echo "base rising+decode tests rc $?" >> "$OUT/summary.txt")
tail -3 "$X/base_backend_test.txt" >> "$OUT/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$X/gpu_state_end.txt" 2>&1
(cd "$X" && tar czf "$OUT/base_tests_outputs.tgz" .)
