"""One DCP rank of a serving run: builds the seeded model cut to its heads, its cache pool and
the engine (with a CUDA graph per capture size where graphs are used), warms up, serves every
request, and returns (on every rank) what it produced."""

import time

import torch
import torch.distributed as dist

from dcpmla.serve.attention import (
    CACHE_DTYPES,
    QUERY_DTYPES,
    DcpAttention,
    MLADecodeCpu,
    MLADecodeTorch,
)
from dcpmla.serve.drafter import OracleDrafter
from dcpmla.serve.engine import Engine
from dcpmla.serve.kv_cache import BlockAllocator, allocate_caches, blocks_needed
from dcpmla.serve.model import AbsorbedMLAModel
from dcpmla.serve.model_config import deepseek_v3_config, softmax_scale
from dcpmla.serve.oracle import model_weights, seeded_model
from dcpmla.serve.step_graphs import CudaStepGraph, StepGraphs, cuda_graphs_choice
from dcpmla.serve.warmup import capture_sizes, warm_up
from dcpmla.serve.workload import make_requests


def model_config_of(config):
    return deepseek_v3_config(
        config.variant,
        num_layers=config.num_layers,
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        init_std=config.init_std,
    )


def _check_same_weights(weights, group, world, device):
    """Every rank drew the same weights from the seed (a sum of all of them, compared)."""
    if world == 1:
        return
    on = device if dist.get_backend(group) == "nccl" else torch.device("cpu")
    total = torch.tensor(
        [sum(float(t.double().sum()) for t in weights.values())], dtype=torch.float64, device=on
    )
    everyone = [torch.zeros_like(total) for _ in range(world)]
    dist.all_gather(everyone, total, group=group)
    if any(float(t) != float(total) for t in everyone):
        raise RuntimeError(
            f"weights (rank mismatch): expected the same seeded weights on every rank, got sums "
            f"{[float(t) for t in everyone]}"
        )


def rank_device(config, rank):
    """The rank's device: the CPU, or GPU rank % the GPU count (ranks beyond the GPUs share
    them: simulated ranks)."""
    if config.device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("device (unavailable): expected a CUDA GPU for device=cuda, got none")
    return torch.device("cuda", rank % torch.cuda.device_count())


def make_decode(config, model_config, rank, device, graph_sizes=()):
    """The rank's decode path (config.decode), sized for the engine's limits; graph_sizes: the
    capture sizes of CUDA graphs (the torch path's wrapper per size)."""
    common = dict(
        softmax_scale=softmax_scale(model_config),
        world=config.world,
        rank=rank,
        interleave=config.interleave,
        k_scale=config.k_scale,
    )
    if config.decode == "numpy":
        return MLADecodeCpu(**common)
    # A step's requests: the running ones, or a warm-up batch of 1-token requests.
    # Rows: the token budget, a prompt longer than it (it runs alone; a preempted request's
    # prompt holds its generated tokens too), a warm-up size.
    longest_prompt = config.prompt_len[1] + config.max_new_tokens
    largest = max([config.max_batch_tokens, longest_prompt, *capture_sizes(config)])
    # A request's longest: its prompt, its new tokens and a step's drafts (or a warm-up batch).
    longest = max(config.prompt_len[1] + config.max_new_tokens + config.max_drafts, largest)
    return MLADecodeTorch(
        num_heads=model_config.num_attention_heads,
        block_size=config.block_size,
        num_blocks=config.num_blocks,
        kv_dtype=CACHE_DTYPES[config.kv_dtype],
        device=device,
        max_requests=max(config.max_running, largest),
        max_tokens=largest,
        max_blocks=blocks_needed(longest, config.world, config.block_size, config.interleave),
        graph_sizes=graph_sizes,
        **common,
    )


def build_engine(config, continuations, rank, group, graph_type=None):
    """The rank's Engine for config: seeded weights cut to its heads, caches, decode, drafter.
    graph_type: what captures the step per capture size (CudaStepGraph; None: every step runs
    eagerly)."""
    model_config = model_config_of(config)
    weights = model_weights(seeded_model(model_config, config.seed))
    device = rank_device(config, rank)
    _check_same_weights(weights, group, config.world, device)
    weights = {name: w.to(device) for name, w in weights.items()}
    sizes = capture_sizes(config) if graph_type is not None else []
    decode = make_decode(config, model_config, rank, device, sizes)
    attention = DcpAttention(
        decode,
        q_dtype=QUERY_DTYPES[config.q_dtype],
        k_scale=config.k_scale,
        group=group,
        world=config.world,
        combine=config.combine,
        device=device,
    )
    model = AbsorbedMLAModel(
        model_config, weights, attention, rank=rank, world=config.world, group=group
    )
    caches = allocate_caches(
        config.num_layers,
        config.num_blocks,
        config.block_size,
        CACHE_DTYPES[config.kv_dtype],
        device,
    )
    drafter = OracleDrafter(
        continuations,
        max_drafts=config.max_drafts,
        corruption=config.draft_corruption,
        vocab_size=config.vocab_size,
        seed=config.seed,
    )
    graphs = None
    if graph_type is not None:
        graphs = StepGraphs(
            model,
            attention,
            caches,
            sizes=sizes,
            max_blocks=decode.max_blocks,
            device=device,
            graph_type=graph_type,
        )
    allocator = BlockAllocator(config.num_blocks)
    return Engine(
        model, attention, caches, allocator, drafter, config, rank=rank, group=group, graphs=graphs
    )


def run_rank(config, continuations, rank, group, progress_factory=None):
    """Serves config's workload as rank `rank` of config.world; continuations: request id -> the
    oracle's tokens (the drafter's source). Returns a dict of the run's results."""
    backend = None if group is None else dist.get_backend(group)
    use_graphs, graphs_why = cuda_graphs_choice(config, backend)
    engine = build_engine(config, continuations, rank, group, CudaStepGraph if use_graphs else None)
    device = engine.caches[0].device

    start = time.perf_counter()
    warmup_shapes = warm_up(engine, config.max_drafts)
    warmup_seconds = time.perf_counter() - start

    requests = make_requests(config)
    total_new = sum(r.max_new for r in requests)
    progress = progress_factory(total_new) if progress_factory and rank == 0 else None
    start = time.perf_counter()
    records = engine.serve(requests, progress)
    serve_seconds = time.perf_counter() - start
    if progress is not None:
        progress.close()
    if engine.allocator.num_free != config.num_blocks:
        raise RuntimeError(
            f"blocks (leak): expected all {config.num_blocks} free after serving, got "
            f"{engine.allocator.num_free}"
        )
    replayed = sum(r.replayed for r in records)
    return {
        "generated": {r.id: r.generated for r in requests},
        "prompts": {r.id: r.prompt for r in requests},
        "drafts_proposed": sum(r.drafts_proposed for r in requests),
        "drafts_accepted": sum(r.drafts_accepted for r in requests),
        "preemptions": sum(r.preemptions for r in requests),
        "records": records,
        "warmup_shapes": warmup_shapes,
        "warmup_seconds": warmup_seconds,
        "serve_seconds": serve_seconds,
        "softmax_scale": softmax_scale(model_config_of(config)),
        "cuda_graphs": {
            "used": use_graphs,
            "why": graphs_why,
            "captured": 0 if engine.graphs is None else engine.graphs.captured,
            "capture_sizes": [] if engine.graphs is None else engine.graphs.sizes,
            "replayed_steps": replayed,
            "eager_steps": len(records) - replayed,
        },
        "backend": {
            "decode": type(engine.attention.decode).__name__
            + (
                " (dcpmla.cpu.mla_decode)"
                if config.decode == "numpy"
                else " (BatchMLADecodeWrapper)"
            ),
            "device": str(device)
            + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
            "process_group": backend,
            "torch_threads": torch.get_num_threads(),
        },
    }
