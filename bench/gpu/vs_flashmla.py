"""dcpmla's decode and FlashMLA's dense decode, alternating on the same shapes in one run.

dcpmla is timed by its C++ benchmark (`dcpmla_gpu_bench --serve`, a child process that times one
shape a request); FlashMLA here, through torch, by the same method: per-call CUDA events, at least
100 ms of warm-up, `reps` timed calls rotating over input sets (at least two, together at least
4x the L2), median and min; then 10 calls captured in a CUDA graph and replayed 3 times. FlashMLA's
timed calls queue behind >= 30 ms of replays of that graph, so that they neither wait for Python's
launches nor follow an idle gap: dcpmla's C++ calls run straight after their warm-up, and after
an idle gap the H200 runs the next calls at a higher clock (a 30 ms sleep kernel ahead of the
timed calls made the same decode 4-11 % faster on compute-bound shapes). Per shape and round the
two run back to back, the order flipping every round; a shape's figure is the median of its
rounds' medians. With --board-ms, nvidia-smi samples the board meanwhile, and each shape also
gets the median SM clock and power over each side's calls (medians over the rounds): under the
power cap two kernels can differ in clock as well as in cycles.

Ragged mixes (the ragged_mix group of dcpmla_gpu_bench: 64 requests, Q 1..8, every request of
length L) run FlashMLA in each correct form it has, checked against a float32 reference on
inputs whose last 8 tokens dominate every score, so that a wrong causal bound shows:
  flattened   every query row its own one-token request, with the row's causal length
  per_q       one causal call per distinct Q, for the requests with that Q
  padded      every request padded to Q = 8, its real rows last (so FlashMLA's causal bounds are
              theirs); padding with the real rows first is wrong, and is only checked, not timed

usage: vs_flashmla.py --bench BUILD/bench/gpu/dcpmla_gpu_bench --flashmla DIR --out FILE.json
"""

import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys
import time

import torch
from board_samples import BoardSamples

D_QK, D_V, BLOCK = 576, 512, 64
SCALE = 0.1352338  # dcpmla_gpu_bench's softmax scale
L2_BYTES = 60 << 20
DEV = torch.device("cuda:0")
flash_mla = None  # imported in main() from --flashmla

# (B, L, H, Q) uniform shapes; the Kimi K3 rank is rank 0 of DCP 8 for dcpmla (its bounds are
# rank-local; with Q = 1 the work is that of the dense shape FlashMLA runs).
UNIFORM = [
    ((64, 4096, 128, 1), None, 1),
    ((64, 4096, 128, 2), None, 1),
    ((64, 4096, 128, 4), None, 1),
    ((64, 4096, 128, 8), None, 1),
    ((128, 8192, 16, 1), None, 1),
    ((32, 32768, 64, 1), None, 1),
    ((32, 32768, 64, 8), None, 1),
    ((4, 131072, 128, 4), None, 1),
    ((132, 4096, 128, 1), None, 1),
    ((1, 65536, 128, 1), None, 1),
    ((32, 32768, 96, 1), "Kimi K3 DCP 8 rank", 8),
    ((16, 32768, 16, 8), None, 1),
]
RAGGED = [(4096, 128), (32768, 16)]  # (L, H) of the 64-request mixes
# What a failed shape raises; the other shapes' figures are kept.
FAILURES = (RuntimeError, AssertionError, ValueError, LookupError, TypeError, OSError)


def timed_or_error(label, time, *args, **kwargs):
    """time(*args, **kwargs), or {"error": ...} where it raises one of FAILURES (reported under
    label), with the allocator's cache emptied after it either way, so the next side starts
    alike."""
    try:
        return time(*args, **kwargs)
    except FAILURES as e:
        print(f"{label}: {e!r}", file=sys.stderr, flush=True)
        return {"error": repr(e)}
    finally:
        torch.cuda.empty_cache()


def rand(*shape, gen):
    """float32 uniform in [-1, 1) rounded to bf16, as dcpmla_gpu_bench fills its inputs. Not
    torch.rand in bf16: that draws only multiples of 2^-8, 256 values in all (zeros among them),
    another distribution than the one the C++ benchmark times."""
    x = torch.rand(*shape, device=DEV, dtype=torch.float32, generator=gen)
    return x.mul_(2).sub_(1).to(torch.bfloat16)


def n_sets(B, L):
    return max(2, math.ceil(4 * L2_BYTES / (B * L * D_QK * 2)))


class Call:
    """One FlashMLA dense decode with its inputs and scheduler metadata."""

    def __init__(self, q, cache, block_table, seqlens, causal):
        self.args = (q, cache, block_table, seqlens)
        self.causal = causal
        self.meta, _ = flash_mla.get_mla_metadata()

    def __call__(self):
        q, cache, bt, sl = self.args
        return flash_mla.flash_mla_with_kvcache(
            q,
            cache,
            bt,
            sl,
            D_V,
            self.meta,
            None,
            softmax_scale=SCALE,
            causal=self.causal,
        )


def kv_set(B, L, gen):
    nbl = math.ceil(L / BLOCK)
    cache = rand(B * nbl, BLOCK, 1, D_QK, gen=gen)
    bt = torch.randperm(B * nbl, device=DEV, generator=gen).to(torch.int32).view(B, nbl)
    return cache, bt


def lengths(values):
    return torch.tensor(values, device=DEV, dtype=torch.int32)


def time_steps(steps, reps, warm_ms=100.0, per_graph=10, replays=3):
    """Times `reps` steps (each a list of calls) rotating over `steps`, each between its own pair
    of events; returns median, min and p90 in us and the per-step time in graph replays.

    The timed steps queue behind a lead of busy GPU work, replays of a CUDA graph of the same
    steps (cheap to launch), longer than Python takes to launch the timed steps (FlashMLA's call
    costs ~0.1 ms of CPU): they neither wait for Python nor follow an idle gap, after which the
    GPU would run them at a higher clock than in the steady run."""
    k = 0

    def run():
        nonlocal k
        for c in steps[k % len(steps)]:
            c()
        k += 1

    for _ in range(5):
        run()
    torch.cuda.synchronize()
    calls, t0 = 0, time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < warm_ms:
        for _ in range(5):
            run()
        calls += 5
        torch.cuda.synchronize()
    # A step's wall time while the GPU keeps up: at least what Python takes to launch it.
    step_s = (time.perf_counter() - t0) / calls
    lead_s = max(0.03, 1.5 * reps * step_s)
    graph, graph_s = None, step_s * per_graph
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            for _ in range(per_graph):
                run()
        graph.replay()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        graph_s = time.perf_counter() - t1
    except RuntimeError as e:
        print(f"graph capture failed: {e}", file=sys.stderr)
        graph = None
    ev = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    if graph is not None:
        for _ in range(math.ceil(lead_s / graph_s)):
            graph.replay()
    else:  # untimed steps: a lead only where the GPU is slower than Python's launches
        for _ in range(math.ceil(lead_s / step_s)):
            run()
    for a, z in ev:
        a.record()
        run()
        z.record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(z) * 1e3 for a, z in ev)
    graph_us = None
    if graph is not None:
        rt = []
        for _ in range(replays):
            a, z = (
                torch.cuda.Event(enable_timing=True),
                torch.cuda.Event(enable_timing=True),
            )
            a.record()
            graph.replay()
            z.record()
            z.synchronize()
            rt.append(a.elapsed_time(z) * 1e3)
        graph_us = sorted(rt)[len(rt) // 2] / per_graph
        del graph
    return {
        "median_us": ts[len(ts) // 2],
        "min_us": ts[0],
        "p90_us": ts[len(ts) * 9 // 10],
        "graph_us": graph_us,
    }


def flashmla_uniform(B, L, H, Q, reps):
    sets = []
    for k in range(n_sets(B, L)):
        gen = torch.Generator(device=DEV).manual_seed(1000 + k)
        cache, bt = kv_set(B, L, gen)
        q = rand(B, Q, H, D_QK, gen=gen)
        sets.append([Call(q, cache, bt, lengths([L] * B), Q > 1)])
    r = time_steps(sets, reps)
    _, lse = sets[0][0]()
    r["output_finite"] = bool(torch.isfinite(lse).all())
    return r


def reference(q_rows, cache, bt, qs, L):
    """float32 attention of every real row: row j of Q rows sees positions < L - (Q - 1 - j)."""
    out, start = [], 0
    nbl = bt.shape[1]
    for b, Q in enumerate(qs):
        kv = cache[bt[b].long()].view(nbl * BLOCK, D_QK)[:L].float()
        q = q_rows[start : start + Q].float()
        s = torch.einsum("qhd,td->qht", q, kv) * SCALE
        bound = L - (Q - 1) + torch.arange(Q, device=DEV)
        s.masked_fill_(
            torch.arange(L, device=DEV)[None, None, :] >= bound[:, None, None],
            float("-inf"),
        )
        out.append(torch.einsum("qht,td->qhd", torch.softmax(s, -1), kv[:, :D_V]))
        start += Q
    return torch.cat(out)


def max_row_err(out, ref):
    o = out.float().flatten(1)
    r = ref.flatten(1)
    return float(((o - r).norm(dim=1) / r.norm(dim=1)).max())


def ragged_forms(qs, L, H, gen, tail_scores=False):
    """Each form's calls for one input set, the real-row queries, and how to read the real rows
    (in request order) out of the forms' outputs.

    tail_scores: the last max(qs) tokens of every request score ~17 above the rest against every
    query (their rope dims are a +-1 pattern that the queries' rope dims carry twice), so each
    row's output is about the mean of those its bound admits: a bound off by one token changes it
    by O(1), where on random scores it moves it by O(sqrt(1 / L)) only."""
    B, rows, maxq = len(qs), sum(qs), max(qs)
    cache, bt = kv_set(B, L, gen)
    q_rows = rand(rows, H, D_QK, gen=gen)
    if tail_scores:
        u = torch.randint(0, 2, (D_QK - D_V,), device=DEV, generator=gen) * 2 - 1
        u = u.to(torch.bfloat16)
        q_rows[:, :, D_V:] += 2 * u
        pos = torch.arange(L - maxq, L, device=DEV)
        cache[bt[:, pos // BLOCK].long(), pos % BLOCK, 0, D_V:] = u
    starts = [sum(qs[:b]) for b in range(B)]
    row_req = [b for b, Q in enumerate(qs) for _ in range(Q)]
    row_len = [L - (Q - 1 - j) for Q in qs for j in range(Q)]
    forms = {
        "flattened": [
            Call(
                q_rows.view(rows, 1, H, D_QK),
                cache,
                bt[row_req].contiguous(),
                lengths(row_len),
                False,
            )
        ]
    }
    groups = []
    for Q in sorted(set(qs)):
        idx = [b for b in range(B) if qs[b] == Q]
        ri = [starts[b] + j for b in idx for j in range(Q)]
        groups.append(ri)
        forms.setdefault("per_q", []).append(
            Call(
                q_rows[ri].view(len(idx), Q, H, D_QK),
                cache,
                bt[idx].contiguous(),
                lengths([L] * len(idx)),
                Q > 1,
            )
        )
    # Positions of the real rows in the padded batch: last (correct) or first (wrong).
    last = [b * maxq + maxq - Q + j for b, Q in enumerate(qs) for j in range(Q)]
    first = [b * maxq + j for b, Q in enumerate(qs) for j in range(Q)]
    padded = {}
    for name, pos in (("padded", last), ("padded_first", first)):
        qp = rand(B * maxq, H, D_QK, gen=gen)
        qp[pos] = q_rows
        padded[name] = pos
        forms[name] = [Call(qp.view(B, maxq, H, D_QK), cache, bt, lengths([L] * B), True)]

    def real_rows(name, outs):
        if name == "flattened":
            return outs[0][:, 0]
        if name == "per_q":
            o = torch.empty(rows, H, D_V, device=DEV, dtype=torch.bfloat16)
            for ri, out in zip(groups, outs):
                o[ri] = out.flatten(0, 1)
            return o
        return outs[0].flatten(0, 1)[padded[name]]

    return forms, (q_rows, cache, bt), real_rows


def flashmla_ragged(qs, L, H, reps, check):
    B = len(qs)
    per_set = [
        ragged_forms(qs, L, H, torch.Generator(device=DEV).manual_seed(2000 + k))
        for k in range(n_sets(B, L))
    ]
    res = {}
    if check:  # every form against the float32 reference, on inputs of its own
        try:
            gen = torch.Generator(device=DEV).manual_seed(3000)
            forms, (q_rows, cache, bt), real_rows = ragged_forms(qs, L, H, gen, True)
            ref = reference(q_rows, cache, bt, qs, L)
            for name, calls in forms.items():
                err = max_row_err(real_rows(name, [c()[0] for c in calls]), ref)
                res[name] = {"max_row_rel_err": err, "correct": err < 1e-2}
            del forms, q_rows, cache, bt, ref
        except FAILURES as e:
            print(f"ragged check: {e!r}", file=sys.stderr, flush=True)
            res = {"check_error": repr(e)}
    for name in ("flattened", "per_q", "padded"):
        res.setdefault(name, {}).update(time_steps([s[0][name] for s in per_set], reps))
    return res


class Dcpmla:
    """dcpmla_gpu_bench --serve as a child process: one shape a request."""

    def __init__(self, bench, reps):
        self.p = subprocess.Popen(
            [bench, "--serve", "--reps", str(reps)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.hello = self._read()

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"dcpmla_gpu_bench --serve ended (status {self.p.wait()})")
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError("dcpmla_gpu_bench: " + r["error"])
        return r

    def time(self, **shape):
        self.p.stdin.write(json.dumps(shape) + "\n")
        self.p.stdin.flush()
        return self._read()

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def summary(rounds):
    """A list of per-round timings -> the median of the medians, the min of the mins."""
    g = [r["graph_us"] for r in rounds if r.get("graph_us")]
    return {
        "us": statistics.median(r["median_us"] for r in rounds),
        "min_us": min(r["min_us"] for r in rounds),
        "graph_us": statistics.median(g) if g else None,
        "rounds_us": [round(r["median_us"], 2) for r in rounds],
    }


def result_row(sh, run):
    """A shape's entry of the results from its rounds (those that failed are listed)."""
    errors = [r["error"] for side in run.values() for r in side if "error" in r]
    run = {side: [r for r in rs if "error" not in r] for side, rs in run.items()}
    if not run["dcpmla"] or not run["flashmla"]:
        return {"shape": sh["shape"], "errors": errors}
    B, L, H, q = sh["B"], sh["L"], sh["H"], sh["q"]
    qs = q if isinstance(q, list) else [q] * B
    flops, kv_bytes = sum(qs) * L * H * 2176.0, B * L * D_QK * 2.0
    d = summary(run["dcpmla"])
    row = {"shape": sh["shape"]}
    if sh["name"]:
        row["name"] = sh["name"]
    if errors:
        row["errors"] = errors
    if isinstance(q, list):
        row["q"] = q
        chk = next((r for r in run["flashmla"] if "padded_first" in r), None)
        check = {
            name: {k: chk[name][k] if chk else None for k in ("max_row_rel_err", "correct")}
            for name in ("flattened", "per_q", "padded", "padded_first")
        }
        strategies = {}
        for name in ("flattened", "per_q", "padded"):
            strategies[name] = summary([r[name] for r in run["flashmla"]]) | check[name]
        ok = [n for n, s in strategies.items() if s["correct"]]
        best = min(ok or strategies, key=lambda n: strategies[n]["us"])
        f = strategies[best]
        row["flashmla_strategy"] = best
        row["flashmla_strategies"] = strategies
        row["padded_first"] = check["padded_first"]
    else:
        f = summary(run["flashmla"])
        row["flashmla_output_finite"] = all(r["output_finite"] for r in run["flashmla"])
    row.update(
        {
            "dcpmla_us": d["us"],
            "flashmla_us": f["us"],
            "dcpmla_min_us": d["min_us"],
            "flashmla_min_us": f["min_us"],
            "ratio": f["us"] / d["us"],
            "dcpmla_graph_us": d["graph_us"],
            "flashmla_graph_us": f["graph_us"],
            "dcpmla_rounds_us": d["rounds_us"],
            "flashmla_rounds_us": f["rounds_us"],
            "useful_tflops": {
                "dcpmla": flops / d["us"] / 1e6,
                "flashmla": flops / f["us"] / 1e6,
            },
            "kv_tbps": {
                "dcpmla": kv_bytes / d["us"] / 1e6,
                "flashmla": kv_bytes / f["us"] / 1e6,
            },
            "dcpmla_world": sh["world"],
            "input_sets": n_sets(B, L),
            "dcpmla_output_finite": all(r["output_finite"] for r in run["dcpmla"]),
        }
    )
    for side in ("dcpmla", "flashmla"):
        boards = [r["board"] for r in run[side] if r.get("board")]
        if boards:
            row[f"{side}_sm_mhz"] = statistics.median(b["sm_mhz"] for b in boards)
            row[f"{side}_power_w"] = statistics.median(b["power_w"] for b in boards)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True, help="dcpmla_gpu_bench built with the CUDA backend")
    ap.add_argument(
        "--flashmla",
        required=True,
        help="FlashMLA source tree with its extension built in place",
    )
    ap.add_argument("--out", required=True)
    ap.add_argument("--raw", help="every round's timings, rewritten after each shape")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument(
        "--board-ms",
        type=int,
        default=0,
        help="sample the board's SM clock and power with nvidia-smi every N ms (0: off)",
    )
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--flashmla-commit", default="unknown")
    ap.add_argument("--command", default=" ".join(sys.argv))
    args = ap.parse_args()
    sys.path.insert(0, args.flashmla)
    global flash_mla
    import flash_mla

    torch.backends.cuda.matmul.allow_tf32 = False
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ours = Dcpmla(args.bench, args.reps)
    mix = ours.hello["ragged_mix_q"]
    shapes = [
        {
            "shape": list(s),
            "name": n,
            "B": s[0],
            "L": s[1],
            "H": s[2],
            "q": s[3],
            "world": w,
        }
        for s, n, w in UNIFORM
    ]
    for L, H in RAGGED:
        name = f"ragged 64 x Q 1..8, L {L}, H {H}"
        shapes.append({"shape": name, "name": None, "B": 64, "L": L, "H": H, "q": mix, "world": 1})
    runs = [{"dcpmla": [], "flashmla": []} for _ in shapes]
    with BoardSamples(args.board_ms) as board:
        results = run_rounds(args, ours, shapes, runs, board, date)
    ours.close()
    print_table(results)


def run_rounds(args, ours, shapes, runs, board, date):
    """Every round of every shape, both sides, the JSON rewritten after each round; returns the
    last round's results."""
    results = []
    for rnd in range(args.rounds):
        for sh, run in zip(shapes, runs):
            B, L, H, q = sh["B"], sh["L"], sh["H"], sh["q"]
            sides = ["dcpmla", "flashmla"] if rnd % 2 == 0 else ["flashmla", "dcpmla"]
            for side in sides:
                label = f"{side} {sh['shape']}"
                t0 = time.time()
                if side == "dcpmla":
                    r = timed_or_error(
                        label, ours.time, B=B, L=L, H=H, q=q, world=sh["world"], sets=n_sets(B, L)
                    )
                elif isinstance(q, list):
                    checked = any("padded_first" in r for r in run["flashmla"])
                    r = timed_or_error(
                        label, flashmla_ragged, q, L, H, args.reps, check=not checked
                    )
                else:
                    r = timed_or_error(label, flashmla_uniform, B, L, H, q, args.reps)
                b = board.window(t0, time.time())
                if b is not None and "error" not in r:
                    r["board"] = b
                run[side].append(r)
            print(f"round {rnd} {sh['shape']}: done", file=sys.stderr, flush=True)
            if args.raw:
                with open(args.raw, "w") as fh:
                    json.dump({"shapes": shapes, "runs": runs}, fh)
        results = [result_row(sh, run) for sh, run in zip(shapes, runs)]
        doc = {
            "commit": args.commit,
            "flashmla_commit": args.flashmla_commit,
            "date": date,
            "device": ours.hello["device"],
            "command": args.command,
            "rounds": rnd + 1,
            "reps": args.reps,
            "method": __doc__.split("\n\n")[1].replace("\n", " "),
            "ceilings": ours.hello["ceilings"],
            "results": results,
        }
        # Rewritten after every round, so a run cut short keeps what it measured.
        with open(args.out, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
    return results


def print_table(results):
    board = any("dcpmla_sm_mhz" in r for r in results)
    head = f"{'shape':<36} {'dcpmla us':>10} {'FlashMLA us':>12} {'ratio':>6}"
    print(head + (f" {'SM MHz':>11}" if board else "") + "  FlashMLA")
    ratios = []
    for r in results:
        shape = r["shape"]
        label = r.get("name") or (",".join(map(str, shape)) if isinstance(shape, list) else shape)
        if "ratio" not in r:
            print(f"{label:<36} failed: {r['errors'][:1]}")
            continue
        ratios.append(r["ratio"])
        form = r.get("flashmla_strategy", "uniform")
        us = f"{r['dcpmla_us']:>10.1f} {r['flashmla_us']:>12.1f} {r['ratio']:>6.3f}"
        if board:
            mhz = [r.get(f"{side}_sm_mhz") for side in ("dcpmla", "flashmla")]
            us += " " + "/".join("-" if m is None else f"{m:.0f}" for m in mhz).rjust(11)
        print(f"{label:<36} {us}  {form}")
    if ratios:
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"geometric mean of the ratios (FlashMLA / dcpmla): {geomean:.3f}")


if __name__ == "__main__":
    main()
