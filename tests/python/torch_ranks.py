"""W real processes joined in a gloo process group, for tests of torch.distributed code."""

import os
import socket

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, fn, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
        dist.barrier()  # no rank tears the group down while another is still in a collective
    finally:
        dist.destroy_process_group()


def run_ranks(fn, world, *args):
    """fn(rank, world, *args) in `world` spawned processes of one gloo group; an exception in any
    rank is raised here (torch.multiprocessing.ProcessRaisedException, with its traceback)."""
    mp.spawn(_rank_main, args=(world, free_port(), fn, args), nprocs=world, join=True)
