"""What a serving run is: the model, the DCP world, speculative decoding, the workload, the
engine's limits, the dtypes, the negative controls and where the report goes."""

import math
from dataclasses import asdict, dataclass

from dcpmla.serve.attention import CACHE_DTYPES, QUERY_DTYPES
from dcpmla.serve.kv_cache import blocks_needed
from dcpmla.serve.model_config import VARIANT_HEADS

COMBINES = ("ag_rs", "a2a")
# Where the model runs, and which dcpmla path decodes: "numpy" (dcpmla.cpu.mla_decode on CPU
# tensors) or "torch" (BatchMLADecodeWrapper and the torch ops: CPU or CUDA).
DEVICES = ("cpu", "cuda")
DECODES = ("numpy", "torch")


@dataclass
class ServeConfig:
    # model (seeded random weights, shared with the oracle)
    variant: str = "deepseek-v3"  # "deepseek-v3" (16 heads) or "kimi" (96 heads)
    num_layers: int = 2
    hidden_size: int = 256
    vocab_size: int = 512
    init_std: float = 0.05
    seed: int = 0
    # decode context parallelism: one process per rank
    world: int = 1
    combine: str = "ag_rs"
    interleave: int = 1  # position p on rank (p // interleave) % world
    # speculative decoding: k in 0..max_drafts drafts a request and step
    max_drafts: int = 3
    draft_corruption: float = 0.2  # probability that a drafted token is replaced
    # workload: requests arrive one every arrival_gap steps
    num_requests: int = 6
    prompt_len: tuple = (8, 40)  # inclusive range
    max_new_tokens: int = 24
    arrival_gap: int = 1
    # engine
    block_size: int = 16
    num_blocks: int = 128
    max_running: int = 8
    max_batch_tokens: int = 128
    max_capture_size: int = 0  # warm-up: dummy batches of 1..max tokens (0: none)
    capture_sizes: tuple = ()  # instead of 1..max: batches are padded up to the next of them
    device: str = "cpu"  # "cuda": rank r on GPU r % the GPU count (more ranks: simulated)
    decode: str = "numpy"  # "torch" on a GPU
    # CUDA graphs of the step, one per capture size: None (auto: on a GPU with the torch decode
    # at W = 1 or with a GPU a rank; off for ranks simulated on shared GPUs), True or False
    cuda_graphs: object = None
    q_dtype: str = "fp32"
    kv_dtype: str = "fp32"
    k_scale: float = 1.0
    # negative controls: must change tokens
    control_full_mask: bool = False  # every row bounded at T (drafts see their future)
    control_uniform_view: bool = False  # a ragged batch that divides evenly read as uniform
    # agreement with the oracle: disagreements where its margin exceeds this fail the run
    margin_delta: float = 0.01
    show_progress: bool = True

    def to_dict(self):
        return asdict(self)

    def validate(self):
        """Raises ValueError naming the first bad field (expected and found). Each check runs only
        once the ones before it passed (the world divides the heads once it is >= 1), and so is
        its message."""
        heads = VARIANT_HEADS.get(self.variant)
        checks = [
            ("variant", lambda: self.variant in VARIANT_HEADS, " or ".join(VARIANT_HEADS)),
            ("combine", lambda: self.combine in COMBINES, " or ".join(COMBINES)),
            ("device", lambda: self.device in DEVICES, " or ".join(DEVICES)),
            ("decode", lambda: self.decode in DECODES, " or ".join(DECODES)),
            (
                "decode",
                lambda: self.device == "cpu" or self.decode == "torch",
                "torch on a GPU (the numpy path runs on the CPU)",
            ),
            (
                "cuda_graphs",
                lambda: self.cuda_graphs in (None, True, False),
                "None (auto), True or False",
            ),
            (
                "cuda_graphs",
                lambda: (
                    self.cuda_graphs is not True or (self.device, self.decode) == ("cuda", "torch")
                ),
                f"auto or off with device {self.device!r} and decode {self.decode!r} (graphs "
                "capture the torch decode on a GPU: device 'cuda', decode 'torch')",
            ),
            (
                "cuda_graphs",
                lambda: self.cuda_graphs is not True or self.max_capture_size or self.capture_sizes,
                "auto or off without capture sizes (set max_capture_size or capture_sizes)",
            ),
            ("q_dtype", lambda: self.q_dtype in QUERY_DTYPES, " or ".join(QUERY_DTYPES)),
            ("kv_dtype", lambda: self.kv_dtype in CACHE_DTYPES, " or ".join(CACHE_DTYPES)),
            ("num_layers", lambda: self.num_layers >= 1, ">= 1"),
            ("hidden_size", lambda: self.hidden_size >= 1, ">= 1"),
            # Two tokens at least: the oracle's margin is between the top two logits.
            ("vocab_size", lambda: self.vocab_size >= 2, ">= 2"),
            ("init_std", lambda: 0 <= self.init_std < math.inf, "finite and >= 0"),
            ("seed", lambda: self.seed >= 0, ">= 0"),
            ("world", lambda: self.world >= 1, ">= 1"),
            ("world", lambda: heads % self.world == 0, f"a divisor of the {heads} heads"),
            ("max_drafts", lambda: self.max_drafts >= 0, ">= 0"),
            ("draft_corruption", lambda: 0.0 <= self.draft_corruption <= 1.0, "in [0, 1]"),
            ("num_requests", lambda: self.num_requests >= 1, ">= 1"),
            (
                "prompt_len",
                lambda: len(self.prompt_len) == 2 and 1 <= self.prompt_len[0] <= self.prompt_len[1],
                "(min, max) with 1 <= min <= max",
            ),
            ("max_new_tokens", lambda: self.max_new_tokens >= 1, ">= 1"),
            ("arrival_gap", lambda: self.arrival_gap >= 0, ">= 0"),
            ("block_size", lambda: self.block_size >= 1, ">= 1"),
            (
                "interleave",
                lambda: self.interleave >= 1 and self.block_size % self.interleave == 0,
                f"a divisor of block_size {self.block_size}",
            ),
            ("capture_sizes", lambda: all(s >= 1 for s in self.capture_sizes), "sizes >= 1"),
            ("num_blocks", lambda: self.num_blocks >= 1, ">= 1"),
            ("max_running", lambda: self.max_running >= 1, ">= 1"),
            (
                "max_batch_tokens",
                lambda: self.max_batch_tokens >= 1 + self.max_drafts,
                ">= 1 + max_drafts",
            ),
            ("max_capture_size", lambda: self.max_capture_size >= 0, ">= 0"),
            (
                "num_blocks",
                lambda: self._longest_request_blocks() <= self.num_blocks,
                lambda: (
                    "the blocks of the longest request on rank 0 (prompt_len max + "
                    f"max_new_tokens + max_drafts tokens: {self._longest_request_blocks()} blocks)"
                ),
            ),
            (
                "num_blocks",
                lambda: self._warmup_blocks() <= self.num_blocks,
                lambda: (
                    "the blocks of the largest warm-up batch (max_capture_size / "
                    f"capture_sizes: {self._warmup_blocks()} blocks)"
                ),
            ),
            ("k_scale", lambda: 0 < self.k_scale < math.inf, "finite and > 0"),
            (
                "k_scale",
                lambda: self.kv_dtype == "fp8" or self.k_scale == 1,
                f"1 with kv_dtype {self.kv_dtype!r} (it scales fp8 caches only)",
            ),
            ("margin_delta", lambda: self.margin_delta >= 0, ">= 0"),
        ]
        for name, ok, expected in checks:
            if not ok():
                expected = expected() if callable(expected) else expected
                raise ValueError(
                    f"{name} (invalid value): expected {expected}, got {getattr(self, name)!r}"
                )
        return self

    def _blocks(self, total_len):
        return blocks_needed(total_len, self.world, self.block_size, self.interleave)

    def _longest_request_blocks(self):
        return self._blocks(self.prompt_len[1] + self.max_new_tokens + self.max_drafts)

    def _warmup_blocks(self):
        from dcpmla.serve.warmup import capture_sizes, warmup_q_lens

        sizes = capture_sizes(self)
        if not sizes:
            return 0
        return sum(self._blocks(q) for q in warmup_q_lens(max(sizes), self.max_drafts))
