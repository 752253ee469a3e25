"""The paged latent cache of one DCP rank and the block allocator that hands out its blocks.

Every rank has its own pool of blocks but one block table: the allocator runs the same calls in
the same order on every rank, so block ids agree. A request of global length T needs the blocks of
rank 0's share, the largest: ceil(local_len(0, T) / block_size) (dcpmla.dcp_local_seq_lens)."""

import numpy as np
import torch

from dcpmla import dcp_local_seq_lens


class OutOfBlocks(RuntimeError):
    """The pool has fewer free blocks than a request needs (the scheduler waits and retries)."""


class BlockAllocator:
    """Free block ids of a pool of num_blocks, last freed first reused."""

    def __init__(self, num_blocks):
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self):
        return len(self._free)

    def allocate(self, count):
        if count > len(self._free):
            raise OutOfBlocks(
                f"blocks (out of memory): expected {count} free, got {len(self._free)}"
            )
        taken = self._free[len(self._free) - count :][::-1]
        del self._free[len(self._free) - count :]
        return taken

    def free(self, ids):
        self._free.extend(reversed(ids))


def blocks_needed(total_len, world, block_size, interleave=1):
    """Blocks a request of global length total_len holds on every rank (rank 0's share)."""
    local = int(dcp_local_seq_lens(np.array([total_len]), world, 0, interleave)[0])
    return -(-local // block_size)


def allocate_caches(num_layers, num_blocks, block_size, dtype, device=None):
    """One zeroed rank-local cache [num_blocks, block_size, 576] a layer."""
    return [
        torch.zeros((num_blocks, block_size, 576), dtype=dtype, device=device)
        for _ in range(num_layers)
    ]
