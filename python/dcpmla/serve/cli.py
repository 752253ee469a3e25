"""python -m dcpmla.serve (console script dcpmla-serve): serve a seeded DeepSeek-V3-shaped model
through dcpmla and check its tokens against transformers' greedy decoding of the same weights.

Exit status: 0 when every compared token agrees with the oracle where the oracle's margin exceeds
--margin-delta (a request is compared up to its first divergence: after a flip below the delta
the two sequences differ), 1 when one does not (a negative control is expected to give 1), 2 on
bad arguments, 3 when the run fails otherwise."""

import argparse
import json
import sys
import traceback

from dcpmla.serve.config import ServeConfig


def _parser():
    d = ServeConfig()
    description, exit_status = __doc__.split("\n\n")
    p = argparse.ArgumentParser(
        prog="python -m dcpmla.serve", description=description, epilog=exit_status
    )
    p.add_argument("--variant", default=d.variant, help="deepseek-v3 (16 heads) or kimi (96)")
    p.add_argument("--layers", type=int, default=d.num_layers)
    p.add_argument("--hidden-size", type=int, default=d.hidden_size)
    p.add_argument("--vocab-size", type=int, default=d.vocab_size)
    p.add_argument("--init-std", type=float, default=d.init_std)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--world", "--dcp", type=int, default=d.world, help="DCP ranks (processes)")
    p.add_argument("--combine", default=d.combine, help="ag_rs or a2a")
    p.add_argument("--interleave", type=int, default=d.interleave, help="DCP interleave")
    p.add_argument("--max-drafts", "-K", type=int, default=d.max_drafts)
    p.add_argument("--draft-corruption", type=float, default=d.draft_corruption)
    p.add_argument("--requests", type=int, default=d.num_requests)
    p.add_argument("--prompt-len", type=int, nargs=2, default=d.prompt_len, metavar=("MIN", "MAX"))
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--arrival-gap", type=int, default=d.arrival_gap)
    p.add_argument("--block-size", type=int, default=d.block_size)
    p.add_argument("--num-blocks", type=int, default=d.num_blocks)
    p.add_argument("--max-running", type=int, default=d.max_running)
    p.add_argument("--max-batch-tokens", type=int, default=d.max_batch_tokens)
    p.add_argument("--max-capture-size", type=int, default=d.max_capture_size)
    p.add_argument(
        "--capture-sizes",
        type=int,
        nargs="*",
        default=list(d.capture_sizes),
        help="instead of 1..max: batches are padded up to the next of them",
    )
    p.add_argument("--device", default=d.device, help="cpu or cuda (rank r on GPU r %% GPUs)")
    p.add_argument("--decode", default=d.decode, help="numpy (CPU only) or torch")
    p.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=d.cuda_graphs,
        help="capture the step in a CUDA graph per capture size at warm-up and replay them "
        "(default: on with --device cuda --decode torch at W = 1 or with a GPU a rank, off for "
        "ranks simulated on shared GPUs; requires capture sizes)",
    )
    p.add_argument("--q-dtype", default=d.q_dtype, help="fp32 or bf16")
    p.add_argument("--kv-dtype", default=d.kv_dtype, help="fp32, bf16 or fp8")
    p.add_argument("--k-scale", type=float, default=d.k_scale)
    p.add_argument("--control-full-mask", action="store_true", help="negative control")
    p.add_argument("--control-uniform-view", action="store_true", help="negative control")
    p.add_argument("--margin-delta", type=float, default=d.margin_delta)
    p.add_argument("--report", default="serve_report.json", help="JSON report path")
    p.add_argument("--plot", default="serve_steps.png", help="PNG plot path ('' for none)")
    p.add_argument("--no-progress", action="store_true")
    return p


def config_from_args(args):
    return ServeConfig(
        variant=args.variant,
        num_layers=args.layers,
        hidden_size=args.hidden_size,
        vocab_size=args.vocab_size,
        init_std=args.init_std,
        seed=args.seed,
        world=args.world,
        combine=args.combine,
        interleave=args.interleave,
        max_drafts=args.max_drafts,
        draft_corruption=args.draft_corruption,
        num_requests=args.requests,
        prompt_len=tuple(args.prompt_len),
        max_new_tokens=args.max_new_tokens,
        arrival_gap=args.arrival_gap,
        block_size=args.block_size,
        num_blocks=args.num_blocks,
        max_running=args.max_running,
        max_batch_tokens=args.max_batch_tokens,
        max_capture_size=args.max_capture_size,
        capture_sizes=tuple(args.capture_sizes),
        device=args.device,
        decode=args.decode,
        cuda_graphs=args.cuda_graphs,
        q_dtype=args.q_dtype,
        kv_dtype=args.kv_dtype,
        k_scale=args.k_scale,
        control_full_mask=args.control_full_mask,
        control_uniform_view=args.control_uniform_view,
        margin_delta=args.margin_delta,
        show_progress=not args.no_progress,
    )


def summary(report):
    a, t, s = report["agreement"], report["throughput"], report["speculative"]
    acc = "n/a" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.2f}"
    first = a["first_divergence"]
    g = report["cuda_graphs"]
    graphs = (
        f"CUDA graphs: {g['captured']} captured, {g['replayed_steps']} steps replayed, "
        f"{g['eager_steps']} eager"
        if g["used"]
        else "no CUDA graphs"
    )
    return (
        f"{t['generated_tokens']} tokens in {t['steps']} steps ({graphs}), "
        f"{t['tokens_per_second']:.1f} tok/s, "
        f"acceptance {acc}; oracle: {a['positions_compared']} positions compared, "
        f"{a['requests_identical']}/{a['requests']} requests identical, "
        f"{a['flips_below_delta']} flips below delta {a['margin_delta']}, "
        f"{a['disagreements_above_delta']} disagreements above it"
        + ("" if first is None else f"; first divergence {json.dumps(first)}")
    )


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        config = config_from_args(args).validate()
        from dcpmla.serve.launch import collective_backend
        from dcpmla.serve.step_graphs import cuda_graphs_choice

        _require_cuda(config)
        cuda_graphs_choice(config, collective_backend(config))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from dcpmla.serve.launch import serve
    from dcpmla.serve.report import plot_step_times, write_report

    # A run that fails is not a disagreement: exit 1 is what a negative control must give.
    try:
        report = serve(config)
        write_report(report, args.report)
        if args.plot:
            plot_step_times(report, args.plot)
    except Exception:
        traceback.print_exc()
        print("error: the run failed (exit status 3; see above)", file=sys.stderr)
        return 3
    print(summary(report))
    return 0 if report["agreement"]["passed"] else 1


def _require_cuda(config):
    """ValueError naming device when device is cuda and torch sees no GPU."""
    if config.device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise ValueError(
            "device (unavailable): expected a CUDA device for --device cuda, got none "
            "(torch.cuda.is_available() is False)"
        )
