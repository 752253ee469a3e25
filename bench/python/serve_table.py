"""The serving harness's table of runs (docs/serving.md, "Measured"): each row's arguments through
`python -m dcpmla.serve`, one after another, and a markdown row each from its report, with the
commit, date and machine above the table.

    PYTHONPATH=build/python python bench/python/serve_table.py [--out serve_table.md]

The harness's tokens and agreement are deterministic (seeded weights and workload); its times
depend on the machine and its load, so compare rows within one run.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROWS = [
    [],
    ["--world", "2"],
    ["--world", "2", "-K", "7", "--max-capture-size", "16"],
    [
        "--world",
        "2",
        "--combine",
        "a2a",
        "--interleave",
        "4",
        "--capture-sizes",
        "1",
        "2",
        "4",
        "8",
        "16",
        "32",
        "64",
    ],  # fmt: skip
    ["--world", "4", "-K", "5"],
    ["--world", "2", "--variant", "kimi", "--combine", "a2a"],
    ["--q-dtype", "bf16", "--kv-dtype", "bf16"],
    [
        "--q-dtype",
        "bf16",
        "--kv-dtype",
        "fp8",
        "--k-scale",
        "0.05",
        "--margin-delta",
        "0.25",
    ],  # fmt: skip
    ["--world", "2", "--control-full-mask"],
    ["--world", "2", "--control-uniform-view"],
]


def provenance():
    root = Path(__file__).resolve().parents[2]

    def git(*args):
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else "unknown"

    dirty = git("status", "--porcelain", "--untracked-files=no")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    cpu = platform.processor() or platform.machine()
    when = f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%MZ}"
    loads = " / ".join(f"{x:.1f}" for x in load)
    commit = git("rev-parse", "--short", "HEAD") + (" (dirty)" if dirty else "")
    return (
        f"commit {commit}, {when}, {cpu}, {os.cpu_count()} cores, load {loads} (1 / 5 / 15 min) "
        "at the start"
    )


def agreement(report):
    a = report["agreement"]
    if a["disagreements_above_delta"]:
        n, total = a["disagreements_above_delta"], a["requests"]
        return f"{n} of {total} requests disagree above delta"
    text = (
        f"{a['positions_compared']} compared, {a['requests_identical']}/{a['requests']} identical"
    )
    if a["flips_below_delta"]:
        text += f", {a['flips_below_delta']} flipped below delta"
    return text


def row(args, report, status):
    t, s = report["throughput"], report["speculative"]
    # Means over the steps (attention and combine over the eagerly run ones).
    mean = {k: 1e3 * v for k, v in report["step_time_mean_seconds"].items()}
    acc = "n/a" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.2f}"
    shown = " ".join(args) if args else "(defaults: W = 1)"
    return (
        f"| `{shown}` | {t['tokens_per_second']:.0f} | {acc} | "
        f"{mean['total']:.1f} / {mean['attention']:.1f} / {mean['combine']:.1f} | "
        f"{agreement(report)} | {status} |"
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="also write the table to this file")
    args = p.parse_args()
    lines = [
        provenance(),
        "",
        "| arguments | tok/s | acceptance | step ms | agreement with the oracle | exit |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i, extra in enumerate(ROWS):
            path = Path(tmp) / f"report{i}.json"
            command = [sys.executable, "-m", "dcpmla.serve", "--no-progress", "--plot", ""]
            command += ["--report", str(path), *extra]
            done = subprocess.run(command, capture_output=True, text=True, cwd=tmp)
            if done.returncode not in (0, 1):
                sys.exit(f"{' '.join(extra)}: exit {done.returncode}\n{done.stderr}")
            lines.append(row(extra, json.loads(path.read_text()), done.returncode))
            print(lines[-1], flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
