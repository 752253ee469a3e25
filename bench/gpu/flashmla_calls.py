"""FlashMLA's dense decode called a few times on one uniform shape, for a profiler to pick one call.

scripts/device_profile.sh runs this under Nsight Compute beside dcpmla_gpu_bench --shape on the same
shape (B requests of L KV tokens, H heads, Q query tokens, bf16, block size 64, a permuted block
table), so that both kernels are read with the same sections and metrics.

usage: flashmla_calls.py --flashmla DIR --shape B,L,H,Q [--calls N]
"""

import argparse
import math
import sys

import torch

D_QK, D_V, BLOCK = 576, 512, 64
SCALE = 0.1352338  # dcpmla_gpu_bench's softmax scale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashmla", required=True, help="FlashMLA tree with the built extension")
    ap.add_argument("--shape", required=True, help="B,L,H,Q")
    ap.add_argument("--calls", type=int, default=8)
    args = ap.parse_args()
    b, seqlen, heads, q_len = (int(v) for v in args.shape.split(","))
    sys.path.insert(0, args.flashmla)
    import flash_mla

    dev = torch.device("cuda:0")
    g = torch.Generator(device=dev).manual_seed(1)
    blocks = b * math.ceil(seqlen / BLOCK)
    cache = torch.rand(blocks, BLOCK, 1, D_QK, device=dev, generator=g).to(torch.bfloat16)
    q = torch.rand(b, q_len, heads, D_QK, device=dev, generator=g).to(torch.bfloat16)
    table = torch.randperm(blocks, device=dev, generator=g).to(torch.int32).view(b, -1)
    lens = torch.full((b,), seqlen, device=dev, dtype=torch.int32)
    meta, _ = flash_mla.get_mla_metadata()
    for _ in range(args.calls):
        flash_mla.flash_mla_with_kvcache(
            q, cache, table, lens, D_V, meta, None, softmax_scale=SCALE, causal=q_len > 1
        )
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
