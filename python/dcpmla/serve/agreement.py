"""Agreement of the served tokens with the oracle's: per request, positions are compared up to
the first one that differs (after it the two continuations have different contexts). A difference
where the oracle's top-1 / top-2 margin is below delta is a flip (rounding may decide it); one
above delta is a disagreement, and fails the run."""


def compare_with_oracle(generated, oracle, delta):
    """generated: request id -> served tokens; oracle: request id -> OracleContinuation."""
    compared = flips = disagreements = 0
    divergences = []
    for request_id in sorted(generated):
        served, truth = generated[request_id], oracle[request_id]
        for position, (got, want) in enumerate(zip(served, truth.tokens)):
            compared += 1
            if got == want:
                continue
            margin = truth.margins[position]
            below = margin < delta
            flips += below
            disagreements += not below
            divergences.append(
                {
                    "request": request_id,
                    "position": position,
                    "served": got,
                    "oracle": want,
                    "oracle_margin": margin,
                    "below_delta": below,
                }
            )
            break
    first = min(divergences, key=lambda d: (d["position"], d["request"]), default=None)
    return {
        "margin_delta": delta,
        "positions_compared": compared,
        "requests": len(generated),
        "requests_identical": len(generated) - len(divergences),
        "flips_below_delta": flips,
        "disagreements_above_delta": disagreements,
        "first_divergence": first,
        "divergences": divergences,
        "passed": disagreements == 0,
    }
