"""The numpy scenarios of tests/python as torch tensors, and wrappers planned for them."""

import ml_dtypes
import numpy as np
import torch

import dcpmla

from scenarios import DTYPES, make_scenario

TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}


def torch_dtype(numpy_dtype):
    """The torch dtype of a scenario's numpy dtype."""
    for name, dtype in DTYPES.items():
        if np.dtype(numpy_dtype) == np.dtype(dtype):
            return TORCH_DTYPES[name]
    raise KeyError(numpy_dtype)


def to_torch(array, device="cpu"):
    """A numpy array (float32, ml_dtypes bfloat16 / float8_e4m3fn, int) as a torch tensor."""
    array = np.ascontiguousarray(array)
    if array.dtype == ml_dtypes.bfloat16:
        tensor = torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    elif array.dtype == ml_dtypes.float8_e4m3fn:
        tensor = torch.from_numpy(array.view(np.uint8)).view(torch.float8_e4m3fn)
    else:
        tensor = torch.from_numpy(array)
    return tensor.to(device)


def to_numpy(tensor):
    """A torch tensor's values as float64 numpy (outputs for the reference checks)."""
    return tensor.detach().cpu().to(torch.float64).numpy()


def workspace(device="cpu", mib=64):
    return torch.empty(mib << 20, dtype=torch.uint8, device=device)


def wrapper_for(sc, rank=0, device="cpu", **limits):
    """A wrapper for rank `rank` of the scenario's caches, with a workspace for its limits (or,
    without limits, one that holds the split-KV partials of the plans these tests make)."""
    cache = sc.caches[rank]
    config = [sc.q.shape[1], cache.shape[1], cache.shape[0], sc.world, rank, sc.interleave]
    if limits:
        index = -1 if device == "cpu" else torch.device(device).index or 0
        names = ("max_num_reqs", "max_num_tokens", "max_blocks_per_req")
        need = torch.ops.dcpmla.schedule_sizes(index, config, [limits[n] for n in names])[1]
        space = torch.empty(max(need, 1), dtype=torch.uint8, device=device)
    else:
        space = workspace(device, 64 if device == "cpu" else 1024)
    return dcpmla.BatchMLADecodeWrapper(
        space,
        sc.q.shape[1],
        cache.shape[1],
        torch_dtype(cache.dtype),
        dcp_world_size=sc.world,
        dcp_rank=rank,
        dcp_interleave=sc.interleave,
        num_blocks=cache.shape[0],
        **limits,
    )


def padded_batch(
    rng, size, num_blocks, block_size, columns, heads=8, *, max_q=5, q_dtype="f32", table_rows=None
):
    """A random ragged batch of Q 1..max_q padded to `size` rows, in a cache of exactly num_blocks
    blocks, with a block table of `columns` columns (-1 past each request's blocks) and
    table_rows rows (None: one a request; a CUDA graph's static table has `size`)."""
    q_lens = rng.integers(1, min(max_q, size) + 1, size=int(rng.integers(1, size // 2 + 1)))
    q_lens = q_lens[np.cumsum(q_lens) <= size]
    seq_lens = q_lens + rng.integers(0, 2 * block_size * columns // 3, size=len(q_lens))
    needed = int(sum(-(-int(t) // block_size) for t in seq_lens))
    sc = make_scenario(
        rng,
        q_lens,
        seq_lens,
        heads=heads,
        block_size=block_size,
        q_dtype=q_dtype,
        padding=size - int(q_lens.sum()),
        extra_blocks=num_blocks - needed,
    )
    table = np.full((table_rows or len(q_lens), columns), -1, np.int32)
    table[: len(q_lens), : sc.block_table.shape[1]] = sc.block_table
    sc.block_table = table
    return sc
