"""A decode step's ragged batch as one rank sees it: the tokens, request boundaries, global
lengths, block table and this rank's cache slots (dcpmla.step_positions, dcpmla.slot_mapping),
and the view the attention gets, which the negative controls falsify on purpose."""

from dataclasses import dataclass, replace

import numpy as np
import torch

import dcpmla


@dataclass
class StepBatch:
    token_ids: torch.Tensor  # [N] int64
    positions: torch.Tensor  # [N] int64, global: row j of a request at T - Q + j
    query_start_loc: torch.Tensor  # [B + 1] int32, the true request boundaries
    attn_query_start_loc: torch.Tensor  # [B + 1] int32, the boundaries attention is given
    seq_lens: torch.Tensor  # [B] int32, global lengths incl. this step's tokens
    block_table: torch.Tensor  # [B, max_blocks] int32, -1 past a request's blocks
    slots: torch.Tensor  # [N] int64, this rank's cache slots (-1: another rank's position)
    num_tokens: int
    mask: object = None  # None (causal), or per request "causal" / "full" (the negative control)
    viewed_uniform: bool = False  # the ragged batch was handed to attention as uniform

    def to(self, device):
        """The batch with the tensors the model and the cache writes read on `device`; request
        boundaries and lengths stay on the host, where the planner reads them."""
        return replace(
            self,
            token_ids=self.token_ids.to(device),
            positions=self.positions.to(device),
            block_table=self.block_table.to(device),
            slots=self.slots.to(device),
        )

    @property
    def q_lens(self):
        return (self.query_start_loc[1:] - self.query_start_loc[:-1]).tolist()


def uniform_view(q_lens, seq_lens):
    """The query_start_loc of the bug this harness must catch: a ragged batch whose token count
    divides by its request count read as uniform (8 + 2 as 5 + 5); None when the batch is uniform,
    does not divide, or the false view would put more rows in a request than its length."""
    n, b = sum(q_lens), len(q_lens)
    if b < 2 or n % b != 0 or n == b * max(q_lens) or min(seq_lens) < n // b:
        return None
    return np.arange(b + 1, dtype=np.int32) * (n // b)


def build_step_batch(
    requests,
    *,
    block_size,
    world=1,
    rank=0,
    interleave=1,
    num_tokens=None,
    full_mask=None,
    view_uniform=False,
):
    """requests: (token_ids, total_len, block_ids) per request, in batch order: the step's query
    tokens (the last accepted token and the drafts, or a prompt), the global length T including
    them, and the request's blocks (enough for T on every rank). num_tokens: rows incl. padding
    (a CUDA-graph size; padding rows: token 0 at position 0, slot -1, O = 0 and LSE = -inf).
    full_mask: None, or per request whether all its rows are bounded at T (the negative control:
    drafts see their future)."""
    q_lens = [len(tokens) for tokens, _, _ in requests]
    seq_lens = np.array([total for _, total, _ in requests], np.int32)
    query_start_loc = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    width = max(1, max(len(blocks) for _, _, blocks in requests))
    block_table = np.full((len(requests), width), -1, np.int32)
    for b, (_, _, blocks) in enumerate(requests):
        block_table[b, : len(blocks)] = blocks
    num_tokens = int(query_start_loc[-1]) if num_tokens is None else num_tokens
    request_of, positions = dcpmla.step_positions(query_start_loc, seq_lens, num_tokens=num_tokens)
    slots = dcpmla.slot_mapping(
        block_table,
        request_of,
        positions,
        block_size,
        world=world,
        rank=rank,
        interleave=interleave,
    )
    attn_query_start_loc = uniform_view(q_lens, seq_lens.tolist()) if view_uniform else None
    token_ids = [t for tokens, _, _ in requests for t in tokens]
    token_ids += [0] * (num_tokens - len(token_ids))
    return StepBatch(
        token_ids=torch.tensor(token_ids, dtype=torch.int64),
        positions=torch.from_numpy(np.maximum(np.asarray(positions, np.int64), 0)),
        query_start_loc=torch.from_numpy(query_start_loc),
        attn_query_start_loc=torch.from_numpy(
            query_start_loc if attn_query_start_loc is None else attn_query_start_loc
        ),
        seq_lens=torch.from_numpy(seq_lens),
        block_table=torch.from_numpy(block_table),
        slots=torch.from_numpy(np.asarray(slots, np.int64)),
        num_tokens=num_tokens,
        mask=None if full_mask is None else ["full" if f else "causal" for f in full_mask],
        viewed_uniform=attn_query_start_loc is not None,
    )
