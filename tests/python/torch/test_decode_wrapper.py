"""BatchMLADecodeWrapper on CPU tensors against the float64 numpy reference: the engine batch
shapes, DCP ranks merged with merge_states_, several wrappers (capture sizes) re-planned, the
device planner's algorithm, and outputs passed in or allocated."""

import numpy as np
import pytest
import torch

import dcpmla

from checks import assert_matches
from numpy_reference import merge
from scenarios import SOFTMAX_SCALE, engine_scenario, make_scenario, reference, seed_of
from torch_scenarios import padded_batch, to_numpy, to_torch, workspace, wrapper_for

# Every engine shape, block size 16 / 32 / 64, H = 128 / TP for TP = 1, 4, 8, 16 and every dtype,
# each value in a few cases rather than all combinations.
SINGLE_RANK = [
    # shape, block size, heads, query dtype, cache dtype
    ("2xQ1", 16, 128, "f32", "f32"),
    ("Q1,1,5,5", 32, 32, "bf16", "bf16"),
    ("Q1,1,1,7,7,7 ctx512..2048", 64, 16, "bf16", "fp8"),
    ("spec 4xQ4", 16, 8, "f32", "bf16"),
    ("spec 4xQ8", 64, 128, "bf16", "bf16"),
    ("spec 4xQ8", 32, 16, "f32", "fp8"),
]


def run_rank(wrapper, sc, rank=0, **run_kwargs):
    return wrapper.run(
        to_torch(sc.q),
        to_torch(sc.caches[rank]),
        to_torch(sc.block_table),
        k_scale=sc.k_scale,
        **run_kwargs,
    )


def plan(wrapper, sc, **kwargs):
    wrapper.plan(
        to_torch(sc.query_start_loc),
        to_torch(sc.seq_lens),
        sc.num_tokens,
        sc.masks,
        softmax_scale=SOFTMAX_SCALE,
        **kwargs,
    )


@pytest.mark.parametrize("shape,block_size,heads,q_dtype,kv_dtype", SINGLE_RANK)
def test_single_rank_matches_reference(shape, block_size, heads, q_dtype, kv_dtype):
    rng = np.random.default_rng(seed_of("torch", shape, block_size, heads))
    sc = engine_scenario(
        rng, shape, heads=heads, block_size=block_size, q_dtype=q_dtype, kv_dtype=kv_dtype
    )
    wrapper = wrapper_for(sc)
    plan(wrapper, sc)
    out, lse = run_rank(wrapper, sc)
    assert out.dtype == to_torch(sc.q).dtype and lse.dtype == torch.float32
    assert out.shape == (sc.num_tokens, heads, 512) and lse.shape == (sc.num_tokens, heads)
    assert_matches(to_numpy(out).astype(sc.q.dtype), to_numpy(lse), *reference(sc))


def test_32_requests_of_2048_tokens():
    rng = np.random.default_rng(seed_of("torch", "32x2048"))
    sc = make_scenario(rng, [1] * 32, [2048] * 32, heads=16, block_size=64, kv_dtype="bf16")
    wrapper = wrapper_for(sc, max_num_reqs=32, max_num_tokens=32, max_blocks_per_req=32)
    plan(wrapper, sc)
    out, lse = run_rank(wrapper, sc)
    assert_matches(to_numpy(out), to_numpy(lse), *reference(sc))


@pytest.mark.parametrize("world,interleave,block_size", [(2, 1, 16), (4, 8, 32), (8, 1, 64)])
def test_dcp_ranks_merge_into_the_whole_attention(world, interleave, block_size):
    rng = np.random.default_rng(seed_of("torch dcp", world, interleave, block_size))
    sc = make_scenario(
        rng,
        [1, 8, 3, 1],
        [900, 41, 7, 1],
        heads=16,
        block_size=block_size,
        world=world,
        interleave=interleave,
        padding=3,
    )
    outs, lses = [], []
    for rank in range(world):
        wrapper = wrapper_for(sc, rank)
        plan(wrapper, sc)
        out, lse = run_rank(wrapper, sc, rank)
        assert_matches(to_numpy(out), to_numpy(lse), *reference(sc, rank))
        outs.append(out)
        lses.append(lse)
    v_out = torch.empty_like(outs[0])
    s_out = torch.empty_like(lses[0])
    dcpmla.attention_ops.merge_states_(torch.stack(outs), torch.stack(lses), v_out, s_out)
    assert_matches(to_numpy(v_out), to_numpy(s_out), *reference(sc))
    want = merge([(to_numpy(o), to_numpy(s)) for o, s in zip(outs, lses)])
    assert_matches(to_numpy(v_out), to_numpy(s_out), *want)


def test_wrappers_of_several_capture_sizes_replan_and_rerun():
    # One wrapper per capture size (its padded token count), re-planned batch after batch; the
    # schedule is sized once for the limits and never reallocated.
    rng = np.random.default_rng(seed_of("torch capture sizes"))
    num_blocks, block_size, columns = 160, 16, 12
    sizes = (4, 16, 32)
    wrappers = {
        size: dcpmla.BatchMLADecodeWrapper(
            workspace(),
            8,
            block_size,
            torch.bfloat16,
            use_cuda_graph=True,
            num_blocks=num_blocks,
            max_num_reqs=size,
            max_num_tokens=size,
            max_blocks_per_req=columns,
        )
        for size in sizes
    }
    schedules = {size: w.schedule for size, w in wrappers.items()}
    for _ in range(3):
        batches = {size: padded_batch(rng, size, num_blocks, block_size, columns) for size in sizes}
        for size in sizes:
            plan(wrappers[size], batches[size])
        for size in reversed(sizes):  # each wrapper runs its own plan, in any order
            sc = batches[size]
            out, lse = run_rank(wrappers[size], sc)
            assert wrappers[size].schedule is schedules[size]
            assert_matches(to_numpy(out), to_numpy(lse), *reference(sc))


def test_device_planner_gives_the_host_planners_result():
    # The GPU planner's algorithm (run by the CPU backend on CPU tensors) plans exactly as the
    # host planner: the decodes agree bit for bit.
    rng = np.random.default_rng(seed_of("torch device planner"))
    sc = padded_batch(rng, 24, 200, 32, 16, heads=16)
    results = []
    for planner in ("host", "device"):
        wrapper = wrapper_for(sc, max_num_reqs=24, max_num_tokens=24, max_blocks_per_req=16)
        plan(wrapper, sc, planner=planner)
        assert wrapper.status().ok
        results.append(run_rank(wrapper, sc))
    for a, b in zip(*results):
        assert torch.equal(a, b)
    assert_matches(to_numpy(results[1][0]), to_numpy(results[1][1]), *reference(sc))


def test_device_planner_fault_is_reported_and_poisons_the_outputs():
    rng = np.random.default_rng(seed_of("torch device fault"))
    sc = padded_batch(rng, 16, 100, 16, 8)
    wrapper = wrapper_for(sc, max_num_reqs=16, max_num_tokens=16, max_blocks_per_req=8)
    seq_lens = sc.seq_lens.copy()
    seq_lens[-1] = np.diff(sc.query_start_loc)[-1] - 1  # T < Q
    wrapper.plan(
        to_torch(sc.query_start_loc),
        to_torch(seq_lens),
        sc.num_tokens,
        softmax_scale=SOFTMAX_SCALE,
        planner="device",
    )
    status = wrapper.status()
    assert not status.ok and status.fault == "length_below_query"
    assert status.request == len(seq_lens) - 1 and "seq_lens" in status.message
    out, lse = run_rank(wrapper, sc)
    assert torch.isnan(out).all() and torch.isnan(lse).all()


def test_outputs_given_fp32_out_and_base_2_lse():
    rng = np.random.default_rng(seed_of("torch outputs"))
    sc = make_scenario(rng, [3, 1], [70, 5], heads=4, block_size=16, q_dtype="bf16", padding=1)
    wrapper = wrapper_for(sc)
    plan(wrapper, sc)
    out = torch.full((sc.num_tokens, 4, 512), 7.0)
    lse = torch.full((sc.num_tokens, 4), 7.0)
    got_out, got_lse = run_rank(wrapper, sc, out=out, lse=lse, lse_base_e=False)
    assert got_out is out and got_lse is lse
    want_out, want_lse = reference(sc)
    assert_matches(to_numpy(out), to_numpy(lse) * np.log(2), want_out, want_lse)


def test_host_plans_without_limits_grow_the_schedule():
    # Without limits each host plan sizes the schedule to its batch, growing the tensor when a
    # batch needs more.
    rng = np.random.default_rng(seed_of("torch growing"))
    wrapper = dcpmla.BatchMLADecodeWrapper(workspace(), 8, 16, torch.bfloat16, num_blocks=120)
    sizes = []
    for size in (2, 32, 8):
        sc = padded_batch(rng, size, 120, 16, 10)
        plan(wrapper, sc)
        sizes.append(wrapper.schedule.numel())
        out, lse = run_rank(wrapper, sc)
        assert_matches(to_numpy(out), to_numpy(lse), *reference(sc))
    assert sizes[0] < sizes[1] == sizes[2]


def test_full_masks_per_request():
    rng = np.random.default_rng(seed_of("torch masks"))
    sc = make_scenario(rng, [4, 3], [50, 9], heads=8, block_size=16, masks=["full", "causal"])
    wrapper = wrapper_for(sc)
    plan(wrapper, sc)
    out, lse = run_rank(wrapper, sc)
    assert_matches(to_numpy(out), to_numpy(lse), *reference(sc))
