"""dcpmla.cpu.make_plan: read-only views of a rank's plan."""

import numpy as np
import pytest

import dcpmla


def test_plan_views_hold_the_rows_local_prefixes():
    starts, lens = np.array([0, 3, 4], np.int32), np.array([10, 7], np.int32)
    table = np.array([[0, 1], [2, 3]], np.int32)
    for rank in (0, 1):
        plan = dcpmla.cpu.make_plan(
            table,
            starts,
            lens,
            num_heads=16,
            block_size=4,
            num_blocks=4,
            num_tokens=6,
            dcp_world_size=2,
            dcp_rank=rank,
        )
        bounds = dcpmla.row_bounds(starts, lens, num_tokens=6, world=2, rank=rank)[1]
        assert plan.num_rows == 6 and plan.num_partial_rows >= 0
        np.testing.assert_array_equal(plan.row_local_bound, bounds)
        np.testing.assert_array_equal(
            plan.request_local_len, dcpmla.dcp_local_seq_lens(lens, 2, rank=rank)
        )
        assert plan.row_local_bound.dtype == np.int32
        assert not plan.row_local_bound.flags.writeable


def test_a_view_keeps_its_plan_alive():
    plan = dcpmla.cpu.make_plan(
        np.array([[0]], np.int32),
        np.array([0, 2]),
        np.array([5]),
        num_heads=1,
        block_size=8,
        num_blocks=1,
    )
    view = plan.row_local_bound
    del plan
    assert view.tolist() == [4, 5]


def test_make_plan_names_a_bad_block_id():
    with pytest.raises(ValueError) as info:
        dcpmla.cpu.make_plan(
            np.array([[5]], np.int32),
            np.array([0, 1]),
            np.array([5]),
            num_heads=1,
            block_size=8,
            num_blocks=2,
        )
    assert info.value.argument == "block_table[0][0]"
