"""A serving run end to end: the oracle's continuations (in this process), then the ranks, one
process each over torch.distributed (NCCL when every rank has a GPU of its own; gloo on the CPU
and for ranks simulated on shared GPUs, their collectives staged through the host), with W = 1 in
this process; then the report of rank 0's results against the oracle."""

import os
import pickle
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dcpmla.serve.agreement import compare_with_oracle
from dcpmla.serve.oracle import greedy_continuation, seeded_model
from dcpmla.serve.rank_main import model_config_of, run_rank
from dcpmla.serve.report import build_report
from dcpmla.serve.step_graphs import cuda_graphs_choice
from dcpmla.serve.workload import make_requests


def collective_backend(config):
    """The ranks' process group backend: None at W = 1; NCCL when every rank has a GPU of its
    own; gloo on the CPU and for ranks simulated on shared GPUs."""
    if config.world == 1:
        return None
    if config.device == "cuda" and torch.cuda.device_count() >= config.world:
        return "nccl"
    return "gloo"


def _progress_factory(show):
    if not show:
        return None

    def factory(total):
        from tqdm import tqdm

        return tqdm(total=total, desc="serving", unit="tok", leave=False)

    return factory


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_process(rank, config, continuations, port, result_path):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    # The ranks share this machine's cores: torch's threads split among them.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // config.world))
    backend = collective_backend(config)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=config.world)
    try:
        result = run_rank(
            config, continuations, rank, dist.group.WORLD, _progress_factory(config.show_progress)
        )
        dist.barrier()  # no rank tears the group down while another is still in a collective
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(result_path, "wb") as f:
            pickle.dump(result, f)


def oracle_continuations(config):
    """request id -> OracleContinuation of the run's workload."""
    model = seeded_model(model_config_of(config), config.seed)
    return {r.id: greedy_continuation(model, r.prompt, r.max_new) for r in make_requests(config)}


def serve(config, oracle=None):
    """Runs config (a ServeConfig) and returns its report (a dict; report.write_report saves
    it). oracle: the continuations when already computed for this model and workload."""
    config.validate()
    cuda_graphs_choice(config, collective_backend(config))  # an impossible request fails here
    oracle = oracle if oracle is not None else oracle_continuations(config)
    continuations = {i: o.tokens for i, o in oracle.items()}
    if config.world == 1:
        result = run_rank(config, continuations, 0, None, _progress_factory(config.show_progress))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rank0.pickle")
            mp.spawn(
                _rank_process,
                args=(config, continuations, _free_port(), path),
                nprocs=config.world,
                join=True,
            )
            with open(path, "rb") as f:
                result = pickle.load(f)
    agreement = compare_with_oracle(result["generated"], oracle, config.margin_delta)
    return build_report(config, result, agreement, oracle)
