"""Host overhead of BatchMLADecodeWrapper: microseconds per call of `run` (a decode with almost no
work: one token of one request, so the call's checks and dispatch dominate) and of `plan` (the
host planner for 256 ragged requests, Q 1..8, contexts 1..8192, H 128), next to an empty torch op
call. Medians of --rounds rounds of --calls calls.

    PYTHONPATH=build/python python3 bench/python/torch_overhead.py [--device cuda] [--json FILE]
"""

import argparse
import json
import platform
import statistics
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

import dcpmla

SOFTMAX_SCALE = 0.1352338


def per_call_us(fn, calls, rounds, synchronize):
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def ragged_batch(requests, seed=0):
    g = torch.Generator().manual_seed(seed)
    q_lens = torch.randint(1, 9, (requests,), generator=g, dtype=torch.int32)
    seq_lens = q_lens + torch.randint(0, 8192, (requests,), generator=g, dtype=torch.int32)
    query_start_loc = torch.zeros(requests + 1, dtype=torch.int32)
    query_start_loc[1:] = torch.cumsum(q_lens, 0)
    return query_start_loc, seq_lens


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    results = {}

    # run: one token of one request, 1 head, a 1-block cache.
    wrapper = dcpmla.BatchMLADecodeWrapper(
        torch.empty(1 << 20, dtype=torch.uint8, device=device), 1, 64, torch.bfloat16,
        num_blocks=1, max_num_reqs=1, max_num_tokens=1, max_blocks_per_req=1,
    )  # fmt: skip
    wrapper.plan(
        torch.tensor([0, 1], dtype=torch.int32), torch.tensor([1], dtype=torch.int32),
        softmax_scale=SOFTMAX_SCALE,
    )  # fmt: skip
    q = torch.randn((1, 1, 576), device=device).bfloat16()
    cache = torch.randn((1, 64, 576), device=device).bfloat16()
    table = torch.zeros((1, 1), dtype=torch.int32, device=device)
    out = torch.empty((1, 1, 512), dtype=torch.bfloat16, device=device)
    lse = torch.empty((1, 1), device=device)
    results["run_us"] = per_call_us(
        lambda: wrapper.run(q, cache, table, out=out, lse=lse), args.calls, args.rounds, sync
    )
    results["raw_op_us"] = per_call_us(
        lambda: torch.ops.dcpmla.mla_decode_(
            q, cache, table, wrapper.schedule, wrapper._workspace, out, lse, SOFTMAX_SCALE
        ),
        args.calls, args.rounds, sync,
    )  # fmt: skip
    results["empty_torch_op_us"] = per_call_us(
        lambda: torch.ops.aten.alias(out), args.calls, args.rounds, sync
    )

    # plan: 256 ragged requests on the host planner, into a schedule sized once (CUDA graphs).
    requests, heads, block_size = 256, 128, 64
    query_start_loc, seq_lens = ragged_batch(requests)
    max_blocks = 8200 // block_size + 1
    limits = dict(max_num_reqs=requests, max_num_tokens=8 * requests, max_blocks_per_req=max_blocks)
    config = [heads, block_size, requests * max_blocks, 1, 0, 1]
    index = -1 if device.type == "cpu" else device.index or 0
    need = torch.ops.dcpmla.schedule_sizes(index, config, list(limits.values()))[1]
    planner = dcpmla.BatchMLADecodeWrapper(
        torch.empty(need, dtype=torch.uint8, device=device), heads, block_size, torch.bfloat16,
        use_cuda_graph=True, num_blocks=requests * max_blocks, **limits,
    )  # fmt: skip
    results["plan_256_requests_us"] = per_call_us(
        lambda: planner.plan(query_start_loc, seq_lens, softmax_scale=SOFTMAX_SCALE),
        max(args.calls // 10, 10), args.rounds, sync,
    )  # fmt: skip

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    record = {
        "command": "python3 bench/python/torch_overhead.py " + f"--device {args.device}",
        "commit": commit,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "device": args.device,
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} "
        f"torch threads, torch {torch.__version__}",
        "results": {k: round(v, 2) for k, v in results.items()},
    }
    print(json.dumps(record, indent=2))
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
