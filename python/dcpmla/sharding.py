"""Where a request's tokens live under DCP, with the formulas serving engines use (vLLM's
get_dcp_local_seq_lens and its DCP slot mapping) and the library's per-row bounds (SPEC 2-3).

Position p of a request lives on rank (p // interleave) % world at local index
(p // (world * interleave)) * interleave + p % interleave; local index i is at block
block_table[b][i // block_size], offset i % block_size. Every function is computed by the library.
"""

from dcpmla import _core
from dcpmla._scalars import index, optional_index


def dcp_local_seq_lens(seq_lens, world, rank=None, interleave=1):
    """Tokens of each request held by `rank`: [B] (seq_lens' dtype), or [B, world] for every
    rank when rank is None. They sum over the ranks to seq_lens."""
    return _core.local_seq_lens(
        seq_lens,
        index(world, "world"),
        optional_index(rank, "rank"),
        index(interleave, "interleave"),
    )


def slot_mapping(block_table, req_indices, positions, block_size, *, world=1, rank=0, interleave=1):
    """Cache slots [n] int64 of tokens (req_indices[i], positions[i]) on `rank`: -1 where another
    rank owns the position, or where req_indices[i] is -1 (a padding row)."""
    return _core.slot_mapping(
        block_table,
        req_indices,
        positions,
        index(block_size, "block_size"),
        index(world, "world"),
        index(rank, "rank"),
        index(interleave, "interleave"),
    )


def step_positions(query_start_loc, seq_lens, *, num_tokens=None):
    """(req_indices [N] int32, positions [N] int64) of a decode step's query rows: row j of
    request b is at global position seq_lens[b] - Q_b + j; padding rows are (-1, -1)."""
    request, position, _, _ = _core.rows(
        query_start_loc, seq_lens, optional_index(num_tokens, "num_tokens"), None, 1, 0, 1
    )
    return request, position


def row_bounds(
    query_start_loc, seq_lens, *, num_tokens=None, mask=None, world=1, rank=0, interleave=1
):
    """(global_bound [N] int64, local_bound [N] int64) of a decode step's query rows.

    Row j of a request with Q tokens and length T sees global positions < T - (Q - 1 - j)
    (causal) or < T (mask "full"); on `rank` that is the local prefix local_len(rank, bound),
    never local_len(rank, T) - (Q - 1 - j). Padding rows have both bounds 0.
    """
    _, _, global_bound, local_bound = _core.rows(
        query_start_loc,
        seq_lens,
        optional_index(num_tokens, "num_tokens"),
        mask,
        index(world, "world"),
        index(rank, "rank"),
        index(interleave, "interleave"),
    )
    return global_bound, local_bound
