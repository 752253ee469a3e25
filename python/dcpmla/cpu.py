"""The library's CPU backend on numpy (or any DLPack) arrays, read and written in place.

Shapes (N query rows incl. padding, H heads, B requests):

- q: [N, H, 576] float32 or bfloat16 (ml_dtypes): the absorbed query, 512 latent + 64 rope;
- kv_cache: [num_blocks, block_size, 576] float32, bfloat16 or float8_e4m3fn (ml_dtypes), the
  paged latent cache of one rank (an fp8 cache stores e4m3(x / k_scale));
- block_table: [B, max_blocks] int32, local block index -> physical block, shared by the ranks;
- query_start_loc: [B + 1] int32/int64, request b owns rows [qsl[b], qsl[b + 1]);
- seq_lens: [B] int32/int64, global lengths including this step's query tokens;
- out: [N, H, 512] float32 or q's dtype; lse: [N, H] float32, natural log.

Rows past query_start_loc[B] up to num_tokens are padding: O = 0, LSE = -inf.
"""

from dcpmla import _core
from dcpmla._outputs import attention_outputs
from dcpmla._scalars import index, optional_index, real, string


def mla_decode(
    q,
    kv_cache,
    block_table,
    query_start_loc,
    seq_lens,
    softmax_scale,
    *,
    num_tokens=None,
    dcp_world_size=1,
    dcp_rank=0,
    dcp_interleave=1,
    mask=None,
    k_scale=1.0,
    out=None,
    lse=None,
):
    """One rank's MLA decode; returns (out, lse).

    Row j of a request with Q query tokens and global length T sees global positions
    < T - (Q - 1 - j) (mask "causal", the default) or < T (mask "full"; one mask for all requests
    or one per request). With dcp_world_size W > 1 the cache holds this rank's shard (position p
    on rank (p // dcp_interleave) % W) and the result is the rank-local partial: O and LSE over
    the positions this rank owns (O = 0, LSE = -inf where a row sees none), ready to be merged by
    log-sum-exp with the other ranks' partials.

    num_tokens: query rows including padding (None: no padding, N = query_start_loc[B]).
    out, lse: written in place when given (else allocated; out takes q's dtype).
    """
    out, lse = attention_outputs(q, out, lse)
    _core.mla_decode(
        q,
        kv_cache,
        block_table,
        query_start_loc,
        seq_lens,
        real(softmax_scale, "softmax_scale"),
        optional_index(num_tokens, "num_tokens"),
        index(dcp_world_size, "dcp_world_size"),
        index(dcp_rank, "dcp_rank"),
        index(dcp_interleave, "dcp_interleave"),
        mask,
        real(k_scale, "k_scale"),
        out,
        lse,
    )
    return out, lse


def dcp_step_simulated(
    q,
    kv_caches,
    block_table,
    query_start_loc,
    seq_lens,
    softmax_scale,
    *,
    world,
    combine="ag_rs",
    num_tokens=None,
    dcp_interleave=1,
    mask=None,
    k_scale=1.0,
    out=None,
    lse=None,
):
    """A whole DCP step of `world` ranks, simulated as threads on the CPU; returns (out, lse).

    q: [N, H, 576], all H heads (rank r holds heads [r * H / W, (r + 1) * H / W) and the step
    all-gathers them). kv_caches: `world` caches [num_blocks_r, block_size, 576], rank r's shard
    of every request, all read through the one block_table. Each rank attends its shard for all
    heads, then the partials are merged by log-sum-exp through the `combine`: "ag_rs" (LSE
    all-gather + output reduce-scatter) or "a2a" (one all-to-all). The result equals a
    single-rank decode of the whole cache up to fp32 rounding: out [N, H, 512], lse [N, H].
    """
    out, lse = attention_outputs(q, out, lse)
    _core.dcp_step_simulated(
        q,
        kv_caches,
        block_table,
        query_start_loc,
        seq_lens,
        real(softmax_scale, "softmax_scale"),
        optional_index(num_tokens, "num_tokens"),
        index(world, "world"),
        index(dcp_interleave, "dcp_interleave"),
        mask,
        real(k_scale, "k_scale"),
        string(combine, "combine"),
        out,
        lse,
    )
    return out, lse


def make_plan(
    block_table,
    query_start_loc,
    seq_lens,
    *,
    num_heads,
    block_size,
    num_blocks,
    num_tokens=None,
    dcp_world_size=1,
    dcp_rank=0,
    dcp_interleave=1,
    mask=None,
):
    """The plan mla_decode would run for this rank, as a read-only dcpmla.Plan.

    Plan.row_local_bound [N] int32: the local prefix of the cache each row sees on this rank
    (local_len(rank, the row's global bound); 0 for padding). Plan.request_local_len [B] int32:
    each request's local length. Plan.num_rows, Plan.num_partial_rows (rows of the split-KV
    workspace, which depends on this machine's thread count).
    """
    return _core.make_plan(
        block_table,
        query_start_loc,
        seq_lens,
        index(num_heads, "num_heads"),
        index(block_size, "block_size"),
        index(num_blocks, "num_blocks"),
        optional_index(num_tokens, "num_tokens"),
        index(dcp_world_size, "dcp_world_size"),
        index(dcp_rank, "dcp_rank"),
        index(dcp_interleave, "dcp_interleave"),
        mask,
    )
