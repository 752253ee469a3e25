"""Random ragged DCP batches as engines build them: a query, every request's latents, a paged
cache per rank whose unused pages hold NaN, and one block table (a random permutation of the
cache's blocks) that every rank reads its shard through."""

import zlib
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from numpy_reference import attend

HEAD_DIM = 576
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "fp8": ml_dtypes.float8_e4m3fn}
SOFTMAX_SCALE = 0.1352338  # DeepSeek-V3: 192^-0.5 * mscale^2


def seed_of(*parts):
    """A seed that depends on the test case only (str hashes change from run to run)."""
    return zlib.crc32(repr(parts).encode())


@dataclass
class Scenario:
    query_start_loc: np.ndarray  # [B + 1] int32
    seq_lens: np.ndarray  # [B] int32, global lengths incl. the step's tokens
    num_tokens: int  # query rows incl. padding
    q: np.ndarray  # [num_tokens, H, 576] in the query dtype; padding rows NaN
    keys: list  # per request [T_b, 576] float64: the values the caches hold (k_scale applied)
    block_table: np.ndarray  # [B, max_blocks] int32, -1 past a request's blocks
    caches: list  # per rank [num_blocks, block_size, 576] in the cache dtype
    k_scale: float
    world: int
    interleave: int
    masks: list = None  # per request "causal" / "full", or None

    def decode(self, rank=0, **options):
        """dcpmla.cpu.mla_decode of the query against rank `rank`'s cache: the rank's partial
        under the scenario's sharding, its padding rows and k_scale (options: further keyword
        arguments, e.g. mask)."""
        # Here, not at the top: the reference's own tests use these scenarios without the library.
        import dcpmla

        return dcpmla.cpu.mla_decode(
            self.q,
            self.caches[rank],
            self.block_table,
            self.query_start_loc,
            self.seq_lens,
            SOFTMAX_SCALE,
            num_tokens=self.num_tokens,
            dcp_world_size=self.world,
            dcp_rank=rank,
            dcp_interleave=self.interleave,
            k_scale=self.k_scale,
            **options,
        )

    @property
    def q64(self):
        return self.q.astype(np.float64)


def local_len(length, world, interleave, rank):
    """Positions < length that rank owns (SPEC 2)."""
    span = world * interleave
    return (length // span) * interleave + min(
        max(length % span - rank * interleave, 0), interleave
    )


def make_scenario(
    rng,
    q_lens,
    seq_lens,
    *,
    heads,
    block_size,
    world=1,
    interleave=1,
    q_dtype="f32",
    kv_dtype="bf16",
    padding=0,
    extra_blocks=3,
    masks=None,
):
    q_lens = np.asarray(q_lens)
    seq_lens = np.asarray(seq_lens, dtype=np.int32)
    assert (seq_lens >= q_lens).all()
    query_start_loc = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    num_tokens = int(query_start_loc[-1]) + padding
    k_scale = 1.0 / 16 if kv_dtype == "fp8" else 1.0
    cache_dtype = DTYPES[kv_dtype]

    # Rank 0 holds the most tokens; every rank uses a prefix of the same block table row.
    needed = [-(-local_len(int(T), world, interleave, 0) // block_size) for T in seq_lens]
    num_blocks = sum(needed) + extra_blocks
    ids = rng.permutation(num_blocks).astype(np.int32)
    block_table = np.full((len(seq_lens), max(max(needed), 1)), -1, np.int32)
    start = 0
    for b, n in enumerate(needed):
        block_table[b, :n] = ids[start : start + n]
        start += n

    caches = [
        np.full((num_blocks, block_size, HEAD_DIM), np.nan, np.float32).astype(cache_dtype)
        for _ in range(world)
    ]
    keys = []
    for b, T in enumerate(seq_lens):
        latents = rng.standard_normal((int(T), HEAD_DIM)).astype(np.float32)
        stored = (latents / k_scale).astype(cache_dtype)
        keys.append(stored.astype(np.float64) * k_scale)
        p = np.arange(T)
        rank_of = (p // interleave) % world
        local = (p // (world * interleave)) * interleave + p % interleave
        block = block_table[b, local // block_size]
        for r in range(world):
            mine = rank_of == r
            caches[r][block[mine], local[mine] % block_size] = stored[mine]

    q = (rng.standard_normal((num_tokens, heads, HEAD_DIM)) * 0.5).astype(np.float32)
    q[query_start_loc[-1] :] = np.nan  # padding rows are never read
    return Scenario(
        query_start_loc,
        seq_lens,
        num_tokens,
        q.astype(DTYPES[q_dtype]),
        keys,
        block_table,
        caches,
        k_scale,
        world,
        interleave,
        masks,
    )


# The batch shapes engines use in their MLA backend tests: (name, Q per request, T per request).
def engine_shapes(rng):
    def contexts(n, low, high):
        return rng.integers(low, high + 1, size=n)

    return {
        "2xQ1": ([1, 1], contexts(2, 1, 700)),
        "Q1,1,5,5": ([1, 1, 5, 5], contexts(4, 5, 1024)),
        "Q1,1,1,7,7,7 ctx512..2048": ([1, 1, 1, 7, 7, 7], contexts(6, 512, 2048)),
        "spec 4xQ4": ([4] * 4, contexts(4, 4, 600)),
        "spec 4xQ8": ([8] * 4, contexts(4, 8, 600)),
    }


def engine_scenario(rng, shape, **kwargs):
    """make_scenario of one of engine_shapes' batches, with 2 padding rows."""
    q_lens, seq_lens = engine_shapes(rng)[shape]
    return make_scenario(rng, q_lens, seq_lens, padding=2, **kwargs)


def tolerances(out_dtype):
    """(out, lse) absolute tolerances: the output rounded to bf16 on top of fp32 accumulation."""
    return (2e-2 if np.dtype(out_dtype) == np.dtype(ml_dtypes.bfloat16) else 1e-4), 2e-4


def reference(sc, rank=None):
    """The float64 reference of a scenario (rank r's partial when rank is given)."""
    return attend(
        sc.q64,
        sc.keys,
        sc.query_start_loc,
        sc.seq_lens,
        SOFTMAX_SCALE,
        num_tokens=sc.num_tokens,
        masks=sc.masks,
        rank=rank,
        world=sc.world,
        interleave=sc.interleave,
    )
