"""Decode attention of one DCP rank behind one small interface, so that the backend is a small
swap: the engine plans a step once (its ragged batch) and every layer runs it.

- MLADecodeCpu: plan(query_start_loc, seq_lens) / run(q, kv_cache, block_table) -> (out, lse),
  dcpmla.cpu.mla_decode on torch CPU tensors (zero-copy through DLPack): the rank-local partial
  over the positions this rank owns. The GPU's BatchMLADecodeWrapper has the same two calls.
- DcpAttention: a layer's whole step: gather the query over heads, write this step's cache entries
  at the rank's slots, decode, and combine the ranks' partials (dcpmla.dcp_combine).
"""

import time
from collections import defaultdict

import torch

import dcpmla
from dcpmla.distributed import dcp_combine, dcp_gather_heads

# The cache dtypes by name; fp8 caches store e4m3(x / k_scale).
CACHE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
QUERY_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class StepTimer:
    """Seconds spent per category ("attention", "combine") within the current step."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self._started = {}

    def start(self, category):
        self._started[category] = time.perf_counter()

    def stop(self, category):
        self.seconds[category] += time.perf_counter() - self._started.pop(category)

    def take(self):
        """The step's totals, and a fresh start for the next step."""
        seconds, self.seconds = dict(self.seconds), defaultdict(float)
        return seconds


class MLADecodeCpu:
    """dcpmla's CPU decode of one DCP rank, with a plan / run split.

    plan(query_start_loc [B + 1] int32, seq_lens [B] int32 global lengths incl. the step's tokens,
    num_tokens rows incl. padding, mask None / "full"); run(q [N, H, 576], kv_cache [num_blocks,
    block_size, 576], block_table [B, max_blocks] int32) -> (out [N, H, 512] q's dtype,
    lse [N, H] float32): this rank's partial over the positions it owns.
    """

    def __init__(self, *, softmax_scale, world=1, rank=0, interleave=1, k_scale=1.0):
        self.softmax_scale, self.k_scale = softmax_scale, k_scale
        self.world, self.rank, self.interleave = world, rank, interleave
        self._batch = None

    def plan(self, query_start_loc, seq_lens, *, num_tokens=None, mask=None):
        self._batch = (query_start_loc, seq_lens, num_tokens, mask)

    def run(self, q, kv_cache, block_table):
        if self._batch is None:
            raise RuntimeError("MLADecodeCpu.run (missing plan): expected plan() first, got none")
        query_start_loc, seq_lens, num_tokens, mask = self._batch
        n, heads, _ = q.shape
        out = torch.empty((n, heads, dcpmla.LATENT_DIM), dtype=q.dtype)
        lse = torch.empty((n, heads), dtype=torch.float32)
        dcpmla.cpu.mla_decode(
            q,
            kv_cache,
            block_table,
            query_start_loc,
            seq_lens,
            self.softmax_scale,
            num_tokens=num_tokens,
            dcp_world_size=self.world,
            dcp_rank=self.rank,
            dcp_interleave=self.interleave,
            mask=mask,
            k_scale=self.k_scale,
            out=out,
            lse=lse,
        )
        return out, lse


class DcpAttention:
    """A layer's attention on one rank: __call__(q_local [N, Hl, 576], entries [N, 576], cache)
    -> out [N, Hl, 512] (the rank's heads of the whole attention), for the step last planned."""

    def __init__(self, decode, *, q_dtype, k_scale=1.0, group=None, world=1, combine="ag_rs"):
        self.decode, self.q_dtype, self.k_scale = decode, q_dtype, k_scale
        self.group, self.world, self.combine = group, world, combine
        self.timer = StepTimer()
        self._slots = self._block_table = None

    def plan(self, batch):
        """batch: a serve.batch.StepBatch of this rank (its slots, block table, attention view)."""
        self._slots, self._block_table = batch.slots, batch.block_table
        self.decode.plan(
            batch.attn_query_start_loc, batch.seq_lens, num_tokens=batch.num_tokens, mask=batch.mask
        )

    def __call__(self, q_local, entries, cache):
        write_cache(cache, self._slots, entries, self.k_scale)
        q = q_local.to(self.q_dtype).contiguous()
        if self.world > 1:
            self.timer.start("combine")
            q = dcp_gather_heads(q, self.group)
            self.timer.stop("combine")
        self.timer.start("attention")
        out, lse = self.decode.run(q, cache, self._block_table)
        self.timer.stop("attention")
        if self.world == 1:
            return out
        self.timer.start("combine")
        out = dcp_combine(out, lse, self.group, self.combine)
        self.timer.stop("combine")
        return out


def write_cache(cache, slots, entries, k_scale=1.0):
    """Writes entries [N, 576] at slots [N] int64 of cache [num_blocks, block_size, 576] (slot -1:
    a position another rank owns, or a padding row: nothing written); an fp8 cache stores
    e4m3(x / k_scale)."""
    mine = slots >= 0
    values = entries[mine]
    if cache.dtype == torch.float8_e4m3fn:
        values = values.float() / k_scale
    cache.view(-1, cache.shape[-1])[slots[mine]] = values.to(cache.dtype)
