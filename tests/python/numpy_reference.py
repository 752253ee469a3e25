"""MLA decode attention in float64 numpy, written from the SPEC alone (independent of the
library): the oracle of these tests."""

import numpy as np

LATENT = 512


def owner(positions, world, interleave):
    """Rank holding each global position: floor(p / I) mod W."""
    return (positions // interleave) % world


def attend(
    q,
    keys,
    query_start_loc,
    seq_lens,
    scale,
    *,
    num_tokens=None,
    masks=None,
    rank=None,
    world=1,
    interleave=1,
):
    """out [N, H, 512], lse [N, H] (natural log) in float64.

    q: [N, H, 576] float64; keys: per request the [T_b, 576] float64 values the cache holds, in
    position order. Row j of a request with Q tokens sees positions < T - (Q - 1 - j) ("causal")
    or < T ("full"); with `rank` set only the positions that rank owns. A row that sees nothing:
    O = 0, LSE = -inf; padding rows likewise.
    """
    rows = q.shape[0] if num_tokens is None else num_tokens
    heads = q.shape[1]
    out = np.zeros((rows, heads, LATENT))
    lse = np.full((rows, heads), -np.inf)
    for b, T in enumerate(seq_lens):
        begin, end = int(query_start_loc[b]), int(query_start_loc[b + 1])
        Q = end - begin
        positions = np.arange(T)
        full = masks is not None and masks[b] == "full"
        bounds = np.full(Q, T) if full else T - (Q - 1 - np.arange(Q))
        allowed = positions[None, :] < bounds[:, None]  # [Q, T]
        if rank is not None:
            allowed &= (owner(positions, world, interleave) == rank)[None, :]
        kv = keys[b]
        scores = (q[begin:end].reshape(Q * heads, -1) @ kv.T).reshape(Q, heads, T) * scale
        scores = np.where(allowed[:, None, :], scores, -np.inf)
        seen = allowed.any(axis=1)  # [Q]
        peak = np.where(seen[:, None], scores.max(axis=2, initial=-np.inf), 0.0)
        weights = np.exp(scores - peak[:, :, None])
        total = weights.sum(axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[begin:end] = np.where(
                seen[:, None, None], (weights @ kv[:, :LATENT]) / total[:, :, None], 0.0
            )
            lse[begin:end] = np.where(seen[:, None], peak + np.log(total), -np.inf)
    return out, lse


def merge(partials):
    """Log-sum-exp merge of (out, lse) partials over ranks; empty partials (LSE -inf) skipped."""
    lses = np.stack([lse for _, lse in partials])  # [W, N, H]
    outs = np.stack([out for out, _ in partials])  # [W, N, H, 512]
    peak = np.max(lses, axis=0)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    weights = np.exp(lses - peak)
    total = weights.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(
            total[..., None] > 0, (weights[..., None] * outs).sum(axis=0) / total[..., None], 0.0
        )
        lse = np.where(total > 0, peak + np.log(total), -np.inf)
    return out, lse
