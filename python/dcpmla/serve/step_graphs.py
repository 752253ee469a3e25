"""CUDA graphs of a rank's whole step (embedding, every layer with its cache writes, decode and
collectives, the logits), one per capture size, as an engine captures them at warm-up and replays
them while serving.

A graph replays fixed kernels on fixed addresses, so everything the step reads lives in static
buffers of its capture size n (StaticStepInputs): token ids, positions, cache slots and the block
table. A step padded to n (padding rows: token 0 at position 0, slot -1, so nothing is written)
is copied into them, its batch planned on the host into the size's own schedule
(MLADecodeTorch's graph-mode wrapper; the plan is an asynchronous copy on the stream the graph
replays on), and the graph replays. Request boundaries and lengths need no device buffers: the
host planner reads them, and the decode reads the plan from the schedule.
"""

from dataclasses import dataclass, replace

import torch


def cuda_graphs_choice(config, backend):
    """(used, why): whether a rank of config captures its step in CUDA graphs. backend: the
    ranks' process group backend ("nccl", "gloo"; None at W = 1). Auto (config.cuda_graphs None)
    captures whenever it can; an explicit request that cannot be met is a ValueError naming
    cuda_graphs (config.validate refuses the CPU and an empty list of capture sizes)."""
    if config.cuda_graphs is False:
        return False, "off (--no-cuda-graphs)"
    if config.device != "cuda" or config.decode != "torch":
        return False, "the step runs on the CPU"
    if not (config.capture_sizes or config.max_capture_size):
        return False, "no capture sizes (--max-capture-size, --capture-sizes)"
    if config.world > 1 and backend != "nccl":
        why = (
            f"{config.world} ranks share GPUs over {backend}: their collectives are staged "
            "through host memory, which a graph cannot capture"
        )
        if config.cuda_graphs:
            raise ValueError(
                "cuda_graphs (unavailable): expected a GPU for each of the "
                f"{config.world} ranks (NCCL), got {why}"
            )
        return False, why
    return True, "captured at warm-up, one graph per capture size"


@dataclass
class StaticStepInputs:
    """What a captured step of n rows reads, at fixed addresses; refilled before each replay."""

    token_ids: torch.Tensor  # [n] int64
    positions: torch.Tensor  # [n] int64
    slots: torch.Tensor  # [n] int64, -1: nothing written (padding, another rank's position)
    block_table: torch.Tensor  # [n, max_blocks] int32: n rows hold at most n requests

    @classmethod
    def allocate(cls, num_tokens, max_blocks, device):
        def rows(dtype, *shape):
            return torch.zeros((num_tokens, *shape), dtype=dtype, device=device)

        return cls(
            rows(torch.int64), rows(torch.int64), rows(torch.int64), rows(torch.int32, max_blocks)
        )

    def load(self, batch):
        """Copies batch (a StepBatch of n rows on the host) in; returns it with these tensors in
        place of its token ids, positions, slots and block table."""
        n, max_blocks = self.block_table.shape
        requests, width = batch.block_table.shape
        if batch.num_tokens != n or requests > n or width > max_blocks:
            raise ValueError(
                f"batch (shape mismatch): expected {n} rows, at most {n} requests and "
                f"{max_blocks} blocks a request, got {batch.num_tokens} rows, {requests} "
                f"requests and {width} blocks"
            )
        table = torch.full((n, max_blocks), -1, dtype=torch.int32)
        table[:requests, :width] = batch.block_table
        for static, host in (
            (self.token_ids, batch.token_ids),
            (self.positions, batch.positions),
            (self.slots, batch.slots),
            (self.block_table, table),
        ):
            static.copy_(host)
        return replace(
            batch,
            token_ids=self.token_ids,
            positions=self.positions,
            slots=self.slots,
            block_table=self.block_table,
        )


class CudaStepGraph:
    """forward() captured once into a torch.cuda.CUDAGraph (memory from `pool`, shared by a
    rank's graphs: they never run at once); replay() reruns its kernels and returns the same
    output tensor, rewritten."""

    def __init__(self, forward, pool=None):
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.output = forward()
        self.pool = self.graph.pool()

    def replay(self):
        self.graph.replay()
        return self.output


class StepGraphs:
    """A rank's step graphs, one per capture size (sizes), of model.forward over the static
    inputs, with attention (a DcpAttention over an MLADecodeTorch holding a wrapper per size).
    graph_type: what captures a forward (CudaStepGraph; tests on the CPU pass a stand-in with
    its calls)."""

    def __init__(
        self, model, attention, caches, *, sizes, max_blocks, device, graph_type=CudaStepGraph
    ):
        self.model, self.attention, self.caches = model, attention, caches
        self.sizes = sorted(sizes)
        self.max_blocks, self.device, self.graph_type = max_blocks, device, graph_type
        self._captured = {}  # size -> (StaticStepInputs, graph)
        self._pool = None

    @property
    def captured(self):
        return len(self._captured)

    def covers(self, num_tokens):
        return num_tokens in self.sizes

    def run(self, batch):
        """(logits [n, vocab], replayed) of batch, a StepBatch on the host whose num_tokens n is a
        capture size: replayed from n's graph, or, the first time (warm-up), run eagerly from the
        static inputs and then captured."""
        n = batch.num_tokens
        if n not in self._captured:
            return self._capture(batch), False
        inputs, graph = self._captured[n]
        self.attention.plan(inputs.load(batch))
        return graph.replay(), True

    def _capture(self, batch):
        inputs = StaticStepInputs.allocate(batch.num_tokens, self.max_blocks, self.device)
        static = inputs.load(batch)
        self.attention.plan(static)

        def forward():
            return self.model.forward(static.token_ids, static.positions, self.caches)

        # The eager run first: lazy set-up (library handles, the rope table's move to the GPU)
        # must not happen during capture, which records kernels without running them.
        logits = forward()
        with self.attention.timer.paused():
            graph = self.graph_type(forward, self._pool)
        self._pool = graph.pool
        self._captured[batch.num_tokens] = (inputs, graph)
        return logits
