#!/usr/bin/env python3
"""Where a kernel's warps stall, per SASS instruction, from Nsight Compute's source page.

Input: `ncu --page source --print-source sass --csv` output (with the SourceCounters section;
lines before the table are skipped). Prints the share of each stall reason, the instructions
with the most warp-stall samples (their main reason and how often they ran), and how many
instructions run how often: in a decode every warp of a warpgroup runs its loop body once a
tile, so the counts group by warpgroup and give its instructions per tile.

    python3 scripts/sass_stalls.py profile-sass.csv [--top N]
"""
import argparse
import collections
import csv


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    lines = open(args.csv).readlines()
    head = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), None)
    if head is None:
        print("no source table; first lines:")
        print("".join(lines[:20]))
        return
    reader = csv.reader(lines[head:])
    cols = next(reader)
    rows = [dict(zip(cols, r)) for r in reader if len(r) >= len(cols)]
    samples = "Warp Stall Sampling (All Samples)"
    reasons = [c for c in cols if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(number(r[samples]) for r in rows) or 1.0
    executed = sum(number(r["Instructions Executed"]) for r in rows)
    print(f"{len(rows)} SASS lines, {total:.0f} stall samples, {executed:.0f} instructions executed")
    share = {c: sum(number(r[c]) for r in rows) / total * 100 for c in reasons}
    print("stall reasons:", ", ".join(f"{c[6:]} {v:.1f} %" for c, v in
                                      sorted(share.items(), key=lambda kv: -kv[1])[:8]))
    print(f"top {args.top} instructions (share of samples, main reason, times executed):")
    for r in sorted(rows, key=lambda r: -number(r[samples]))[:args.top]:
        main_reason = max(reasons, key=lambda c: number(r[c]))[6:] if reasons else "-"
        print(f"{number(r[samples]) / total * 100:5.1f} %  {main_reason:16s} "
              f"{number(r['Instructions Executed']):>11.0f}  {r['Source'].strip()[:90]}")
    groups = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        x = number(r["Instructions Executed"])
        if x:
            g = groups[round(x, -4)]
            g[0] += 1
            g[1] += x
    print("instructions by times executed (to 10^4): count, executions")
    for k, (count, execs) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:8]:
        print(f"  ~{k:>10.0f}: {count:5d} instructions, {execs / 1e6:7.1f} M")


if __name__ == "__main__":
    main()
