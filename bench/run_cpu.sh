#!/usr/bin/env bash
# Builds the CPU benchmarks (Release, build-bench/) and runs them with provenance.
#
#   bench/run_cpu.sh [extra Google Benchmark flags, e.g. --benchmark_filter=Decode]
#
# Writes $OUT (default build-bench/results)/<UTC date>-<short commit>.json (provenance + both
# benchmarks' JSON, every repetition and the aggregates) and .md (provenance + console tables),
# and regenerates SUMMARY.md there from that JSON (medians of 3 repetitions); any text below the
# "<!-- notes -->" line of an existing SUMMARY.md is kept. The current result on main is distilled
# into bench/results/cpu/ by hand.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-bench"
OUT_DIR="${OUT:-$BUILD/results}"
REPS="${DCPMLA_BENCH_REPETITIONS:-3}"
mkdir -p "$OUT_DIR"

# Tuned for this CPU, as a deployment of the CPU backend would be.
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCPMLA_CUDA=OFF \
  -DDCPMLA_NATIVE=ON -DDCPMLA_BUILD_TESTS=OFF >/dev/null
ninja -C "$BUILD" dcpmla_cpu_bench dcpmla_planner_bench

# Provenance.
DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
COMMIT="$(git -C "$ROOT" rev-parse HEAD)"
SHORT="$(git -C "$ROOT" rev-parse --short HEAD)"
DIRTY_FILES="$(git -C "$ROOT" status --porcelain | wc -l)"
if [[ "$DIRTY_FILES" -gt 0 ]]; then
  TREE="dirty ($DIRTY_FILES changed or untracked paths)"
else
  TREE="clean"
fi
TREE_PATHS="$(git -C "$ROOT" status --porcelain | sed 's/^ *//' | paste -sd ',' | sed 's/,/, /g')"
CPU="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
NPROC="$(nproc)"
CXX_PATH="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")"
COMPILER="$("${CXX_PATH:-c++}" --version | head -1)"
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"

BASE="$OUT_DIR/$STAMP-$SHORT"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

CONTEXT="dcpmla_commit=$COMMIT,dcpmla_tree_dirty_paths=$DIRTY_FILES,dcpmla_utc=$DATE"
FLAGS=(--benchmark_repetitions="$REPS" --benchmark_display_aggregates_only=true
  --benchmark_out_format=json --benchmark_context="$CONTEXT" "$@")

echo "== dcpmla_cpu_bench" >&2
"$BUILD/bench/dcpmla_cpu_bench" "${FLAGS[@]}" --benchmark_out="$TMP/cpu.json" 2>&1 | tee "$TMP/cpu.txt"
echo "== dcpmla_planner_bench" >&2
"$BUILD/bench/dcpmla_planner_bench" "${FLAGS[@]}" --benchmark_out="$TMP/planner.json" 2>&1 |
  tee "$TMP/planner.txt"
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

COMMAND="bench/run_cpu.sh${*:+ $*}"
export DATE COMMIT SHORT TREE TREE_PATHS CPU NPROC COMPILER LOAD_BEFORE LOAD_AFTER REPS COMMAND

# One JSON: provenance plus both benchmark outputs.
python3 - "$TMP/cpu.json" "$TMP/planner.json" "$BASE.json" <<'EOF'
import json, os, sys
prov = {k.lower(): os.environ[k] for k in
        ["DATE", "COMMIT", "TREE", "TREE_PATHS", "CPU", "NPROC", "COMPILER", "LOAD_BEFORE", "LOAD_AFTER",
         "REPS", "COMMAND"]}
doc = {"provenance": prov,
       "dcpmla_cpu_bench": json.load(open(sys.argv[1])),
       "dcpmla_planner_bench": json.load(open(sys.argv[2]))}
json.dump(doc, open(sys.argv[3], "w"), indent=1)
EOF

{
  echo "# dcpmla CPU benchmarks, $DATE"
  echo
  echo "- command: \`$COMMAND\` (${REPS} repetitions, aggregates shown; all repetitions in the JSON)"
  echo "- commit: $COMMIT, tree $TREE"
  [[ -n "$TREE_PATHS" ]] && echo "- git status: $TREE_PATHS"
  echo "- machine: $CPU, nproc $NPROC; load average before $LOAD_BEFORE, after $LOAD_AFTER"
  echo "- compiler: $COMPILER"
  echo
  echo '## dcpmla_cpu_bench'
  echo '```'
  cat "$TMP/cpu.txt"
  echo '```'
  echo '## dcpmla_planner_bench'
  echo '```'
  cat "$TMP/planner.txt"
  echo '```'
} >"$BASE.md"

# SUMMARY.md from the JSON: medians of the repetitions.
python3 - "$BASE.json" "$OUT_DIR/SUMMARY.md" "$(basename "$BASE")" <<'EOF'
import json, os, re, sys
doc = json.load(open(sys.argv[1]))
summary_path, base = sys.argv[2], sys.argv[3]
p = doc["provenance"]

def medians(bench):
    out = {}
    for b in bench["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") in ("median", "min"):
            out.setdefault(b["run_name"], {})[b["aggregate_name"]] = b
    return out

def short(name):
    return re.sub(r"/(min_time:[0-9.]+|real_time)", "", name)

cpu = medians(doc["dcpmla_cpu_bench"])
planner = medians(doc["dcpmla_planner_bench"])
L = []
L.append("# CPU benchmark summary")
L.append("")
L.append(f"- command: `{p['command']}` (Release build in `build-bench/`); "
         f"{p['reps']} repetitions, **medians** reported (best repetition in brackets)")
L.append(f"- commit: `{p['commit']}`, tree {p['tree']}")
L.append(f"- machine: {p['cpu']}, {p['nproc']} cores (KVM guest); compiler: {p['compiler']}")
L.append(f"- date: {p['date']}; raw results: `{base}.json` / `{base}.md`")
L.append(f"- **other processes (concurrent builds) were running on this 2-core machine** "
         f"(load average {p['load_before']} before, {p['load_after']} after): 2-thread numbers "
         "in particular are noisy; compare ratios from the same run, not absolute values.")
L.append("")
L.append("## Ceilings (same binary, same run)")
L.append("")
L.append("| benchmark | median | best repetition | per CPU-second (median) |")
L.append("|---|---|---|---|")
for name, agg in cpu.items():
    if "Decode" in name:
        continue
    m, b = agg["median"], agg.get("max", agg["median"])
    key = next(k for k in ("read_GB/s", "copy_rw_GB/s", "GFLOP/s") if k in m)
    unit = "GFLOP/s" if key == "GFLOP/s" else ("GB/s read+write" if "copy" in key else "GB/s")
    per_cpu = f"{m['GFLOP/cpu-s']:.1f} GFLOP/cpu-s" if "GFLOP/cpu-s" in m else ""
    L.append(f"| {short(name)} | {m[key]:.1f} {unit} | {b[key]:.1f} | {per_cpu} |")
L.append("")
L.append("## CpuBackend::decode (one rank's paged cache, block size 64)")
L.append("")
L.append("KV GB/s counts each request's local KV once (local_len x 576 x dtype bytes); GFLOP/s "
         "counts visible keys x H x 2176 per query row. Fractions are of the read ceiling and of "
         "the FMA peak measured above for the same thread count (wall clock). GFLOP/cpu-s divides "
         "by the CPU time of all the process's threads instead, and its fraction is of the "
         "per-core FMA peak (GFLOP/cpu-s of the FMA benchmark): those two columns are what "
         "time-sharing with other processes disturbs least.")
L.append("")
L.append("| shape | threads | ms | KV GB/s | frac of read ceiling | GFLOP/s | frac of FMA peak "
         "| GFLOP/cpu-s | frac of core peak |")
L.append("|---|---|---|---|---|---|---|---|---|")
for name, agg in cpu.items():
    if "Decode" not in name:
        continue
    m, b = agg["median"], agg.get("min", agg["median"])
    shape = m.get("label", short(name))
    threads = re.search(r"threads:(\d+)", name).group(1)
    L.append(f"| {shape} | {threads} | {m['real_time']:.1f} [{b['real_time']:.1f}] "
             f"| {m['KV_GB/s']:.3f} | {m['frac_of_read_ceiling']:.4f} "
             f"| {m['GFLOP/s']:.1f} | {m['frac_of_fma_peak']:.3f} "
             f"| {m['GFLOP/cpu-s']:.1f} | {m['frac_of_core_peak']:.3f} |")
L.append("")
L.append("## Planner (make_plan: W = 8, rank 3, I = 1, block 64, H = 128, Q 1..8, T up to 32K, "
         "target 264 work items)")
L.append("")
L.append("| benchmark | us per call (median) | best | note |")
L.append("|---|---|---|---|")
for name, agg in planner.items():
    m, b = agg["median"], agg.get("min", agg["median"])
    note = ""
    if "budget_us" in m:
        note = ("within the 100 us budget" if m["real_time"] <= m["budget_us"]
                else f"**{m['real_time'] / m['budget_us']:.0f}x over the 100 us budget**")
    L.append(f"| {short(name)} | {m['real_time']:.1f} | {b['real_time']:.1f} | {note} |")
L.append("")

notes = ""
if os.path.exists(summary_path):
    old = open(summary_path).read()
    if "<!-- notes -->" in old:
        notes = old[old.index("<!-- notes -->"):]
L.append(notes if notes else "<!-- notes -->\n")
open(summary_path, "w").write("\n".join(L))
EOF
echo "wrote $BASE.json, $BASE.md and $OUT_DIR/SUMMARY.md" >&2
