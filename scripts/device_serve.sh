#!/usr/bin/env bash
# The serving harness on a GPU machine: python -m dcpmla.serve with the model on the GPU and the
# decode through BatchMLADecodeWrapper, for W = 1 (speculation on and off) with CUDA graphs
# captured at warm-up for capture sizes 1..64 (and the same run eagerly, whose tokens must be the
# same), the start-up failure's W = 2, K = 7 (README) with warm-up through capture sizes 1..64, W = 4, the 96-head
# model at W = 8 with an fp8 cache, and batch 64 with 7 drafts (W = 1 with graphs up to 512 rows,
# and W = 2). Ranks beyond the GPUs run simulated on them (one process each, gloo, collectives
# through the host), eagerly: a graph cannot capture collectives staged through the host. Uses
# build-gpu's Python modules (scripts/device_gpu.sh builds them; built here when missing). One
# JSON report, plot and log per run in $OUT/serve, a line each in $OUT/serve/summary.txt; the
# exit status is non-zero when a run fails or disagrees with the oracle where its margin is clear.
#
#   run: scripts/device_serve.sh [name...]   (default: every run below)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/serve"
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
JOBS=$(nproc 2>/dev/null || echo 8)
START=$(date +%s)
log() { echo "== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/serve/summary.txt"; }

if [ ! -f build-gpu/python/dcpmla/_torch_ops.so ]; then
  log "building the Python modules into build-gpu"
  # shellcheck source=scripts/device_deps.sh
  source scripts/device_deps.sh
  { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
      -DDCPMLA_NCCL=OFF ${prefix_arg[@]+"${prefix_arg[@]}"} &&
    cmake --build build-gpu -j "$JOBS" --target dcpmla_python dcpmla_torch; } \
    > "$OUT/serve/build.log" 2>&1 || { tail -20 "$OUT/serve/build.log"; exit 1; }
fi
export PYTHONPATH=$PWD/build-gpu/python

# name, then the harness's options. The W = 1 runs ask for CUDA graphs (--cuda-graphs: an error
# rather than an eager run if they cannot be captured); each report's cuda_graphs section and the
# summary line record how many were captured and how many steps replayed or ran eagerly.
declare -A runs=(
  [w1_spec]="--world 1 -K 7 --requests 16 --max-new-tokens 32 --max-capture-size 64 --cuda-graphs"
  [w1_spec_eager]="--world 1 -K 7 --requests 16 --max-new-tokens 32 --max-capture-size 64
    --no-cuda-graphs"
  [w1_nospec]="--world 1 -K 0 --requests 16 --max-new-tokens 32 --max-capture-size 64
    --cuda-graphs"
  [seed_w2]="--world 2 -K 7 --max-capture-size 64 --requests 16 --max-new-tokens 32"
  [w4]="--world 4 -K 7 --requests 16 --max-new-tokens 32"
  [kimi_w8_fp8]="--variant kimi --world 8 -K 7 --kv-dtype fp8 --q-dtype bf16 --requests 16 --k-scale 0.05
    --margin-delta 0.25"
  [batch64_w1]="--world 1 -K 7 --requests 64 --max-running 64 --max-batch-tokens 512
    --num-blocks 1024 --arrival-gap 0 --capture-sizes 1 2 4 8 16 32 64 128 256 384 512
    --cuda-graphs"
  [batch64_w2]="--world 2 -K 7 --requests 64 --max-running 64 --max-batch-tokens 512
    --num-blocks 1024 --arrival-gap 0"
)
order=(w1_spec w1_spec_eager w1_nospec seed_w2 w4 kimi_w8_fp8 batch64_w1 batch64_w2)
[ $# -gt 0 ] && order=("$@")
status=0
declare -A ran=()
for name in "${order[@]}"; do
  # shellcheck disable=SC2086
  timeout 300 python3 -m dcpmla.serve --device cuda --decode torch --no-progress \
    --report "$OUT/serve/$name.json" --plot "$OUT/serve/$name.png" ${runs[$name]} \
    > "$OUT/serve/$name.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  ran[$name]=1
  log "$name (rc $rc): $(tail -1 "$OUT/serve/$name.log")"
done
# The graph path must serve the eager path's tokens (both ran the same workload).
if [ -n "${ran[w1_spec]:-}" ] && [ -n "${ran[w1_spec_eager]:-}" ]; then
  if python3 -c 'import json, sys
a, b = (json.load(open(path)) for path in sys.argv[1:])
sys.exit(a["generated"] != b["generated"])' "$OUT/serve/w1_spec.json" "$OUT/serve/w1_spec_eager.json"
  then
    log "w1_spec (CUDA graphs) and w1_spec_eager (eager): the same tokens"
  else
    log "FAIL: w1_spec (CUDA graphs) and w1_spec_eager (eager) served different tokens"
    status=1
  fi
fi
log "done, status $status"
exit $status
