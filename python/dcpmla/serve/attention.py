"""Decode attention of one DCP rank behind one small interface, so that the backend is a small
swap: the engine plans a step once (its ragged batch) and every layer runs it.

- MLADecodeCpu: plan(query_start_loc, seq_lens) / run(q, kv_cache, block_table) -> (out, lse),
  dcpmla.cpu.mla_decode on torch CPU tensors (zero-copy through DLPack): the rank-local partial
  over the positions this rank owns.
- MLADecodeTorch: the same two calls through dcpmla.BatchMLADecodeWrapper (the torch ops) on the
  cache's device, CPU or CUDA; the batch is planned on the host. With capture sizes it holds a
  wrapper in graph mode per size (a captured decode reads its own schedule).
- DcpAttention: a layer's whole step: gather the query over heads, write this step's cache entries
  at the rank's slots, decode, and combine the ranks' partials (dcpmla.dcp_combine).

Each decode also writes the cache (write): MLADecodeCpu in torch, MLADecodeTorch with the
library's write_kv_, one kernel that skips slot -1 without a data-dependent shape, so that a CUDA
graph can capture it.
"""

import time
from collections import defaultdict
from contextlib import contextmanager

import torch

import dcpmla
from dcpmla.serve import collectives

# The cache dtypes by name; fp8 caches store e4m3(x / k_scale).
CACHE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
QUERY_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class StepTimer:
    """Seconds spent per category ("attention", "combine") within the current step. On a GPU
    each mark waits for the device (the split costs the overlap of host and device work)."""

    def __init__(self, device=None):
        self.seconds = defaultdict(float)
        self._started = {}
        self._sync = (
            torch.cuda.synchronize if device is not None and device.type == "cuda" else None
        )
        self._paused = False

    @contextmanager
    def paused(self):
        """No marks within (a stream being captured into a CUDA graph must not be waited for)."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def _now(self):
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    def start(self, category):
        if not self._paused:
            self._started[category] = self._now()

    def stop(self, category):
        if not self._paused:
            self.seconds[category] += self._now() - self._started.pop(category)

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

    def write(self, cache, slots, entries):
        write_cache(cache, slots, entries, self.k_scale)

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


class MLADecodeTorch:
    """dcpmla's decode of one DCP rank through BatchMLADecodeWrapper on `device`, sized once for
    the engine's limits (requests, rows a step, blocks a request); same calls as MLADecodeCpu.
    The schedule's block table has max_blocks columns: a step's narrower table is padded.

    graph_sizes: the capture sizes of the rank's CUDA graphs. Each gets a wrapper of its own with
    use_cuda_graph=True and limits of its size (n rows hold at most n requests): a captured
    decode is launched for its schedule's capacity and reads the plan from that schedule, so a
    step of a capture size is planned into its size's schedule, then its graph replays. Other
    steps (larger than every size) use the eager wrapper. All wrappers share one workspace: their
    decodes run one after another on one stream."""

    def __init__(
        self,
        *,
        softmax_scale,
        num_heads,
        block_size,
        num_blocks,
        kv_dtype,
        device,
        max_requests,
        max_tokens,
        max_blocks,
        world=1,
        rank=0,
        interleave=1,
        k_scale=1.0,
        graph_sizes=(),
    ):
        # Here, not at the top: the numpy path runs without the torch extension.
        from dcpmla.attention_ops import write_kv_  # also registers torch.ops.dcpmla

        self._write_kv = write_kv_
        self.softmax_scale, self.k_scale = softmax_scale, k_scale
        self.max_blocks = max_blocks
        self._table_source = self._table = None
        config = [num_heads, block_size, num_blocks, world, rank, interleave]
        # (requests, rows) of the eager wrapper (None) and of each capture size's
        limits = {None: (max_requests, max_tokens), **{n: (n, n) for n in graph_sizes}}
        device_index = -1 if device.type == "cpu" else device.index
        workspace_bytes = max(
            torch.ops.dcpmla.schedule_sizes(device_index, config, [r, t, max_blocks])[1]
            for r, t in limits.values()
        )
        self.workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device=device)
        self._wrappers = {
            size: dcpmla.BatchMLADecodeWrapper(
                self.workspace,
                num_heads,
                block_size,
                kv_dtype,
                world,
                rank,
                interleave,
                use_cuda_graph=size is not None,
                num_blocks=num_blocks,
                max_num_reqs=requests,
                max_num_tokens=rows,
                max_blocks_per_req=max_blocks,
            )
            for size, (requests, rows) in limits.items()
        }
        self.wrapper = self._wrappers[None]  # the wrapper of the step planned last

    @property
    def graph_sizes(self):
        return sorted(size for size in self._wrappers if size is not None)

    def wrapper_for(self, num_tokens):
        """The wrapper a step of num_tokens rows runs: its capture size's, or the eager one."""
        return self._wrappers.get(num_tokens, self._wrappers[None])

    def plan(self, query_start_loc, seq_lens, *, num_tokens=None, mask=None):
        self.wrapper = self.wrapper_for(num_tokens)
        self.wrapper.plan(
            query_start_loc, seq_lens, num_tokens, mask, softmax_scale=self.softmax_scale
        )

    def run(self, q, kv_cache, block_table):
        # Every layer of a step passes the step's table: padded once, on its first layer.
        if block_table is not self._table_source:
            missing = self.max_blocks - block_table.shape[1]
            self._table_source, self._table = block_table, block_table
            if missing > 0:  # columns past a request's blocks are never read
                self._table = torch.nn.functional.pad(block_table, (0, missing), value=-1)
        return self.wrapper.run(q, kv_cache, self._table, k_scale=self.k_scale)

    def write(self, cache, slots, entries):
        self._write_kv(entries, slots, cache, self.k_scale)


class DcpAttention:
    """A layer's attention on one rank: __call__(q_local [N, Hl, 576], entries [N, 576], cache)
    -> out [N, Hl, 512] (the rank's heads of the whole attention), for the step last planned."""

    def __init__(
        self, decode, *, q_dtype, k_scale=1.0, group=None, world=1, combine="ag_rs", device=None
    ):
        self.decode, self.q_dtype, self.k_scale = decode, q_dtype, k_scale
        self.group, self.world, self.combine = group, world, combine
        self.timer = StepTimer(device)
        self._slots = self._block_table = None

    def plan(self, batch):
        """batch: a serve.batch.StepBatch of this rank (its slots, block table, attention view)."""
        self._slots, self._block_table = batch.slots, batch.block_table
        self.decode.plan(
            batch.attn_query_start_loc, batch.seq_lens, num_tokens=batch.num_tokens, mask=batch.mask
        )

    def __call__(self, q_local, entries, cache):
        self.decode.write(cache, self._slots, entries)
        q = q_local.to(self.q_dtype).contiguous()
        if self.world > 1:
            self.timer.start("combine")
            q = collectives.gather_heads(q, self.group)
            self.timer.stop("combine")
        self.timer.start("attention")
        out, lse = self.decode.run(q, cache, self._block_table)
        self.timer.stop("attention")
        if self.world == 1:
            return out
        self.timer.start("combine")
        out = collectives.combine(out, lse, self.group, self.combine)
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
