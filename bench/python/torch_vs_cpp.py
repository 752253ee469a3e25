"""The torch op's decode time against the C++ benchmark's, alternating on the same shapes.

`torch.ops.dcpmla.mla_decode_` through `BatchMLADecodeWrapper.run` (planned once on the host, the
schedule sized by limits, outputs passed in) and `dcpmla_gpu_bench --serve` (the library's
`Backend::decode` from C++) are timed by one method: per-call CUDA events after at least 100 ms of
warm-up, `reps` calls rotating over input sets (at least two, together at least 4x the L2), median
and min; the timed torch calls queue behind >= 30 ms of busy GPU work (vs_flashmla.time_steps: an
idle gap before them would let the GPU run them at a higher clock). Per shape and round the two run
back to back, the order flipping every round; a shape's figure is the median of its rounds'
medians. Shapes: vs_flashmla.py's (bf16 cache, block size 64, rank 0 of the DCP world, L the rank's
local length) and its ragged 64-request mixes.

    PYTHONPATH=build-gpu/python python3 bench/python/torch_vs_cpp.py \
        --bench build-gpu/bench/gpu/dcpmla_gpu_bench --out torch_vs_cpp.json
"""

import argparse
import datetime
import json
import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
from vs_flashmla import (  # noqa: E402  (the shapes and the timing method, shared)
    BLOCK,
    D_QK,
    D_V,
    DEV,
    RAGGED,
    SCALE,
    UNIFORM,
    Dcpmla,
    n_sets,
    rand,
    summary,
    time_steps,
    timed_or_error,
)

import dcpmla  # noqa: E402


def torch_op(B, L, H, qs, world, sets, reps):
    """Times the wrapper's run on `sets` input sets of one planned batch (rank 0 of `world`)."""
    rows = sum(qs)
    nbl = math.ceil(L / BLOCK)
    qsl = torch.zeros(B + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(qs, dtype=torch.int32), 0)
    seq_lens = torch.full((B,), L * world, dtype=torch.int32)  # local length L on rank 0
    limits = {"max_num_reqs": B, "max_num_tokens": rows, "max_blocks_per_req": nbl}
    # More than any of these shapes' split partials need (the wrapper checks it).
    workspace = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    wrapper = dcpmla.BatchMLADecodeWrapper(
        workspace, H, BLOCK, torch.bfloat16, world, 0, num_blocks=B * nbl, **limits
    )
    wrapper.plan(qsl, seq_lens, softmax_scale=SCALE)
    out = torch.empty(rows, H, D_V, dtype=torch.bfloat16, device=DEV)
    lse = torch.empty(rows, H, dtype=torch.float32, device=DEV)
    steps = []
    for k in range(sets):
        gen = torch.Generator(device=DEV).manual_seed(2000 + k)
        cache = rand(B * nbl, BLOCK, D_QK, gen=gen)
        bt = torch.randperm(B * nbl, device=DEV, generator=gen).to(torch.int32).view(B, nbl)
        q = rand(rows, H, D_QK, gen=gen)
        steps.append([lambda q=q, c=cache, t=bt: wrapper.run(q, c, t, out=out, lse=lse)])
    r = time_steps(steps, reps)
    r["output_finite"] = bool(torch.isfinite(lse).all())
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True, help="dcpmla_gpu_bench built with the CUDA backend")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--command", default=" ".join(sys.argv))
    args = ap.parse_args()
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cpp = Dcpmla(args.bench, args.reps)
    mix = cpp.hello["ragged_mix_q"]
    shapes = [(list(s), n, s[0], s[1], s[2], [s[3]] * s[0], w) for s, n, w in UNIFORM]
    shapes += [(f"ragged 64 x Q 1..8, L {L}, H {H}", None, 64, L, H, mix, 1) for L, H in RAGGED]
    runs = [{"cpp": [], "torch": []} for _ in shapes]
    for rnd in range(args.rounds):
        for (shape, _, B, L, H, qs, world), run in zip(shapes, runs):
            sets = n_sets(B, L)
            for side in ("cpp", "torch") if rnd % 2 == 0 else ("torch", "cpp"):
                label = f"{side} {shape}"
                if side == "cpp":
                    r = timed_or_error(label, cpp.time, B=B, L=L, H=H, q=qs, world=world, sets=sets)
                else:
                    r = timed_or_error(label, torch_op, B, L, H, qs, world, sets, args.reps)
                run[side].append(r)
        print(f"round {rnd}: done", file=sys.stderr, flush=True)
    cpp.close()

    results = []
    for (shape, name, *_), run in zip(shapes, runs):
        row = {"shape": shape} | ({"name": name} if name else {})
        ok = {side: [r for r in rs if "error" not in r] for side, rs in run.items()}
        if not ok["cpp"] or not ok["torch"]:
            row["errors"] = [r["error"] for rs in run.values() for r in rs if "error" in r]
            results.append(row)
            continue
        c, t = summary(ok["cpp"]), summary(ok["torch"])
        row |= {
            "cpp_us": c["us"],
            "torch_us": t["us"],
            "cpp_min_us": c["min_us"],
            "torch_min_us": t["min_us"],
            "torch_over_cpp": t["us"] / c["us"],
            "cpp_rounds_us": c["rounds_us"],
            "torch_rounds_us": t["rounds_us"],
            "output_finite": all(r["output_finite"] for rs in ok.values() for r in rs),
        }
        results.append(row)
    ratios = [r["torch_over_cpp"] for r in results if "torch_over_cpp" in r]
    doc = {
        "commit": args.commit,
        "date": date,
        "device": cpp.hello["device"],
        "torch": torch.__version__,
        "command": args.command,
        "rounds": args.rounds,
        "reps": args.reps,
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "results": results,
        "max_abs_deviation": max((abs(x - 1) for x in ratios), default=None),
        "geomean_torch_over_cpp": (
            math.exp(statistics.fmean(map(math.log, ratios))) if ratios else None
        ),
    }
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    print(f"{'shape':<36} {'C++ us':>9} {'torch us':>9} {'torch/C++':>9}")
    for r in results:
        label = r.get("name") or (
            ",".join(map(str, r["shape"])) if isinstance(r["shape"], list) else r["shape"]
        )
        if "torch_over_cpp" not in r:
            print(f"{label:<36} failed: {r['errors'][:1]}")
            continue
        print(f"{label:<36} {r['cpp_us']:>9.1f} {r['torch_us']:>9.1f} {r['torch_over_cpp']:>9.3f}")
    print(f"largest deviation of torch / C++ from 1: {doc['max_abs_deviation']}")
    return 0 if ratios and len(ratios) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
