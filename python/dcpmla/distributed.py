"""The rank-to-rank steps of a DCP decode over a torch.distributed process group (the engine's
own: gloo on CPU, NCCL on GPUs), in torch: the query all-gather over heads and the combine of the
ranks' partial attention results by log-sum-exp (docs/spec.md, section 5).

Shapes (N query rows, H heads of the whole step, W ranks, Hl = H / W heads a rank owns):

- dcp_gather_heads: q_local [N, Hl, 576] -> q [N, H, 576], rank r's heads at [r * Hl, (r+1) * Hl);
- dcp_combine: the rank's partial (out [N, H, 512], lse [N, H] natural log over the positions it
  owns) -> its heads of the full attention, out [N, Hl, 512] (and lse [N, Hl] on request).

The merge runs in fp32; a row and head whose LSE is -inf on every rank comes out O = 0,
LSE = -inf; a NaN or +inf LSE on any rank makes that row and head O = NaN, LSE = NaN.

Every rank of the group calls with the same N, H and dtypes, as for any collective. Arguments are
checked before the first collective, so ranks given the same bad arguments raise together; a rank
whose arguments differ from its peers' (or that raises alone) leaves them waiting in the
collective until the group's timeout, or the backend aborts.
"""

import torch
import torch.distributed as dist

from dcpmla._scalars import argument_error

COMBINE_MODES = ("ag_rs", "a2a")
_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _world(group):
    world = dist.get_world_size(group)
    if world < 1:
        raise argument_error(
            ValueError,
            "group",
            "invalid argument",
            "a process group this rank belongs to",
            f"world size {world} (this rank is not a member)",
        )
    return world


def _check_tensor(tensor, argument, dtypes, rank):
    if not isinstance(tensor, torch.Tensor):
        raise argument_error(
            TypeError, argument, "type mismatch", "a torch.Tensor", type(tensor).__name__
        )
    if tensor.dtype not in dtypes:
        names = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise argument_error(
            TypeError, argument, "dtype mismatch", names, str(tensor.dtype).removeprefix("torch.")
        )
    if tensor.dim() != rank:
        raise argument_error(
            ValueError, argument, "shape mismatch", f"{rank} dimensions", tuple(tensor.shape)
        )


def _check_width(tensor, argument, width, layout):
    if tensor.shape[-1] != width:
        raise argument_error(
            ValueError, argument, "shape mismatch", f"shape {layout}", tuple(tensor.shape)
        )


def _check_same_device(tensor, argument, other, other_argument):
    if tensor.device != other.device:
        raise argument_error(
            ValueError,
            argument,
            "invalid argument",
            f"a tensor on {other_argument}'s device {other.device}",
            tensor.device,
        )


def _check_heads(heads, world, argument):
    if heads % world != 0:
        raise argument_error(
            ValueError,
            argument,
            "shape mismatch",
            f"a head count divisible by the group's world size {world}",
            heads,
        )


def dcp_gather_heads(q_local, group=None):
    """All-gather of the query over heads: q_local [N, Hl, 576] on every rank -> [N, W * Hl, 576]
    (q_local's dtype), rank r's heads at [r * Hl, (r + 1) * Hl)."""
    _check_tensor(q_local, "q_local", _OUT_DTYPES, 3)
    _check_width(q_local, "q_local", 576, "[N, Hl, 576]")
    world = _world(group)
    if world == 1:
        return q_local
    n, heads_local, dim = q_local.shape
    # Gathered as [W * N, Hl, 576] (gloo wants the ranks' chunks concatenated along dim 0).
    gathered = torch.empty(
        (world * n, heads_local, dim), dtype=q_local.dtype, device=q_local.device
    )
    dist.all_gather_into_tensor(gathered, q_local.contiguous(), group=group)
    # [W, N, Hl, 576] -> [N, W, Hl, 576]: heads of rank r follow those of rank r - 1.
    gathered = gathered.view(world, n, heads_local, dim)
    return gathered.permute(1, 0, 2, 3).reshape(n, world * heads_local, dim)


def merge_partials(out_parts, lse_parts):
    """Log-sum-exp merge over the first axis in fp32: out_parts [W, ...rows, D], lse_parts
    [W, ...rows] -> (out [...rows, D] float32, lse [...rows] float32). Empty partials (-inf) are
    skipped, never read; any NaN or +inf LSE makes the row NaN."""
    lse_parts = lse_parts.float()
    lse, weights = _merge_weights(lse_parts)
    # Multiply only where the weight is positive, so that a garbage payload behind an empty
    # partial never leaks (0 * NaN would).
    terms = torch.where(weights[..., None] > 0, out_parts.float() * weights[..., None], 0.0)
    out = terms.sum(dim=0)
    out = torch.where(torch.isnan(lse)[..., None], float("nan"), out)
    return out, lse


def _merge_weights(lse_parts):
    """(lse [...rows], weights [W, ...rows]): the merged LSE of partials lse_parts [W, ...rows]
    and each partial's share exp(L_r - L) of it (0 for an empty partial, NaN for a bad row)."""
    bad = (torch.isnan(lse_parts) | torch.isposinf(lse_parts)).any(dim=0)
    peak = lse_parts.max(dim=0).values
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    shifted = torch.exp(lse_parts - peak)  # exp(-inf) = 0: empty partials weigh nothing
    total = shifted.sum(dim=0)
    lse = torch.where(total > 0, peak + torch.log(total), float("-inf"))
    weights = torch.where(total > 0, shifted / total.clamp_min(torch.finfo(total.dtype).tiny), 0.0)
    lse = torch.where(bad, float("nan"), lse)
    weights = torch.where(bad, float("nan"), weights)
    return lse, weights


def dcp_combine(out, lse, group=None, mode="ag_rs", *, return_lse=False):
    """Merges the rank-local partial (out [N, H, 512], lse [N, H] float32 natural log) of every
    rank of `group`; returns this rank's heads [r * H / W, (r + 1) * H / W) of the full attention,
    out [N, H / W, 512] in out's dtype (and lse [N, H / W] float32 when return_lse).

    mode "ag_rs": all-gather the LSE [W, N, H], rescale the local O by exp(L_r - L) and
    reduce-scatter O over heads (vLLM's cp_lse_ag_out_rs). mode "a2a": one all-to-all of the
    partials by heads ([W, N, H / W, 512] and the LSE), merged on the receiver.
    """
    _check_tensor(out, "out", _OUT_DTYPES, 3)
    _check_tensor(lse, "lse", (torch.float32,), 2)
    _check_width(out, "out", 512, "[N, H, 512]")
    _check_same_device(lse, "lse", out, "out")
    if mode not in COMBINE_MODES:
        raise argument_error(ValueError, "mode", "invalid value", " or ".join(COMBINE_MODES), mode)
    n, heads, dim = out.shape
    if tuple(lse.shape) != (n, heads):
        raise argument_error(
            ValueError,
            "lse",
            "shape mismatch",
            f"({n}, {heads}) (out's rows and heads)",
            tuple(lse.shape),
        )
    world = _world(group)
    _check_heads(heads, world, "out")
    heads_local = heads // world
    if world == 1:
        merged, merged_lse = merge_partials(out[None], lse[None])
    elif mode == "ag_rs":
        merged, merged_lse = _combine_ag_rs(out, lse, group, world, heads_local)
    else:
        merged, merged_lse = _combine_a2a(out, lse, group, world, heads_local)
    merged = merged.to(out.dtype)
    return (merged, merged_lse) if return_lse else merged


def _head_major(tensor, world, heads_local):
    """[N, W * Hl, ...] -> [W, N, Hl, ...] contiguous: the slices of the heads rank r owns."""
    n = tensor.shape[0]
    return tensor.reshape(n, world, heads_local, *tensor.shape[2:]).transpose(0, 1).contiguous()


def _combine_ag_rs(out, lse, group, world, heads_local):
    rank = dist.get_rank(group)
    n, heads, dim = out.shape
    all_lse = torch.empty((world * n, heads), dtype=torch.float32, device=lse.device)
    dist.all_gather_into_tensor(all_lse, lse.contiguous(), group=group)
    all_lse = all_lse.view(world, n, heads)
    merged_lse, weights = _merge_weights(all_lse)  # [N, H], [W, N, H]
    mine = weights[rank]
    scaled = torch.where(mine[..., None] > 0, out.float() * mine[..., None], 0.0)
    scaled = torch.where(torch.isnan(mine)[..., None], float("nan"), scaled)
    # [W, N, Hl, 512] flattened: rank r receives the sum over ranks of chunk r.
    chunks = _head_major(scaled, world, heads_local).reshape(world * n, heads_local, dim)
    merged = torch.empty((n, heads_local, dim), dtype=torch.float32, device=out.device)
    dist.reduce_scatter_tensor(merged, chunks, op=dist.ReduceOp.SUM, group=group)
    heads_mine = slice(rank * heads_local, (rank + 1) * heads_local)
    merged_lse = merged_lse[:, heads_mine].contiguous()
    merged = torch.where(torch.isnan(merged_lse)[..., None], float("nan"), merged)
    return merged, merged_lse


def _combine_a2a(out, lse, group, world, heads_local):
    # Chunk r of the send buffers goes to rank r: this rank's partial for rank r's heads.
    send_out = _head_major(out, world, heads_local)  # [W, N, Hl, 512], out's dtype
    send_lse = _head_major(lse.float(), world, heads_local)  # [W, N, Hl]
    recv_out = torch.empty_like(send_out)
    recv_lse = torch.empty_like(send_lse)
    dist.all_to_all_single(recv_out, send_out, group=group)
    dist.all_to_all_single(recv_lse, send_lse, group=group)
    return merge_partials(recv_out, recv_lse)  # chunk r now: rank r's partial for my heads
