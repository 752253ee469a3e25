"""Every bad argument of the torch ops and BatchMLADecodeWrapper is refused before anything is
written: a TypeError for a dtype, a ValueError for a value, shape, layout or inconsistent batch,
naming the argument (the exception's ``argument``) and never copying or crashing."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import dcpmla
from dcpmla.attention_ops import merge_states_, mla_decode_, write_kv_

from scenarios import SOFTMAX_SCALE, make_scenario, seed_of
from torch_scenarios import to_torch, workspace

H, BLOCK = 4, 16


def valid():
    """A planned wrapper and a valid call of every op (bf16 query and cache, fp32 outputs)."""
    rng = np.random.default_rng(seed_of("torch arguments"))
    sc = make_scenario(rng, [3, 1], [40, 9], heads=H, block_size=BLOCK, q_dtype="bf16", padding=1)
    num_blocks = sc.caches[0].shape[0]
    wrapper = dcpmla.BatchMLADecodeWrapper(
        workspace(mib=8), H, BLOCK, torch.bfloat16, num_blocks=num_blocks
    )
    t = SimpleNamespace(
        sc=sc,
        wrapper=wrapper,
        qsl=to_torch(sc.query_start_loc),
        seq_lens=to_torch(sc.seq_lens),
        q=to_torch(sc.q),
        cache=to_torch(sc.caches[0]),
        table=to_torch(sc.block_table),
        out=torch.zeros((sc.num_tokens, H, 512)),
        lse=torch.zeros((sc.num_tokens, H)),
        num_blocks=num_blocks,
    )
    wrapper.plan(t.qsl, t.seq_lens, sc.num_tokens, softmax_scale=SOFTMAX_SCALE)
    return t


def run(t, **changes):
    args = dict(q=t.q, kv_cache=t.cache, block_table=t.table, out=t.out, lse=t.lse)
    args.update(changes)
    return t.wrapper.run(**args)


def plan(t, **changes):
    args = dict(
        query_start_loc=t.qsl,
        seq_lens=t.seq_lens,
        num_tokens=t.sc.num_tokens,
        softmax_scale=SOFTMAX_SCALE,
    )
    args.update(changes)
    t.wrapper.plan(**args)


def misaligned(shape, dtype):
    """A contiguous tensor of `shape` starting 4 bytes past a 16-byte boundary."""
    flat = torch.zeros(int(np.prod(shape)) * 2 + 64, dtype=torch.uint8)
    offset = (16 - flat.data_ptr() % 16) % 16 + 4
    size = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
    return flat[offset : offset + size].view(dtype).view(shape)


def strided(shape, dtype):
    """A non-contiguous tensor of `shape` (every other element of its last dimension)."""
    return torch.zeros((*shape[:-1], shape[-1] * 2), dtype=dtype)[..., ::2]


def small_workspace(t):
    """A decode from a schedule whose capacity has split-KV partials, with a 16-byte workspace."""
    wrapper = dcpmla.BatchMLADecodeWrapper(
        workspace(),
        H,
        BLOCK,
        torch.bfloat16,
        num_blocks=t.num_blocks,
        max_num_reqs=2,
        max_num_tokens=N,
        max_blocks_per_req=t.table.shape[1],
    )
    plan(SimpleNamespace(**{**vars(t), "wrapper": wrapper}))
    small = torch.zeros(16, dtype=torch.uint8)
    mla_decode_(t.q, t.cache, t.table, wrapper.schedule, small, t.out, t.lse, SOFTMAX_SCALE)


N = 5  # query rows of valid(): 3 + 1 tokens and a padding row
CASES = {
    # name: (exception, argument, the call on valid()'s tensors)
    "q dtype": (TypeError, "q", lambda t: run(t, q=t.q.to(torch.float16))),
    "q strides": (ValueError, "q", lambda t: run(t, q=strided((N, H, 576), torch.bfloat16))),
    "q alignment": (ValueError, "q", lambda t: run(t, q=misaligned((N, H, 576), torch.bfloat16))),
    "q rows": (ValueError, "q", lambda t: run(t, q=t.q[:4], out=t.out[:4], lse=t.lse[:4])),
    "q heads": (
        ValueError,
        "q",
        lambda t: run(t, q=t.q[:, :2], out=t.out[:, :2], lse=t.lse[:, :2]),
    ),
    "q width": (ValueError, "q", lambda t: run(t, q=t.q[..., :512].contiguous())),
    "q type": (TypeError, "q", lambda t: run(t, q=t.sc.q)),
    "q 1-D": (ValueError, "q", lambda t: run(t, q=t.q[0, 0])),
    "q 0-D": (ValueError, "q", lambda t: run(t, q=t.q[0, 0, 0])),
    "seq_lens type": (TypeError, "seq_lens", lambda t: plan(t, seq_lens=[40, 9])),
    "cache dtype": (TypeError, "kv_cache", lambda t: run(t, kv_cache=t.cache.float())),
    "cache uint8": (
        TypeError,
        "kv_cache",
        lambda t: mla_decode_(
            t.q,
            t.cache.view(torch.uint8),
            t.table,
            t.wrapper.schedule,
            workspace(mib=1),
            t.out,
            t.lse,
            SOFTMAX_SCALE,
        ),
    ),
    "cache blocks": (ValueError, "kv_cache.num_blocks", lambda t: run(t, kv_cache=t.cache[1:])),
    "cache width": (ValueError, "kv_cache", lambda t: run(t, kv_cache=t.cache[..., :512])),
    "cache strides": (
        ValueError,
        "kv_cache",
        lambda t: run(t, kv_cache=strided((t.num_blocks, BLOCK, 576), torch.bfloat16)),
    ),
    "table dtype": (TypeError, "block_table", lambda t: run(t, block_table=t.table.long())),
    "table columns": (ValueError, "block_table", lambda t: run(t, block_table=t.table[:, :1])),
    "table rows": (ValueError, "block_table", lambda t: run(t, block_table=t.table[:1])),
    "out shape": (ValueError, "out", lambda t: run(t, out=t.out[..., :256])),
    "out dtype": (TypeError, "out", lambda t: run(t, out=t.out.half())),
    "lse dtype": (TypeError, "lse", lambda t: run(t, lse=t.lse.bfloat16())),
    "lse over out": (ValueError, "lse", lambda t: run(t, lse=t.out.view(-1)[: N * H].view(N, H))),
    "out over q": (
        ValueError,
        "out",
        lambda t: run(t, q=t.out.view(torch.bfloat16).view(-1)[: N * H * 576].view(N, H, 576)),
    ),
    "k_scale of a bf16 cache": (ValueError, "k_scale", lambda t: run(t, k_scale=2.0)),
    "k_scale type": (TypeError, "k_scale", lambda t: run(t, k_scale="1")),
    "softmax_scale nan": (
        ValueError,
        "softmax_scale",
        lambda t: plan(t, softmax_scale=float("nan")),
    ),
    "num_tokens negative": (ValueError, "num_tokens", lambda t: plan(t, num_tokens=-1)),
    "mask type": (TypeError, "mask", lambda t: plan(t, mask=5)),
    "softmax_scale value": (
        ValueError,
        "softmax_scale",
        lambda t: (plan(t, softmax_scale=-1.0), run(t)),
    ),
    "softmax_scale type": (TypeError, "softmax_scale", lambda t: plan(t, softmax_scale="0.1")),
    "seq_lens below Q": (
        ValueError,
        "seq_lens[0]",
        lambda t: plan(t, seq_lens=torch.tensor([2, 9], dtype=torch.int32)),
    ),
    "seq_lens count": (ValueError, "query_start_loc", lambda t: plan(t, seq_lens=t.seq_lens[:1])),
    "query_start_loc dtype": (
        TypeError,
        "query_start_loc",
        lambda t: plan(t, query_start_loc=t.qsl.float()),
    ),
    "query_start_loc order": (
        ValueError,
        "query_start_loc[2]",
        lambda t: plan(t, query_start_loc=torch.tensor([0, 3, 2], dtype=torch.int32)),
    ),
    "num_tokens below the rows": (ValueError, "num_tokens", lambda t: plan(t, num_tokens=3)),
    "mask name": (ValueError, "mask", lambda t: plan(t, mask="sliding")),
    "mask count": (ValueError, "mask", lambda t: plan(t, mask=["full"] * 3)),
    "planner name": (ValueError, "planner", lambda t: plan(t, planner="gpu")),
    "device planner without limits": (
        ValueError,
        "max_blocks_per_req",
        lambda t: plan(t, planner="device"),
    ),
    "run before plan": (
        ValueError,
        "schedule",
        lambda t: dcpmla.BatchMLADecodeWrapper(
            workspace(mib=1), H, BLOCK, torch.bfloat16, num_blocks=t.num_blocks
        ).run(t.q, t.cache, t.table),
    ),
    "schedule never planned": (
        ValueError,
        "schedule",
        lambda t: mla_decode_(
            t.q,
            t.cache,
            t.table,
            torch.zeros(4096, dtype=torch.uint8),
            workspace(mib=1),
            t.out,
            t.lse,
            SOFTMAX_SCALE,
        ),
    ),
    "schedule dtype": (
        TypeError,
        "schedule",
        lambda t: mla_decode_(
            t.q,
            t.cache,
            t.table,
            t.wrapper.schedule.view(torch.int8),
            workspace(mib=1),
            t.out,
            t.lse,
            SOFTMAX_SCALE,
        ),
    ),
    "workspace too small": (ValueError, "workspace", lambda t: small_workspace(t)),
    "workspace dtype": (
        TypeError,
        "workspace",
        lambda t: dcpmla.BatchMLADecodeWrapper(
            torch.zeros(64), H, BLOCK, torch.bfloat16, num_blocks=t.num_blocks
        ),
    ),
    "workspace for the limits": (
        ValueError,
        "workspace",
        lambda t: dcpmla.BatchMLADecodeWrapper(
            workspace(mib=1),
            128,
            BLOCK,
            torch.bfloat16,
            num_blocks=t.num_blocks,
            max_num_reqs=64,
            max_num_tokens=512,
            max_blocks_per_req=64,
        ),
    ),
    "kv_cache_dtype": (
        TypeError,
        "kv_cache_dtype",
        lambda t: dcpmla.BatchMLADecodeWrapper(
            workspace(mib=1), H, BLOCK, torch.float16, num_blocks=t.num_blocks
        ),
    ),
    "cuda graph without limits": (
        ValueError,
        "max_num_reqs",
        lambda t: dcpmla.BatchMLADecodeWrapper(
            workspace(mib=1), H, BLOCK, torch.bfloat16, use_cuda_graph=True, num_blocks=8
        ),
    ),
    "dcp_rank": (
        ValueError,
        "dcp_rank",
        lambda t: dcpmla.BatchMLADecodeWrapper(
            workspace(mib=1),
            H,
            BLOCK,
            torch.bfloat16,
            dcp_world_size=2,
            dcp_rank=2,
            num_blocks=8,
            max_num_reqs=2,
            max_num_tokens=4,
            max_blocks_per_req=2,
        ),
    ),
    "dcp_interleave": (
        ValueError,
        "dcp_interleave",
        lambda t: dcpmla.BatchMLADecodeWrapper(
            workspace(mib=1),
            H,
            BLOCK,
            torch.bfloat16,
            dcp_world_size=2,
            dcp_interleave=3,
            num_blocks=8,
            max_num_reqs=2,
            max_num_tokens=4,
            max_blocks_per_req=2,
        ),
    ),
    "num_heads": (
        ValueError,
        "num_heads",
        lambda t: dcpmla.BatchMLADecodeWrapper(
            workspace(mib=1), 0, BLOCK, torch.bfloat16, num_blocks=8
        ),
    ),
    "batch over the limits": (
        ValueError,
        "plan",
        lambda t: dcpmla.BatchMLADecodeWrapper(
            workspace(),
            H,
            BLOCK,
            torch.bfloat16,
            num_blocks=t.num_blocks,
            max_num_reqs=1,
            max_num_tokens=8,
            max_blocks_per_req=4,
        ).plan(t.qsl, t.seq_lens, softmax_scale=SOFTMAX_SCALE),
    ),
    "write_kv slot range": (
        ValueError,
        "slot_mapping[1]",
        lambda t: write_kv_(torch.zeros((2, 576)), torch.tensor([0, 10**6]), t.cache),
    ),
    "write_kv slot dtype": (
        TypeError,
        "slot_mapping",
        lambda t: write_kv_(
            torch.zeros((2, 576)), torch.tensor([0, 1], dtype=torch.int32), t.cache
        ),
    ),
    "write_kv slot count": (
        ValueError,
        "slot_mapping",
        lambda t: write_kv_(torch.zeros((2, 576)), torch.tensor([0, 1, 2]), t.cache),
    ),
    "write_kv uint8 cache": (
        TypeError,
        "kv_cache",
        lambda t: write_kv_(
            torch.zeros((1, 576)),
            torch.tensor([0]),
            torch.zeros((2, BLOCK, 576), dtype=torch.uint8),
        ),
    ),
    "write_kv latent width": (
        ValueError,
        "latent",
        lambda t: write_kv_(torch.zeros((2, 512)), torch.tensor([0, 1]), t.cache),
    ),
    "write_kv fp8 scale": (
        ValueError,
        "k_scale",
        lambda t: write_kv_(
            torch.zeros((1, 576)),
            torch.tensor([0]),
            torch.zeros((2, BLOCK, 576)).to(torch.float8_e4m3fn),
            k_scale=float("inf"),
        ),
    ),
    "merge s shape": (
        ValueError,
        "s",
        lambda t: merge_states_(
            torch.zeros((2, 3, 4, 8)),
            torch.zeros((2, 3, 5)),
            torch.zeros((3, 4, 8)),
            torch.zeros((3, 4)),
        ),
    ),
    "merge v_out dtype": (
        TypeError,
        "v_out",
        lambda t: merge_states_(
            torch.zeros((2, 3, 4, 8)),
            torch.zeros((2, 3, 4)),
            torch.zeros((3, 4, 8)).half(),
            torch.zeros((3, 4)),
        ),
    ),
    "merge no states": (
        ValueError,
        "v",
        lambda t: merge_states_(
            torch.zeros((0, 3, 4, 8)),
            torch.zeros((0, 3, 4)),
            torch.zeros((3, 4, 8)),
            torch.zeros((3, 4)),
        ),
    ),
    "merge v rank": (
        ValueError,
        "v",
        lambda t: merge_states_(
            torch.zeros((2, 3, 8)), torch.zeros((2, 3)), torch.zeros((3, 8)), torch.zeros((3,))
        ),
    ),
}


def test_empty_tensors_are_contiguous():
    # No rows: nothing to merge, and no stride of an empty tensor makes it non-contiguous.
    v_out, s_out = torch.empty((0, 4, 8)), torch.empty((0, 4))
    merge_states_(torch.randn(2, 0, 4, 8), torch.randn(2, 0, 4), v_out, s_out)


def test_dtype_names_are_pythons():
    t = valid()
    with pytest.raises(TypeError, match="got torch.float16$"):
        run(t, q=t.q.half())
    with pytest.raises(TypeError, match="expected dtype torch.float32, got torch.bfloat16$"):
        run(t, lse=t.lse.bfloat16())


@pytest.mark.parametrize("case", CASES)
def test_bad_argument_is_refused_by_name(case):
    exc_type, argument, call = CASES[case]
    t = valid()
    out_before, lse_before = t.out.clone(), t.lse.clone()
    with pytest.raises(exc_type) as info:
        call(t)
    assert info.value.argument == argument, str(info.value)
    assert argument.split("[")[0].split(".")[0] in str(info.value)
    # Nothing was written into the outputs of the refused call.
    assert torch.equal(t.out, out_before) and torch.equal(t.lse, lse_before)


def test_a_refused_plan_leaves_the_wrapper_unplanned():
    t = valid()
    with pytest.raises(ValueError):
        plan(t, seq_lens=torch.tensor([2, 9], dtype=torch.int32))
    with pytest.raises(ValueError) as info:
        run(t)  # never the previous batch's plan
    assert info.value.argument == "schedule"
    plan(t)
    assert torch.isfinite(run(t)[1][:4]).all()


def test_valid_call_runs():
    # The cases above differ from this call in one argument each.
    t = valid()
    out, lse = run(t)
    assert out is t.out and torch.isfinite(lse[:4]).all() and torch.isneginf(lse[4]).all()


def test_raw_ops_raise_value_errors_with_the_message():
    # Without the Python layer torch raises ValueError for values and dtypes alike, keeping the
    # library's message.
    t = valid()
    with pytest.raises(
        ValueError, match=r"^block_table \(dtype mismatch\): expected dtype torch.int32"
    ):
        torch.ops.dcpmla.mla_decode_(
            t.q,
            t.cache,
            t.table.long(),
            t.wrapper.schedule,
            t.wrapper._workspace,
            t.out,
            t.lse,
            0.1,
        )


def test_numpy_path_refuses_torch_views_it_would_misread():
    # dcpmla.cpu takes torch tensors through DLPack, which exports a view's storage without its
    # pending negation; and an output written in place must not be part of autograd.
    t = valid()
    sc = t.sc
    args = (t.table, t.qsl, t.seq_lens, SOFTMAX_SCALE)
    kwargs = dict(num_tokens=sc.num_tokens)
    with pytest.raises(ValueError, match="is_neg") as info:
        dcpmla.cpu.mla_decode(t.q._neg_view(), t.cache, *args, **kwargs)
    assert info.value.argument == "q"
    out = torch.zeros((sc.num_tokens, H, 512), requires_grad=True)
    with pytest.raises(ValueError, match="requires_grad") as info:
        dcpmla.cpu.mla_decode(t.q, t.cache, *args, out=out, **kwargs)
    assert info.value.argument == "out" and not out.detach().any()
