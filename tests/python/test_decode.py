"""dcpmla.cpu.mla_decode against the float64 numpy reference: one rank, and under DCP each rank's
partial result (which merged over the ranks gives the whole attention)."""

import numpy as np
import pytest

import dcpmla

from checks import assert_matches
from numpy_reference import attend, merge
from scenarios import (
    SOFTMAX_SCALE,
    engine_scenario,
    engine_shapes,
    make_scenario,
    reference,
    seed_of,
)

# Every engine shape, block size 16 / 32 / 64, H = 128 / TP for TP = 1, 4, 8, 16 and every dtype,
# each value in a few cases rather than all combinations (seconds in all).
SINGLE_RANK = [
    # shape, block size, heads, query dtype, cache dtype
    ("2xQ1", 16, 128, "f32", "f32"),
    ("Q1,1,5,5", 32, 32, "bf16", "bf16"),
    ("Q1,1,1,7,7,7 ctx512..2048", 64, 16, "bf16", "fp8"),
    ("spec 4xQ4", 16, 8, "f32", "bf16"),
    ("spec 4xQ8", 64, 128, "bf16", "bf16"),
    ("spec 4xQ8", 32, 16, "f32", "fp8"),
]


@pytest.mark.parametrize("shape,block_size,heads,q_dtype,kv_dtype", SINGLE_RANK)
def test_single_rank_matches_reference(shape, block_size, heads, q_dtype, kv_dtype):
    rng = np.random.default_rng(seed_of(shape, block_size, heads))
    sc = engine_scenario(
        rng, shape, heads=heads, block_size=block_size, q_dtype=q_dtype, kv_dtype=kv_dtype
    )
    out, lse = sc.decode()
    assert out.dtype == sc.q.dtype and lse.dtype == np.float32
    assert out.shape == (sc.num_tokens, heads, 512) and lse.shape == (sc.num_tokens, heads)
    assert_matches(
        out,
        lse,
        *reference(sc),
    )


# (Q per request, T per request): rows that see no key at all on some ranks (T < W + Q).
SHORT = ([3, 1, 2], [3, 2, 6])

RANK_LOCAL = [
    # shape, world, interleave, block size, heads, query dtype, cache dtype
    ("Q1,1,5,5", 2, 1, 16, 16, "bf16", "bf16"),
    ("spec 4xQ8", 4, 8, 64, 8, "f32", "f32"),
    ("short", 4, 1, 16, 8, "f32", "bf16"),
    ("short", 2, 2, 32, 32, "bf16", "fp8"),
]


@pytest.mark.parametrize("shape,world,interleave,block_size,heads,q_dtype,kv_dtype", RANK_LOCAL)
def test_rank_partials_match_reference_and_merge_to_whole(
    shape, world, interleave, block_size, heads, q_dtype, kv_dtype
):
    rng = np.random.default_rng(seed_of(shape, world, interleave))
    q_lens, seq_lens = SHORT if shape == "short" else engine_shapes(rng)[shape]
    sc = make_scenario(
        rng,
        q_lens,
        seq_lens,
        heads=heads,
        block_size=block_size,
        world=world,
        interleave=interleave,
        q_dtype=q_dtype,
        kv_dtype=kv_dtype,
        padding=1,
    )
    partials = []
    for rank in range(world):
        out, lse = sc.decode(rank)
        want = reference(sc, rank)
        assert_matches(out, lse, *want)
        partials.append((out.astype(np.float64), lse.astype(np.float64)))
    whole = reference(sc)
    merged_out, merged_lse = merge(partials)
    real = sc.query_start_loc[-1]
    assert np.abs(merged_lse[:real] - whole[1][:real]).max() <= 2e-4
    assert np.abs(merged_out - whole[0]).max() <= (4e-2 if q_dtype == "bf16" else 2e-4)


def test_full_mask_rows_see_the_whole_request():
    rng = np.random.default_rng(7)
    masks = ["full", "causal", "full"]
    sc = make_scenario(rng, [4, 2, 3], [9, 40, 3], heads=8, block_size=16, masks=masks)
    out, lse = sc.decode(mask=masks)
    assert_matches(
        out,
        lse,
        *attend(sc.q64, sc.keys, sc.query_start_loc, sc.seq_lens, SOFTMAX_SCALE, masks=masks),
    )
    # One mask for every request.
    out, lse = sc.decode(mask="full")
    assert_matches(
        out,
        lse,
        *attend(
            sc.q64, sc.keys, sc.query_start_loc, sc.seq_lens, SOFTMAX_SCALE, masks=["full"] * 3
        ),
    )


def test_a_nan_key_poisons_exactly_the_rows_that_read_it():
    rng = np.random.default_rng(3)
    sc = make_scenario(rng, [4, 1], [20, 30], heads=4, block_size=16, kv_dtype="f32")
    # Position 17 of request 0: rows 1..3 (bounds 18, 19, 20) read it, row 0 (bound 17) does not.
    block, offset = sc.block_table[0, 17 // 16], 17 % 16
    sc.caches[0][block, offset, 100] = np.nan
    out, lse = sc.decode()
    assert np.isnan(out[1:4]).all() and np.isnan(lse[1:4]).all()
    want_out, want_lse = attend(sc.q64, sc.keys, sc.query_start_loc, sc.seq_lens, SOFTMAX_SCALE)
    keep = [0, 4]
    assert_matches(out[keep], lse[keep], want_out[keep], want_lse[keep])


def test_a_batch_of_padding_rows_only():
    q = np.full((2, 4, 576), np.nan, np.float32)
    cache = np.full((1, 16, 576), np.nan, np.float32)
    batch = (np.zeros((0, 1), np.int32), np.array([0]), np.zeros(0, np.int32), SOFTMAX_SCALE)
    for out, lse in (
        dcpmla.cpu.mla_decode(q, cache, *batch, num_tokens=2),
        dcpmla.cpu.dcp_step_simulated(q, [cache] * 2, *batch, num_tokens=2, world=2),
    ):
        assert (out == 0).all() and np.isneginf(lse).all()
