#!/usr/bin/env bash
# A/B of source snapshots on the GPU machine (one device call): builds the benchmark of every
# variant in parallel (the one named by --validate through scripts/device_gpu.sh: build, GPU
# tests, sanitizers, demo, micro-benchmarks), then runs the whole benchmark (or what
# --bench-args selects) --reps times per variant, variants alternating, so drift in the card's
# clocks falls on all of them alike. Output under $OUT: <variant>_r<k>.{json,txt}, build logs,
# summary.txt; packed into outputs.tgz by scripts/pack_outputs.sh. Compare two variants with
# bench/results/h200/2026-12-01-s11/ab.py "<a>_r*.json" "<b>_r*.json". One shape only:
# --bench-args "--shape B,L,H,Q". --stamps builds the benchmarks with -DDCPMLA_STAMPS and sets
# DCPMLA_STAMPS_OUT, so a variant whose kernel records per-step stamps (branch
# wip/seesaw-stamps) writes <variant>_stamps_r<k>.txt; other variants ignore both.
#
# DIR holds one snapshot per variant (DIR/<variant>, made by scripts/snapshot.sh) and COMMIT, the
# commit the variants start from; a variant's results carry "<COMMIT>-<variant>".
#
#   run (from the repository root): scripts/device_ab.sh DIR [--validate V] [--reps N]
#                                   [--bench-args "ARGS"] [--stamps] VARIANT...
set -uo pipefail
usage() {
  echo "usage: $0 DIR [--validate VARIANT] [--reps N] [--bench-args ARGS] [--stamps] VARIANT..." >&2
  exit 2
}
[ $# -ge 2 ] || usage
dir=$1
shift
validate="" reps=3 bench_args="" stamps=0
variants=()
while [ $# -gt 0 ]; do
  case $1 in
    --validate) validate=${2:?--validate needs a variant}; shift 2 ;;
    --reps) reps=${2:?--reps needs a count}; shift 2 ;;
    --bench-args) bench_args=${2:?--bench-args needs arguments}; shift 2 ;;
    --stamps) stamps=1; shift ;;
    -*) usage ;;
    *) variants+=("$1"); shift ;;
  esac
done
[ ${#variants[@]} -ge 1 ] || usage
for v in "${variants[@]}"; do
  [ -d "$dir/$v" ] || { echo "$0: no snapshot $dir/$v" >&2; exit 2; }
done
[ -z "$validate" ] || [ -d "$dir/$validate" ] || { echo "$0: no snapshot $dir/$validate" >&2; exit 2; }
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PATH="/usr/local/cuda/bin:$PATH"
commit=$(cat "$dir/COMMIT" 2>/dev/null || echo unknown)
log() { echo "== [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
flags=""
[ "$stamps" = 1 ] && flags="-DDCPMLA_STAMPS"

for v in "${variants[@]}"; do
  [ "$v" = "$validate" ] && continue
  (cd "$dir/$v" && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDCPMLA_BUILD_TESTS=OFF -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CUDA_FLAGS="$flags" \
    > "$OUT/${v}_cmake.log" 2>&1 &&
    cmake --build build-gpu --target dcpmla_gpu_bench > "$OUT/${v}_build.log" 2>&1
  echo "$v build rc $?" >> "$OUT/summary.txt") &
done
if [ -n "$validate" ]; then
  (cd "$dir/$validate" && OUT="$OUT/${validate}_gpu" DCPMLA_COMMIT="$commit-$validate" \
    DCPMLA_BENCH_ARGS="$bench_args" timeout 400 bash scripts/device_gpu.sh \
    > "$OUT/${validate}_device_gpu.out" 2>&1
  echo "$validate device_gpu rc $?" >> "$OUT/summary.txt")
  cat "$OUT/${validate}_gpu/summary.txt" >> "$OUT/summary.txt" 2> /dev/null
fi
wait
log "builds done"
for rep in $(seq 1 "$reps"); do
  for v in "${variants[@]}"; do
    stamp_env=()
    [ "$stamps" = 1 ] && stamp_env=("DCPMLA_STAMPS_OUT=$OUT/${v}_stamps_r$rep.txt")
    # shellcheck disable=SC2086  # bench_args is a list of options
    env "${stamp_env[@]}" timeout 120 "$dir/$v/build-gpu/bench/gpu/dcpmla_gpu_bench" $bench_args \
      --commit "$commit-$v" --out "$OUT/${v}_r$rep.json" > "$OUT/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done
bash "$(dirname "$0")/pack_outputs.sh" "$OUT"
