"""dcpmla.cpu.make_plan: read-only views of a rank's plan."""

import numpy as np
import pytest

import dcpmla


def test_plan_views_hold_the_rows_local_prefixes():
    starts, lens = np.array([0, 3, 4], np.int32), np.array([10, 7], np.int32)
    table = np.array([[0, 1], [2, 3]], np.int32)
    # W = 2: rank r owns the positions p with p % 2 == r. Request 0 (Q 3, T 10): its rows see
    # 8, 9 and 10 positions; request 1 (Q 1, T 7) sees 7; rows 4 and 5 are padding. By hand:
    want_bounds = {0: [4, 5, 5, 4, 0, 0], 1: [4, 4, 5, 3, 0, 0]}
    want_lens = {0: [5, 4], 1: [5, 3]}
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
        assert plan.num_rows == 6 and plan.num_partial_rows >= 0
        np.testing.assert_array_equal(plan.row_local_bound, want_bounds[rank])
        np.testing.assert_array_equal(plan.request_local_len, want_lens[rank])
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
