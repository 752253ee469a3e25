"""The sharding helpers against the SPEC's test vectors and vLLM's formulas, written here."""

import numpy as np
import pytest

import dcpmla


def vllm_local_seq_lens(seq_lens, world, interleave):
    """[B, W]: vLLM's get_dcp_local_seq_lens formula for every rank."""
    seq_lens = np.asarray(seq_lens, dtype=np.int64)[:, None]
    ranks = np.arange(world)[None, :]
    base = seq_lens // interleave // world * interleave
    rest = np.clip(seq_lens - base * world - ranks * interleave, 0, interleave)
    return base + rest


def vllm_slot_mapping(block_table, req_indices, positions, block_size, world, rank, interleave):
    """vLLM's DCP slot mapping: a virtual block of block_size * world positions per block id."""
    virtual = block_size * world
    block_ids = block_table[req_indices, positions // virtual]
    offsets = positions % virtual
    mine = offsets // interleave % world == rank
    local = offsets // (world * interleave) * interleave + offsets % interleave
    return np.where(mine, block_ids.astype(np.int64) * block_size + local, -1)


def test_local_seq_lens_spec_vectors():
    assert dcpmla.dcp_local_seq_lens(np.array([10]), 4).tolist() == [[3, 3, 2, 2]]
    assert dcpmla.dcp_local_seq_lens(np.array([10]), 2, interleave=4).tolist() == [[6, 4]]
    assert dcpmla.dcp_local_seq_lens(np.array([10, 7]), 4, rank=1).tolist() == [3, 2]


@pytest.mark.parametrize("world,interleave", [(1, 1), (2, 1), (4, 1), (4, 8), (8, 16), (3, 2)])
def test_local_seq_lens_match_vllm_and_sum_to_the_length(world, interleave):
    seq_lens = np.random.default_rng(world * 100 + interleave).integers(0, 5000, 64)
    for dtype in (np.int32, np.int64):
        got = dcpmla.dcp_local_seq_lens(seq_lens.astype(dtype), world, interleave=interleave)
        assert got.dtype == dtype and got.shape == (64, world)
        np.testing.assert_array_equal(got, vllm_local_seq_lens(seq_lens, world, interleave))
        np.testing.assert_array_equal(got.sum(axis=1), seq_lens)


def test_slot_mapping_spec_vector():
    table = np.array([[7, 3, 9]], np.int32)
    slots = [
        dcpmla.slot_mapping(table, np.array([0]), np.array([1000]), 64, world=8, rank=r)[0]
        for r in range(8)
    ]
    assert slots == [253] + [-1] * 7


@pytest.mark.parametrize("world,interleave,block_size", [(1, 1, 16), (2, 1, 32), (4, 4, 64)])
def test_slot_mapping_matches_vllm(world, interleave, block_size):
    rng = np.random.default_rng(world + interleave + block_size)
    B, max_blocks = 5, 6
    table = rng.permutation(B * max_blocks).reshape(B, max_blocks).astype(np.int32)
    req = rng.integers(0, B, 200)
    pos = rng.integers(0, max_blocks * block_size * world, 200)
    for rank in range(world):
        got = dcpmla.slot_mapping(
            table, req, pos, block_size, world=world, rank=rank, interleave=interleave
        )
        want = vllm_slot_mapping(table, req, pos, block_size, world, rank, interleave)
        np.testing.assert_array_equal(got, want)
    # Padding rows (request -1) get no slot.
    assert dcpmla.slot_mapping(table, np.array([-1]), np.array([0]), block_size).tolist() == [-1]


def test_step_positions():
    req, pos = dcpmla.step_positions(np.array([0, 3, 4]), np.array([31, 35]), num_tokens=6)
    assert req.tolist() == [0, 0, 0, 1, -1, -1]
    assert pos.tolist() == [28, 29, 30, 34, -1, -1]


def test_row_bounds_spec_vectors():
    starts = np.array([0, 3, 4])
    assert dcpmla.row_bounds(starts, np.array([31, 35]))[0].tolist() == [29, 30, 31, 35]
    full = dcpmla.row_bounds(starts, np.array([31, 35]), mask="full")[0]
    assert full.tolist() == [31, 31, 31, 35]
    warm_up = dcpmla.row_bounds(np.array([0, 8, 9]), np.array([100, 40]))[0]
    assert warm_up.tolist() == list(range(93, 101)) + [40]
    ragged = dcpmla.row_bounds(np.array([0, 8, 10]), np.array([100, 40]))[0]
    assert ragged.tolist() == list(range(93, 101)) + [39, 40]
    # W = 2, T = 10, Q = 3: local prefixes of the row bounds, never local(T) minus an offset.
    for rank, want in ((0, [4, 5, 5]), (1, [4, 4, 5])):
        local = dcpmla.row_bounds(np.array([0, 3]), np.array([10]), world=2, rank=rank)[1]
        assert local.tolist() == want
    row0 = dcpmla.row_bounds(np.array([0, 4]), np.array([128]), world=2, rank=1)[1][0]
    assert row0 == 62
    padded = dcpmla.row_bounds(np.array([0, 1]), np.array([5]), num_tokens=3)
    assert [x.tolist() for x in padded] == [[5, 0, 0], [5, 0, 0]]
