#!/usr/bin/env bash
# A/B of source trees on a GPU machine: builds dcpmla_gpu_bench in every variant in parallel
# (the one named by --validate through scripts/device_gpu.sh: build, GPU tests, sanitizers,
# demo, benchmark), then runs the benchmark (or what --bench-args selects) --reps times per
# variant, the variants alternating, so drift in the card's clocks and power state falls on all
# of them alike. Output under $OUT: <variant>_r<k>.{json,txt}, build logs, summary.txt, and
# ab_summary.txt: per shape, each variant's best median over the runs and its ratio to the first
# variant.
#
# DIR holds one tree per variant (DIR/<variant>, made by scripts/snapshot.sh) and COMMIT, the
# commit the variants start from; a variant's results carry "<COMMIT>-<variant>". A variant
# TREE@VAR=VALUE runs tree DIR/TREE with VAR=VALUE in its environment (one build a tree), under
# the label TREE-VAR-VALUE: e.g. main@DCPMLA_DECODE_ROUNDS=0 main@DCPMLA_DECODE_ROUNDS=1. One
# shape only: --bench-args "--shape B,L,H,Q". The validation has 390 s, its steps capped to end
# within them (device_gpu.sh's DCPMLA_TIME_LIMIT_S): with its Python steps (~200 s) the last
# sanitizer steps run short, so pass DCPMLA_PYTHON=0 where the Python package did not change.
# A remote run may bring back only a few files, so all but summary.txt and ab_summary.txt end in
# runs.tar.gz.
#
#   run (from the repository root): scripts/device_ab.sh DIR [--validate V] [--reps N]
#                                   [--bench-args "ARGS"] VARIANT...
#   e.g. scripts/snapshot.sh devrun base main && scripts/snapshot.sh devrun new &&
#        scripts/device_ab.sh devrun --validate new --reps 3 base new
set -uo pipefail
usage() {
  echo "usage: $0 DIR [--validate VARIANT] [--reps N] [--bench-args ARGS] VARIANT..." >&2
  exit 2
}
[ $# -ge 2 ] || usage
dir=$1
shift
validate="" reps=3 bench_args=""
variants=()
while [ $# -gt 0 ]; do
  case $1 in
    --validate) validate=${2:?--validate needs a variant}; shift 2 ;;
    --reps) reps=${2:?--reps needs a count}; shift 2 ;;
    --bench-args) bench_args=${2:?--bench-args needs arguments}; shift 2 ;;
    -*) usage ;;
    *) variants+=("$1"); shift ;;
  esac
done
[ ${#variants[@]} -ge 1 ] || usage
# A variant's environment (VAR=VALUE, or nothing) and its label.
env_of() { [[ $1 == *@*=* ]] && echo "${1#*@}"; }
label_of() {
  local env
  env=$(env_of "$1")
  if [ -n "$env" ]; then echo "${1%%@*}-${env%%=*}-${env#*=}"; else echo "$1"; fi
}
labels=() trees=() envs=()
for v in "${variants[@]}" ${validate:+"$validate"}; do
  [ -d "$dir/${v%%@*}" ] || { echo "$0: no tree $dir/${v%%@*}" >&2; exit 2; }
  [[ $(label_of "$v") =~ ^[A-Za-z0-9._-]+$ ]] ||
    { echo "$0: variant label $(label_of "$v"): letters, digits, . _ -" >&2; exit 2; }
done
for v in "${variants[@]}"; do
  labels+=("$(label_of "$v")") trees+=("${v%%@*}") envs+=("$(env_of "$v")")
done
validate_tree=${validate%%@*} validate_env=$(env_of "$validate")
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PATH="/usr/local/cuda/bin:$PATH"
commit=$(cat "$dir/COMMIT" 2>/dev/null || echo unknown)
log() { echo "== [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }

JOBS=$(nproc 2>/dev/null || echo 8)
# shellcheck source=scripts/device_deps.sh
source "$(dirname "$0")/device_deps.sh"
for tree in $(printf '%s\n' "${trees[@]}" | sort -u); do
  [ "$tree" = "$validate_tree" ] && continue
  (cd "$dir/$tree" && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=ON \
    -DDCPMLA_BUILD_TESTS=OFF -DDCPMLA_BUILD_BENCH=ON -DDCPMLA_NCCL=OFF \
    ${prefix_arg[@]+"${prefix_arg[@]}"} > "$OUT/${tree}_cmake.log" 2>&1 &&
    cmake --build build-gpu --target dcpmla_gpu_bench > "$OUT/${tree}_build.log" 2>&1
  echo "$tree build rc $?" >> "$OUT/summary.txt") &
done
if [ -n "$validate" ]; then
  vlabel=$(label_of "$validate")
  (cd "$dir/$validate_tree" && env ${validate_env:+"$validate_env"} OUT="$OUT/${vlabel}_gpu" \
    DCPMLA_COMMIT="$commit-$vlabel" DCPMLA_BENCH_ARGS="$bench_args" DCPMLA_TIME_LIMIT_S=390 \
    timeout 400 bash scripts/device_gpu.sh > "$OUT/${vlabel}_device_gpu.out" 2>&1
  echo "$vlabel device_gpu rc $?" >> "$OUT/summary.txt")
  cat "$OUT/${vlabel}_gpu/summary.txt" >> "$OUT/summary.txt" 2> /dev/null
fi
wait
log "builds done"
for rep in $(seq 1 "$reps"); do
  for i in "${!labels[@]}"; do
    v=${labels[$i]}
    # shellcheck disable=SC2086  # bench_args is a list of options
    env ${envs[$i]:+"${envs[$i]}"} timeout 120 "$dir/${trees[$i]}/build-gpu/bench/gpu/dcpmla_gpu_bench" \
      $bench_args --commit "$commit-$v" --out "$OUT/${v}_r$rep.json" > "$OUT/${v}_r$rep.txt" 2>&1
    log "$v r$rep rc $?"
  done
done

python3 - "$OUT" "${labels[@]}" > "$OUT/ab_summary.txt" <<'PY' || log "ab_summary failed"
import glob, json, sys
out, variants = sys.argv[1], sys.argv[2:]
best = {}  # (shape) -> {variant: best median over the runs}
for v in variants:
    for path in sorted(glob.glob(f"{out}/{v}_r*.json")):
        for r in json.load(open(path)).get("results", []):
            if "L_local" not in r:  # not a decode shape (e.g. device_planning)
                continue
            key = (r["group"], r["B"], r["L_local"], r["H"], r["rows"], r["form"], r.get("kv_dtype"),
                   r.get("block_size"), r.get("scores"), r["world"])
            cur = best.setdefault(key, {})
            cur[v] = min(cur.get(v, float("inf")), r["median_us"])
print("shape (group B L H rows form kv bs scores W): best median us per variant, ratio to "
      + variants[0])
for key, by in best.items():
    base = by.get(variants[0])
    cells = [f"{v} {by[v]:.1f}" + (f" ({by[v] / base:.3f})" if base and v != variants[0] else "")
             for v in variants if v in by]
    print(" ".join(str(k) for k in key), "|", " | ".join(cells))
PY
tail -n +1 "$OUT/ab_summary.txt" | head -80
(cd "$OUT" && find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name ab_summary.txt \
  ! -name runs.tar.gz -printf '%P\0' | tar --null -czf runs.tar.gz -T - --remove-files)
