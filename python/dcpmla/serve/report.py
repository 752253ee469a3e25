"""The run's report: configuration, throughput, acceptance, CUDA graphs (captured, steps replayed
and run eagerly), per-step time split into attention, combine and the rest (eager steps only: a
replayed graph runs without the host's marks), agreement with the oracle; saved as JSON, and a
plot of step time against batch tokens."""

import json

import numpy as np


def build_report(config, result, agreement, oracle):
    records = result["records"]
    generated = sum(len(t) for t in result["generated"].values())
    proposed, accepted = result["drafts_proposed"], result["drafts_accepted"]
    margins = np.array([m for o in oracle.values() for m in o.margins])

    def mean(values):
        """The mean of the values measured (None: a replayed step's split)."""
        values = [v for v in values if v is not None]
        return float(np.mean(values)) if values else None

    return {
        "config": config.to_dict(),
        "softmax_scale": result["softmax_scale"],
        "backend": result["backend"],
        "throughput": {
            "generated_tokens": generated,
            "serve_seconds": result["serve_seconds"],
            "tokens_per_second": generated / result["serve_seconds"],
            "steps": len(records),
            "batch_rows": sum(r.tokens for r in records),
            "preemptions": result["preemptions"],
        },
        "speculative": {
            "drafts_proposed": proposed,
            "drafts_accepted": accepted,
            "acceptance_rate": accepted / proposed if proposed else None,
            # tokens a request gains per step it is in (1 without drafts)
            "tokens_per_request_step": generated / max(1, sum(r.requests for r in records)),
        },
        "cuda_graphs": result["cuda_graphs"],
        # total: every step; attention, combine and rest: the eager steps (None without any)
        "step_time_mean_seconds": {
            "total": mean([r.seconds for r in records]),
            "attention": mean([r.attention for r in records]),
            "combine": mean([r.combine for r in records]),
            "rest": mean([r.rest for r in records]),
        },
        "steps": [
            {
                "tokens": r.tokens,
                "padded_tokens": r.padded_tokens,
                "requests": r.requests,
                "prefill_rows": r.prefill_rows,
                "new_tokens": r.new_tokens,
                "seconds": r.seconds,
                "attention": r.attention,
                "combine": r.combine,
                "rest": r.rest,
                "viewed_uniform": r.viewed_uniform,
                "replayed": r.replayed,
            }
            for r in records
        ],
        "warmup": {
            "batches": result["warmup_shapes"],
            "seconds": result["warmup_seconds"],
        },
        "controls": {
            "full_mask": config.control_full_mask,
            "uniform_view": config.control_uniform_view,
            "steps_viewed_uniform": sum(r.viewed_uniform for r in records),
        },
        "oracle_margins": {
            "min": float(margins.min()),
            "median": float(np.median(margins)),
            "below_delta": int((margins < config.margin_delta).sum()),
        },
        "agreement": agreement,
        "generated": {str(k): v for k, v in result["generated"].items()},
    }


def write_report(report, path):
    with open(path, "w") as f:
        json.dump(report, f, indent=1)


def plot_step_times(report, path):
    """PNG: each step's time (ms) against its batch tokens, total and its attention / combine
    (eager steps), replayed graphs marked apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = report["steps"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = [("step total (eager)", "seconds", "o", False)]
    series += [(key, key, marker, False) for key, marker in (("attention", "^"), ("combine", "s"))]
    series += [("rest", "rest", "x", False), ("step total (graph replay)", "seconds", "D", True)]
    for label, key, marker, replayed in series:
        shown = [s for s in steps if s["replayed"] == replayed]
        if shown:
            tokens, ms = [s["tokens"] for s in shown], [1e3 * s[key] for s in shown]
            ax.scatter(tokens, ms, marker=marker, label=label, s=18)
    cfg = report["config"]
    ax.set_xlabel("batch tokens (query rows)")
    ax.set_ylabel("time (ms)")
    ax.set_title(
        f"{cfg['variant']}, {cfg['num_layers']} layers, W = {cfg['world']} ({cfg['combine']}), "
        f"K = {cfg['max_drafts']}"
    )
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
