"""What a serving run is: the model, the DCP world, speculative decoding, the workload, the
engine's limits, the dtypes, the negative controls and where the report goes."""

from dataclasses import asdict, dataclass

from dcpmla.serve.attention import CACHE_DTYPES, QUERY_DTYPES
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
        """Raises ValueError naming the first bad field (expected and found)."""
        checks = [
            ("variant", self.variant in VARIANT_HEADS, " or ".join(VARIANT_HEADS)),
            ("combine", self.combine in COMBINES, " or ".join(COMBINES)),
            ("device", self.device in DEVICES, " or ".join(DEVICES)),
            ("decode", self.decode in DECODES, " or ".join(DECODES)),
            (
                "decode",
                self.device == "cpu" or self.decode == "torch",
                "torch on a GPU (the numpy path runs on the CPU)",
            ),
            ("cuda_graphs", self.cuda_graphs in (None, True, False), "None (auto), True or False"),
            (
                "cuda_graphs",
                self.cuda_graphs is not True or (self.device, self.decode) == ("cuda", "torch"),
                f"auto or off with device {self.device!r} and decode {self.decode!r} (graphs "
                "capture the torch decode on a GPU: device 'cuda', decode 'torch')",
            ),
            (
                "cuda_graphs",
                self.cuda_graphs is not True or self.max_capture_size or self.capture_sizes,
                "auto or off without capture sizes (set max_capture_size or capture_sizes)",
            ),
            ("q_dtype", self.q_dtype in QUERY_DTYPES, " or ".join(QUERY_DTYPES)),
            ("kv_dtype", self.kv_dtype in CACHE_DTYPES, " or ".join(CACHE_DTYPES)),
            ("num_layers", self.num_layers >= 1, ">= 1"),
            ("world", self.world >= 1, ">= 1"),
            (
                "world",
                VARIANT_HEADS.get(self.variant, 1) % self.world == 0,
                f"a divisor of the {VARIANT_HEADS.get(self.variant)} heads",
            ),
            ("max_drafts", self.max_drafts >= 0, ">= 0"),
            ("draft_corruption", 0.0 <= self.draft_corruption <= 1.0, "in [0, 1]"),
            ("num_requests", self.num_requests >= 1, ">= 1"),
            (
                "prompt_len",
                len(self.prompt_len) == 2 and 1 <= self.prompt_len[0] <= self.prompt_len[1],
                "(min, max) with 1 <= min <= max",
            ),
            ("max_new_tokens", self.max_new_tokens >= 1, ">= 1"),
            ("arrival_gap", self.arrival_gap >= 0, ">= 0"),
            ("block_size", self.block_size >= 1, ">= 1"),
            (
                "interleave",
                self.interleave >= 1 and self.block_size % self.interleave == 0,
                f"a divisor of block_size {self.block_size}",
            ),
            ("capture_sizes", all(s >= 1 for s in self.capture_sizes), "sizes >= 1"),
            ("num_blocks", self.num_blocks >= 1, ">= 1"),
            ("max_running", self.max_running >= 1, ">= 1"),
            ("max_batch_tokens", self.max_batch_tokens >= 1 + self.max_drafts, ">= 1 + max_drafts"),
            ("max_capture_size", self.max_capture_size >= 0, ">= 0"),
            ("k_scale", self.k_scale > 0, "> 0"),
            ("margin_delta", self.margin_delta >= 0, ">= 0"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(
                    f"{name} (invalid value): expected {expected}, got {getattr(self, name)!r}"
                )
        return self
