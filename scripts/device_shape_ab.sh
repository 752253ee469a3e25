#!/usr/bin/env bash
# One benchmark shape across source snapshots on the GPU machine (one device call): builds each
# variant's dcpmla_gpu_bench in parallel, then runs `--shape B,L,H,Q` --reps times per variant,
# variants alternating. --stamps builds with -DDCPMLA_STAMPS and sets DCPMLA_STAMPS_OUT, so a
# variant whose kernel records stamps (branch wip/seesaw-stamps) writes <variant>_stamps_r<k>.txt;
# other variants ignore both. Output under $OUT: <variant>_r<k>.{json,txt}, build logs,
# summary.txt (with each run's table line), packed into outputs.tgz by scripts/pack_outputs.sh.
#
# DIR holds one snapshot per variant (scripts/snapshot.sh) and COMMIT; a variant's results carry
# "<COMMIT>-<variant>".
#
#   run (from the repository root): scripts/device_shape_ab.sh DIR B,L,H,Q [--reps N] [--stamps]
#                                   VARIANT...
set -uo pipefail
usage() {
  echo "usage: $0 DIR B,L,H,Q [--reps N] [--stamps] VARIANT..." >&2
  exit 2
}
[ $# -ge 3 ] || usage
dir=$1 shape=$2
shift 2
[[ $shape =~ ^[0-9]+,[0-9]+,[0-9]+,[0-9]+$ ]] || { echo "$0: shape must be B,L,H,Q, got '$shape'" >&2; exit 2; }
reps=2 stamps=0
variants=()
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=${2:?--reps needs a count}; shift 2 ;;
    --stamps) stamps=1; shift ;;
    -*) usage ;;
    *) variants+=("$1"); shift ;;
  esac
done
[ ${#variants[@]} -ge 1 ] || usage
for v in "${variants[@]}"; do
  [ -d "$dir/$v" ] || { echo "$0: no snapshot $dir/$v" >&2; exit 2; }
done
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PATH="/usr/local/cuda/bin:$PATH"
commit=$(cat "$dir/COMMIT" 2>/dev/null || echo unknown)
flags=""
[ "$stamps" = 1 ] && flags="-DDCPMLA_STAMPS"
log() { echo "== [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }

for v in "${variants[@]}"; do
  (cd "$dir/$v" && cmake -S . -B build-shape -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDCPMLA_BUILD_TESTS=OFF -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CUDA_FLAGS="$flags" \
    > "$OUT/${v}_cmake.log" 2>&1 &&
    cmake --build build-shape --target dcpmla_gpu_bench > "$OUT/${v}_build.log" 2>&1
  echo "$v build rc $?" >> "$OUT/summary.txt") &
done
wait
log "builds done"
for rep in $(seq 1 "$reps"); do
  for v in "${variants[@]}"; do
    stamp_env=()
    [ "$stamps" = 1 ] && stamp_env=("DCPMLA_STAMPS_OUT=$OUT/${v}_stamps_r$rep.txt")
    env "${stamp_env[@]}" timeout 120 "$dir/$v/build-shape/bench/gpu/dcpmla_gpu_bench" \
      --shape "$shape" --commit "$commit-$v" --out "$OUT/${v}_r$rep.json" > "$OUT/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?: $(grep -h '^custom' "$OUT/${v}_r$rep.txt")"
  done
done
bash "$(dirname "$0")/pack_outputs.sh" "$OUT"
