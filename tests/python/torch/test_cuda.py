"""The torch ops and BatchMLADecodeWrapper on a GPU (skipped without one that runs this build's
kernels): the engine shapes against the float64 reference, planned from host and device tensors,
DCP ranks merged on the GPU, wrappers of several capture sizes captured in CUDA graphs and
replayed after re-planning, torch's current stream, and tensors of another device refused."""

import numpy as np
import pytest
import torch

import dcpmla
from dcpmla.attention_ops import merge_states_, write_kv_

from checks import assert_matches
from scenarios import SOFTMAX_SCALE, engine_scenario, make_scenario, reference, seed_of
from torch_scenarios import padded_batch, to_numpy, to_torch, wrapper_for

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available()
    or not torch.ops.dcpmla.has_cuda_backend()
    or torch.cuda.get_device_capability(0) != (9, 0),
    reason="needs an sm_90 GPU and a build with the CUDA backend",
)
CUDA = "cuda:0"


def plan(wrapper, sc, device="cpu", **kwargs):
    wrapper.plan(
        to_torch(sc.query_start_loc, device),
        to_torch(sc.seq_lens, device),
        sc.num_tokens,
        softmax_scale=SOFTMAX_SCALE,
        **kwargs,
    )


def run(wrapper, sc, rank=0, **kwargs):
    return wrapper.run(
        to_torch(sc.q, CUDA),
        to_torch(sc.caches[rank], CUDA),
        to_torch(sc.block_table, CUDA),
        k_scale=sc.k_scale,
        **kwargs,
    )


CASES = [
    # shape, block size, heads, query dtype, cache dtype
    ("2xQ1", 16, 128, "bf16", "bf16"),
    ("Q1,1,5,5", 32, 32, "bf16", "fp8"),
    ("Q1,1,1,7,7,7 ctx512..2048", 64, 16, "bf16", "bf16"),
    ("spec 4xQ4", 64, 8, "f32", "f32"),
    ("spec 4xQ8", 64, 128, "bf16", "bf16"),
]


@pytest.mark.parametrize("planner_device", ["cpu", CUDA])
@pytest.mark.parametrize("shape,block_size,heads,q_dtype,kv_dtype", CASES)
def test_cuda_decode_matches_reference(shape, block_size, heads, q_dtype, kv_dtype, planner_device):
    rng = np.random.default_rng(seed_of("torch cuda", shape, block_size, heads))
    sc = engine_scenario(
        rng, shape, heads=heads, block_size=block_size, q_dtype=q_dtype, kv_dtype=kv_dtype
    )
    wrapper = wrapper_for(
        sc,
        device=CUDA,
        max_num_reqs=len(sc.seq_lens),
        max_num_tokens=sc.num_tokens,
        max_blocks_per_req=sc.block_table.shape[1],
    )
    plan(wrapper, sc, planner_device)
    out, lse = run(wrapper, sc)
    assert wrapper.status().ok
    assert out.device == torch.device(CUDA) and lse.device == torch.device(CUDA)
    assert_matches(to_numpy(out).astype(sc.q.dtype), to_numpy(lse), *reference(sc))


def test_cuda_32_requests_of_2048_tokens_on_a_side_stream():
    rng = np.random.default_rng(seed_of("torch cuda 32x2048"))
    sc = make_scenario(rng, [1] * 32, [2048] * 32, heads=16, block_size=64, q_dtype="bf16")
    wrapper = wrapper_for(sc, device=CUDA)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # the ops run on torch's current stream
        plan(wrapper, sc)
        out, lse = run(wrapper, sc)
    stream.synchronize()
    assert_matches(to_numpy(out).astype(sc.q.dtype), to_numpy(lse), *reference(sc))


def test_cuda_dcp_ranks_merge_on_the_gpu():
    rng = np.random.default_rng(seed_of("torch cuda dcp"))
    sc = make_scenario(
        rng, [1, 7, 3], [700, 40, 9], heads=16, block_size=64, world=4, interleave=16, padding=1
    )
    outs, lses = [], []
    for rank in range(4):
        wrapper = wrapper_for(sc, rank, device=CUDA)
        plan(wrapper, sc)
        out, lse = run(wrapper, sc, rank, out=torch.empty((sc.num_tokens, 16, 512), device=CUDA))
        assert_matches(to_numpy(out), to_numpy(lse), *reference(sc, rank))
        outs.append(out)
        lses.append(lse)
    v_out = torch.empty_like(outs[0])
    s_out = torch.empty_like(lses[0])
    merge_states_(torch.stack(outs), torch.stack(lses), v_out, s_out)
    assert_matches(to_numpy(v_out), to_numpy(s_out), *reference(sc))


def test_cuda_write_kv_and_merge_states_match_the_cpu():
    rng = np.random.default_rng(seed_of("torch cuda ops"))
    latent = torch.from_numpy(rng.standard_normal((7, 576)).astype(np.float32))
    slots = torch.tensor([3, -1, 40, 17, 63, -1, 0])
    caches = []
    for device in ("cpu", CUDA):
        cache = torch.zeros((4, 16, 576), dtype=torch.float8_e4m3fn, device=device)
        write_kv_(latent.to(device), slots.to(device), cache, k_scale=0.5)
        caches.append(cache.float().cpu())
    assert torch.equal(caches[0], caches[1])
    v = torch.from_numpy(rng.standard_normal((3, 5, 8, 64)).astype(np.float32))
    s = torch.from_numpy(rng.standard_normal((3, 5, 8)).astype(np.float32))
    s[1, 2] = float("-inf")
    results = []
    for device in ("cpu", CUDA):
        v_out = torch.empty((5, 8, 64), dtype=torch.bfloat16, device=device)
        s_out = torch.empty((5, 8), device=device)
        merge_states_(v.to(device).bfloat16(), s.to(device), v_out, s_out, lse_base_e=False)
        results.append((v_out.float().cpu(), s_out.cpu()))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-2)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-5)


# Graph batches: Q up to 8, a bf16 query.
GRAPH_BATCH = dict(max_q=8, q_dtype="bf16")


@pytest.mark.parametrize("planner_device", ["cpu", CUDA])
def test_cuda_graphs_of_several_capture_sizes_replay_after_replanning(planner_device):
    # One wrapper per capture size; each captured once with its static tensors, then re-planned
    # (from host or device tensors) and replayed for new batches, in any order.
    rng = np.random.default_rng(seed_of("torch cuda graphs", planner_device))
    heads, block_size, columns, num_blocks = 16, 64, 8, 600
    cache = torch.empty((num_blocks, block_size, 576), dtype=torch.bfloat16, device=CUDA)
    sizes = (8, 32)
    graphs = {}
    for size in sizes:
        limits = [size, size, columns]
        config = [heads, block_size, num_blocks, 1, 0, 1]
        need = torch.ops.dcpmla.schedule_sizes(torch.device(CUDA).index, config, limits)[1]
        wrapper = dcpmla.BatchMLADecodeWrapper(
            torch.empty(need, dtype=torch.uint8, device=CUDA),
            heads,
            block_size,
            torch.bfloat16,
            use_cuda_graph=True,
            num_blocks=num_blocks,
            max_num_reqs=size,
            max_num_tokens=size,
            max_blocks_per_req=columns,
        )
        static = {
            "q": torch.zeros((size, heads, 576), dtype=torch.bfloat16, device=CUDA),
            "table": torch.zeros((size, columns), dtype=torch.int32, device=CUDA),
            "out": torch.empty((size, heads, 512), dtype=torch.bfloat16, device=CUDA),
            "lse": torch.empty((size, heads), device=CUDA),
        }
        warmup = padded_batch(
            rng, size, num_blocks, block_size, columns, heads, table_rows=size, **GRAPH_BATCH
        )
        plan(wrapper, warmup, planner_device)

        def step(wrapper=wrapper, static=static):
            wrapper.run(static["q"], cache, static["table"], out=static["out"], lse=static["lse"])

        step()  # eager first: the backend and its kernels are set up outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        graphs[size] = (wrapper, static, graph)

    for _ in range(3):
        batches = {}
        for size in sizes:
            batches[size] = padded_batch(
                rng, size, num_blocks, block_size, columns, heads, table_rows=size, **GRAPH_BATCH
            )
        for size in reversed(sizes):
            sc = batches[size]
            wrapper, static, graph = graphs[size]
            cache.copy_(to_torch(sc.caches[0], CUDA))
            static["q"].copy_(to_torch(sc.q, CUDA))
            static["table"].copy_(to_torch(sc.block_table, CUDA))
            plan(wrapper, sc, planner_device)
            graph.replay()
            torch.cuda.synchronize()
            assert wrapper.status().ok
            assert_matches(
                to_numpy(static["out"]).astype(sc.q.dtype), to_numpy(static["lse"]), *reference(sc)
            )


def test_cuda_device_planner_fault_poisons_the_outputs():
    rng = np.random.default_rng(seed_of("torch cuda fault"))
    sc = make_scenario(rng, [4, 1], [30, 8], heads=8, block_size=64, q_dtype="bf16")
    wrapper = wrapper_for(sc, device=CUDA, max_num_reqs=2, max_num_tokens=5, max_blocks_per_req=1)
    seq_lens = torch.tensor([3, 8], dtype=torch.int32, device=CUDA)  # T < Q for request 0
    wrapper.plan(
        to_torch(sc.query_start_loc, CUDA), seq_lens, sc.num_tokens, softmax_scale=SOFTMAX_SCALE
    )
    out, lse = run(wrapper, sc)
    status = wrapper.status()
    assert status.fault == "length_below_query" and status.request == 0
    assert torch.isnan(out).all() and torch.isnan(lse).all()


def test_cuda_tensors_of_other_devices_are_refused():
    rng = np.random.default_rng(seed_of("torch cuda devices"))
    sc = make_scenario(rng, [2], [30], heads=8, block_size=16, q_dtype="bf16")
    wrapper = wrapper_for(sc, device=CUDA)
    plan(wrapper, sc)
    q, cache, table = (to_torch(x, CUDA) for x in (sc.q, sc.caches[0], sc.block_table))
    with pytest.raises(ValueError) as info:
        wrapper.run(q, cache, table.cpu())
    assert info.value.argument == "block_table" and "cuda:0" in str(info.value)
    with pytest.raises(ValueError) as info:
        wrapper.run(q.cpu(), cache, table)  # the wrapper's schedule is on cuda:0
    assert info.value.argument in ("kv_cache", "schedule")
    if torch.cuda.device_count() >= 2:
        with pytest.raises(ValueError) as info:
            wrapper.run(q, cache.to("cuda:1"), table)
        assert info.value.argument == "kv_cache" and "cuda:1" in str(info.value)
