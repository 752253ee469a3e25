#!/usr/bin/env bash
# Multi-GPU validation and benchmark, on a machine with 2 (or more) GPUs, nvcc, CMake, ninja and
# NCCL (no network needed): configures a Release build with the CUDA backend and the NCCL
# communicator into build-multigpu, builds what the multi-GPU checks need, runs the ctest labels
# multigpu and nccl, `dcpmla demo --backend cuda --dcp W --gpus W` over NCCL and over the peer
# communicator (both combines, bf16 and fp8 caches, and one DeepSeek-sized batch), the step
# breakdown at 32K context x 32 requests, H 128, W = 2 and, with more GPUs, W = all of them, over
# both communicators (each collective and kernel of the query gather and the combine, each
# collective timed alone; once more without events between launches), dcpmla_exchange_bench
# (each collective alone, both communicators, eager and from a CUDA graph) and
# dcpmla_multigpu_bench over its grid (NCCL unless DCPMLA_BENCH_ARGS says --comm peer). Every
# log and JSON goes to $OUT (default ./out).
#
# A failing step is logged and the script goes on; the exit status is non-zero when any step
# failed. DCPMLA_STEPS picks steps (default "build tests demo breakdown exchange bench"); build
# outputs are reused, so a later run can take, say, DCPMLA_STEPS="build breakdown".
# DCPMLA_COMMIT is recorded with the benchmark (default: git describe --always --dirty where .git
# exists; "-dirty" marks a tree that differs from the HEAD its git metadata names).
#
#   run: scripts/device_multigpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5  # CMake 4 and the older config files of the deps
# NVLink multicast (NVLS) stays off: on a shared machine a program using it can take the host's
# GPUs out of service.
export NCCL_NVLS_ENABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
STEPS=${DCPMLA_STEPS:-build tests demo breakdown exchange bench}
JOBS=$(nproc 2>/dev/null || echo 8)
START=$(date +%s)
BUILD=build-multigpu
log() { echo "== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/summary.txt"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
status=0
fail() {
  status=1
  log "FAIL: $*"
}

# Each step's timeout is capped so that the whole script ends within DCPMLA_TIME_LIMIT_S seconds.
LIMIT=${DCPMLA_TIME_LIMIT_S:-560}
left() {
  local l=$((LIMIT - ($(date +%s) - START)))
  [ "$l" -gt 10 ] && echo "$l" || echo 10
}
cap() {
  local l
  l=$(left)
  [ "$1" -lt "$l" ] && echo "$1" || echo "$l"
}

GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
GPUS=${GPUS:-0}
# The DCP world of the demo, the tests and the breakdown: every GPU present, at most 8.
W=$((GPUS > 8 ? 8 : GPUS))
# The breakdown runs W = 2 and, on a larger machine, W as well.
BREAKDOWN_WORLDS=(2)
[ "$W" -gt 2 ] && BREAKDOWN_WORLDS+=("$W")
COMMIT=${DCPMLA_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}

{
  echo "steps: $STEPS"
  echo "commit: $COMMIT"
  git status --short 2>/dev/null | head -50 || true
  nvidia-smi || true
  nvidia-smi topo -m || true
  nvcc --version || true
  cmake --version || true
  c++ --version || true
  ls -l /usr/include/nccl.h /usr/local/cuda/include/nccl.h 2>&1 || true
  grep -E '^#define NCCL_(MAJOR|MINOR|PATCH)' /usr/include/nccl.h 2>/dev/null || true
  (ldconfig -p 2>/dev/null | grep -i nccl) || true
  head -2 /etc/os-release 2>/dev/null || true
  env | grep -E '^(NCCL|CUDA)_' || true
} > "$OUT/env.txt" 2>&1
log "environment in env.txt; $GPUS GPU(s), DCP world for the demo: $W"

# --- build --------------------------------------------------------------------------------
TARGETS=(dcpmla_tool dcpmla_multigpu_bench nccl_host_test nccl_communicator_test nccl_dcp_test
  nccl_processes_test nccl_rank_process peer_host_test peer_communicator_test dcpmla_exchange_bench)
if want build; then
  log "configure + build (Release, CUDA sm_90a, NCCL): ${TARGETS[*]}"
  { cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON -DDCPMLA_NCCL=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90a -DDCPMLA_BUILD_TESTS=ON -DDCPMLA_BUILD_BENCH=ON &&
    timeout "$(cap 300)" cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"; } \
    >> "$OUT/build.log" 2>&1
  build_rc=$?
  grep -E "NCCL|error|warning:" "$OUT/build.log" | head -30
  if [ $build_rc -ne 0 ]; then
    tail -30 "$OUT/build.log"
    fail "build (rc $build_rc, see build.log); later steps use whatever was built"
  else
    log "build done"
  fi
fi

# --- tests --------------------------------------------------------------------------------
if want tests; then
  log "ctest -L multigpu and -L nccl (multi-GPU tests run one at a time)"
  timeout "$(cap 240)" ctest --test-dir "$BUILD" -L '^(multigpu|nccl)$' --output-on-failure \
    -j 4 --timeout 230 2>&1 | tee "$OUT/multigpu_tests.log" | tail -30
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "multigpu / nccl tests (see multigpu_tests.log)"
  if grep -q "Skipped\|Not Run" "$OUT/multigpu_tests.log"; then
    log "WARNING: some tests were skipped or not run (fewer than 2 GPUs? see multigpu_tests.log)"
  fi
fi

# --- demo ---------------------------------------------------------------------------------
if want demo; then
  if [ "$W" -lt 2 ]; then
    fail "demo needs 2 GPUs, found $GPUS"
  else
    for comm in nccl peer; do
      for dtype in bf16 fp8; do
        for combine in ag_rs a2a; do
          name="demo_${comm}_${dtype}_${combine}"
          log "dcpmla demo --backend cuda --dcp $W --gpus $W --comm $comm --dtype $dtype --combine $combine"
          timeout "$(cap 60)" "$BUILD/tools/dcpmla" demo --backend cuda --dcp "$W" --gpus "$W" \
            --comm "$comm" --dtype "$dtype" --combine "$combine" > "$OUT/$name.log" 2>&1
          rc=$?
          tail -8 "$OUT/$name.log"
          [ $rc -eq 0 ] || fail "$name (rc $rc, see $name.log)"
        done
      done
      # DeepSeek-sized: 128 heads, 16 requests, contexts up to 8K.
      name="demo_${comm}_h128"
      log "dcpmla demo --backend cuda --dcp $W --gpus $W --comm $comm --heads 128 --requests 16 --max-context 8192"
      timeout "$(cap 120)" "$BUILD/tools/dcpmla" demo --backend cuda --dcp "$W" --gpus "$W" \
        --comm "$comm" --heads 128 --requests 16 --max-context 8192 --combine a2a \
        > "$OUT/$name.log" 2>&1
      rc=$?
      tail -8 "$OUT/$name.log"
      [ $rc -eq 0 ] || fail "$name (rc $rc, see $name.log)"
    done
  fi
fi

# --- launch breakdown of the query gather and the combine ----------------------------------
BENCH="$BUILD/bench/multigpu/dcpmla_multigpu_bench"
if want breakdown; then
  if [ "$W" -lt 2 ]; then
    fail "breakdown needs 2 GPUs, found $GPUS"
  elif [ ! -x "$BENCH" ]; then
    fail "dcpmla_multigpu_bench was not built"
  else
    # 32K x 32, H 128 (Q 1 and ragged), W = 2 (and W); 100 steps, each collective 200 calls alone.
    for comm in nccl peer; do
      for mode in events noevents; do
        extra=(--alone-calls 200)
        [ "$mode" = noevents ] && extra=(--no-launch-events --alone-calls 0)
        name="multigpu_breakdown_${comm}_$mode"
        log "dcpmla_multigpu_bench --comm $comm --contexts 32768 --batches 32 --heads 128 --worlds ${BREAKDOWN_WORLDS[*]} ${extra[*]}"
        DCPMLA_COMMIT="$COMMIT" timeout "$(cap 120)" "$BENCH" --comm "$comm" --contexts 32768 \
          --batches 32 --heads 128 --worlds "${BREAKDOWN_WORLDS[@]}" --steps 100 --budget-s 90 \
          --out "$OUT/$name.json" "${extra[@]}" > "$OUT/$name.txt" 2>&1
        rc=$?
        cat "$OUT/$name.txt"
        [ $rc -eq 0 ] || fail "$name (rc $rc, see $name.txt)"
      done
    done
  fi
fi

# --- each collective alone ----------------------------------------------------------------
if want exchange; then
  EXCHANGE="$BUILD/bench/multigpu/dcpmla_exchange_bench"
  if [ "$W" -lt 2 ]; then
    fail "exchange needs 2 GPUs, found $GPUS"
  elif [ ! -x "$EXCHANGE" ]; then
    fail "dcpmla_exchange_bench was not built"
  else
    log "dcpmla_exchange_bench --comm nccl peer"
    timeout "$(cap 120)" "$EXCHANGE" --comm nccl peer --commit "$COMMIT" \
      --out "$OUT/exchange_bench.json" > "$OUT/exchange_bench.txt" 2>&1
    rc=$?
    tail -40 "$OUT/exchange_bench.txt"
    [ $rc -eq 0 ] || fail "exchange bench (rc $rc, see exchange_bench.txt)"
  fi
fi

# --- benchmark ----------------------------------------------------------------------------
if want bench; then
  if [ -x "$BENCH" ]; then
    shape_s=$(($(left) - 45))
    [ "$shape_s" -gt 30 ] || shape_s=30
    log "dcpmla_multigpu_bench (${shape_s}s for its shapes; JSON rewritten per shape)"
    # DCPMLA_BENCH_ARGS is split into words on purpose (several options).
    # shellcheck disable=SC2086
    DCPMLA_COMMIT="$COMMIT" timeout "$(cap $((shape_s + 40)))" \
      "$BENCH" --out "$OUT/multigpu_bench.json" \
      --budget-s "$shape_s" ${DCPMLA_BENCH_ARGS:-} 2>&1 | tee "$OUT/multigpu_bench.txt" | tail -80
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "multigpu benchmark (see multigpu_bench.txt)"
  else
    fail "dcpmla_multigpu_bench was not built"
  fi
fi

log "done, status $status"
exit $status
