"""Every bad argument raises the right exception naming the argument: TypeError for a dtype (or a
non-array), ValueError for a shape, layout, value or inconsistency; nothing is copied to make an
argument fit."""

import ml_dtypes
import numpy as np
import pytest

import dcpmla

from scenarios import make_scenario


def noncontiguous(a):
    """The same values and shape, every other element of a wider array along the last axis."""
    return np.repeat(a, 2, axis=-1)[..., ::2]


def misaligned(a):
    """The same values and shape at an address one byte past an element boundary."""
    raw = np.zeros(a.nbytes + 1, np.uint8)[1:]
    view = raw.view(a.dtype).reshape(a.shape)
    view[...] = a
    return view


def read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


@pytest.fixture(scope="module")
def case():
    sc = make_scenario(np.random.default_rng(0), [2, 1], [20, 9], heads=4, block_size=16)
    return {
        "q": sc.q,  # [3, 4, 576] float32
        "kv_cache": sc.caches[0],  # [num_blocks, 16, 576] bfloat16
        "block_table": sc.block_table,  # [2, 2] int32
        "query_start_loc": sc.query_start_loc,
        "seq_lens": sc.seq_lens,
        "softmax_scale": 0.1,
    }


def expect(error, argument, call):
    with pytest.raises(error) as info:
        call()
    assert info.value.argument == argument, str(info.value)
    assert str(info.value).startswith(argument + " ("), str(info.value)


def overlapping_out_and_q(case):
    """q and out over one buffer."""
    q = case["q"]
    buffer = np.empty(q.size, np.float32)
    shared_q = buffer.reshape(q.shape)
    shared_q[...] = q
    return {"q": shared_q, "out": buffer[: q.shape[0] * 4 * 512].reshape(q.shape[0], 4, 512)}


def lse_inside_out(case):
    out = np.empty((3, 4, 512), np.float32)
    return {"out": out, "lse": out.reshape(-1)[:12].reshape(3, 4)}


# (what is wrong, changes to the good call, exception, argument named)
BAD_DECODE = [
    ("q float64", lambda c: {"q": c["q"].astype(np.float64)}, TypeError, "q"),
    ("q int32", lambda c: {"q": c["q"].astype(np.int32)}, TypeError, "q"),
    ("q a list", lambda c: {"q": [[1.0]]}, TypeError, "q"),
    ("q rows", lambda c: {"q": c["q"][:2]}, ValueError, "q"),
    ("q 2-D", lambda c: {"q": c["q"][:, 0]}, ValueError, "q"),
    ("q 512 wide", lambda c: {"q": c["q"][..., :512].copy()}, ValueError, "q"),
    ("q non-contiguous", lambda c: {"q": noncontiguous(c["q"])}, ValueError, "q"),
    ("q misaligned", lambda c: {"q": misaligned(c["q"])}, ValueError, "q"),
    (
        "kv_cache float16",
        lambda c: {"kv_cache": c["kv_cache"].astype(np.float16)},
        TypeError,
        "kv_cache",
    ),
    (
        "kv_cache e5m2",
        lambda c: {"kv_cache": c["kv_cache"].astype(ml_dtypes.float8_e5m2)},
        TypeError,
        "kv_cache",
    ),
    (
        "kv_cache width",
        lambda c: {"kv_cache": c["kv_cache"][..., :512].copy()},
        ValueError,
        "kv_cache",
    ),
    (
        "kv_cache non-contiguous",
        lambda c: {"kv_cache": noncontiguous(c["kv_cache"])},
        ValueError,
        "kv_cache",
    ),
    (
        "kv_cache misaligned",
        lambda c: {"kv_cache": misaligned(c["kv_cache"])},
        ValueError,
        "kv_cache",
    ),
    (
        "block_table int64",
        lambda c: {"block_table": c["block_table"].astype(np.int64)},
        TypeError,
        "block_table",
    ),
    (
        "block_table rows",
        lambda c: {"block_table": c["block_table"][:1]},
        ValueError,
        "block_table",
    ),
    (
        "block_table columns",
        lambda c: {"block_table": c["block_table"][:, :0].copy()},
        ValueError,
        "block_table row 0",
    ),
    (
        "block_table id",
        lambda c: {"block_table": np.array([[99, 0], [1, -1]], np.int32)},
        ValueError,
        "block_table[0][0]",
    ),
    (
        "block_table missing id",
        lambda c: {"block_table": np.array([[0, -1], [1, -1]], np.int32)},
        ValueError,
        "block_table[0][1]",
    ),
    (
        "query_start_loc float",
        lambda c: {"query_start_loc": np.array([0.0, 2, 3])},
        TypeError,
        "query_start_loc",
    ),
    (
        "query_start_loc length",
        lambda c: {"query_start_loc": np.array([0, 3])},
        ValueError,
        "query_start_loc",
    ),
    (
        "query_start_loc start",
        lambda c: {"query_start_loc": np.array([1, 2, 3])},
        ValueError,
        "query_start_loc[0]",
    ),
    (
        "query_start_loc empty request",
        lambda c: {"query_start_loc": np.array([0, 3, 3])},
        ValueError,
        "query_start_loc[2]",
    ),
    (
        "query_start_loc big-endian",
        lambda c: {"query_start_loc": c["query_start_loc"].astype(">i4")},
        TypeError,
        "query_start_loc",
    ),
    ("seq_lens float", lambda c: {"seq_lens": np.array([20.0, 9.0])}, TypeError, "seq_lens"),
    ("seq_lens 2-D", lambda c: {"seq_lens": np.array([[20, 9]])}, ValueError, "seq_lens"),
    (
        "seq_lens shorter than Q",
        lambda c: {"seq_lens": np.array([1, 9])},
        ValueError,
        "seq_lens[0]",
    ),
    ("seq_lens negative", lambda c: {"seq_lens": np.array([20, -4])}, ValueError, "seq_lens[1]"),
    (
        "seq_lens beyond int32",
        lambda c: {"seq_lens": np.array([2**40, 9])},
        ValueError,
        "seq_lens[0]",
    ),
    (
        "seq_lens beyond the table",
        lambda c: {"seq_lens": np.array([20, 99])},
        ValueError,
        "block_table row 1",
    ),
    ("num_tokens too few", lambda c: {"num_tokens": 2}, ValueError, "num_tokens"),
    ("num_tokens float", lambda c: {"num_tokens": 3.0}, TypeError, "num_tokens"),
    ("softmax_scale 0", lambda c: {"softmax_scale": 0.0}, ValueError, "softmax_scale"),
    ("softmax_scale nan", lambda c: {"softmax_scale": float("nan")}, ValueError, "softmax_scale"),
    ("softmax_scale str", lambda c: {"softmax_scale": "0.1"}, TypeError, "softmax_scale"),
    ("softmax_scale huge int", lambda c: {"softmax_scale": 10**400}, ValueError, "softmax_scale"),
    ("k_scale for bf16", lambda c: {"k_scale": 0.5}, ValueError, "k_scale"),
    ("dcp_world_size 0", lambda c: {"dcp_world_size": 0}, ValueError, "dcp_world_size"),
    ("dcp_rank = W", lambda c: {"dcp_world_size": 2, "dcp_rank": 2}, ValueError, "dcp_rank"),
    (
        "dcp_interleave 3",
        lambda c: {"dcp_world_size": 2, "dcp_interleave": 3},
        ValueError,
        "dcp_interleave",
    ),
    ("mask word", lambda c: {"mask": "sideways"}, ValueError, "mask"),
    ("mask count", lambda c: {"mask": ["causal"]}, ValueError, "mask"),
    ("mask int", lambda c: {"mask": 3}, TypeError, "mask"),
    ("mask entry", lambda c: {"mask": ["causal", 1]}, TypeError, "mask[1]"),
    ("out float16", lambda c: {"out": np.empty((3, 4, 512), np.float16)}, TypeError, "out"),
    (
        "out bf16 for f32 q",
        lambda c: {"out": np.empty((3, 4, 512), ml_dtypes.bfloat16)},
        TypeError,
        "out",
    ),
    ("out shape", lambda c: {"out": np.empty((3, 4, 576), np.float32)}, ValueError, "out"),
    (
        "out read-only",
        lambda c: {"out": read_only(np.empty((3, 4, 512), np.float32))},
        ValueError,
        "out",
    ),
    (
        "out non-contiguous",
        lambda c: {"out": noncontiguous(np.empty((3, 4, 512), np.float32))},
        ValueError,
        "out",
    ),
    (
        "out misaligned",
        lambda c: {"out": misaligned(np.empty((3, 4, 512), np.float32))},
        ValueError,
        "out",
    ),
    ("out over q", overlapping_out_and_q, ValueError, "out"),
    ("lse float64", lambda c: {"lse": np.empty((3, 4))}, TypeError, "lse"),
    ("lse shape", lambda c: {"lse": np.empty((3, 8), np.float32)}, ValueError, "lse"),
    ("lse inside out", lse_inside_out, ValueError, "lse"),
]


@pytest.mark.parametrize(
    "change,error,argument", [b[1:] for b in BAD_DECODE], ids=[b[0] for b in BAD_DECODE]
)
def test_mla_decode_names_the_bad_argument(case, change, error, argument):
    expect(error, argument, lambda: dcpmla.cpu.mla_decode(**{**case, **change(case)}))


def step_args(case, world=2):
    args = {**case, "world": world, "kv_caches": [case["kv_cache"]] * world}
    del args["kv_cache"]
    return args


BAD_STEP = [
    ("combine", {"combine": "allreduce"}, ValueError, "combine"),
    ("combine None", {"combine": None}, TypeError, "combine"),
    ("world 0", {"world": 0, "kv_caches": []}, ValueError, "world"),
    ("cache count", {"world": 4}, ValueError, "kv_caches"),
    ("heads per rank", {"world": 3, "kv_caches": "three"}, ValueError, "q"),
    ("kv_caches not a sequence", {"kv_caches": 5}, TypeError, "kv_caches"),
]


@pytest.mark.parametrize(
    "change,error,argument", [b[1:] for b in BAD_STEP], ids=[b[0] for b in BAD_STEP]
)
def test_dcp_step_simulated_names_the_bad_argument(case, change, error, argument):
    args = {**step_args(case), **change}
    if args["kv_caches"] == "three":
        args["kv_caches"] = [case["kv_cache"]] * 3
    expect(error, argument, lambda: dcpmla.cpu.dcp_step_simulated(**args))


def test_dcp_step_simulated_names_the_rank_cache_that_differs(case):
    cache = case["kv_cache"]
    for other, error in ((cache.astype(np.float32), TypeError), (cache[:, :8].copy(), ValueError)):
        args = {**step_args(case), "kv_caches": [cache, other]}
        expect(error, "kv_caches[1]", lambda args=args: dcpmla.cpu.dcp_step_simulated(**args))


def test_helpers_name_the_bad_argument():
    lens = np.array([10, 7])
    expect(ValueError, "rank", lambda: dcpmla.dcp_local_seq_lens(lens, 4, rank=4))
    expect(ValueError, "interleave", lambda: dcpmla.dcp_local_seq_lens(lens, 4, interleave=0))
    expect(ValueError, "seq_lens[1]", lambda: dcpmla.dcp_local_seq_lens(np.array([3, -1]), 2))
    expect(TypeError, "seq_lens", lambda: dcpmla.dcp_local_seq_lens([3.5], 2))
    table = np.array([[0, 1]], np.int32)
    one = np.array([0])
    expect(ValueError, "req_indices[0]", lambda: dcpmla.slot_mapping(table, one + 1, one, 16))
    expect(ValueError, "positions", lambda: dcpmla.slot_mapping(table, one, np.array([0, 1]), 16))
    expect(ValueError, "block_table[0]", lambda: dcpmla.slot_mapping(table, one, one + 40, 16))
    expect(ValueError, "block_size", lambda: dcpmla.slot_mapping(table, one, one, 0))
    expect(ValueError, "seq_lens[0]", lambda: dcpmla.row_bounds(np.array([0, 3]), np.array([2])))


def test_reference_attend_names_the_bad_argument(case):
    q, starts, lens = case["q"], case["query_start_loc"], case["seq_lens"]
    kv = np.zeros((29, 576))
    expect(ValueError, "kv", lambda: dcpmla.reference_attend(q, kv[:28], starts, lens, 0.1))
    expect(ValueError, "kv", lambda: dcpmla.reference_attend(q, [kv[:20]], starts, lens, 0.1))
    expect(
        ValueError,
        "kv[1]",
        lambda: dcpmla.reference_attend(q, [kv[:20], kv[:8]], starts, lens, 0.1),
    )
    expect(ValueError, "q", lambda: dcpmla.reference_attend(q[:2], kv, starts, lens, 0.1))
    expect(ValueError, "q", lambda: dcpmla.reference_attend(q[0], kv, starts, lens, 0.1))
    expect(TypeError, "q", lambda: dcpmla.reference_attend(None, kv, starts, lens, 0.1))
    expect(TypeError, "q", lambda: dcpmla.reference_attend(q + 1j, kv, starts, lens, 0.1))
    expect(TypeError, "kv", lambda: dcpmla.reference_attend(q, kv + 1j, starts, lens, 0.1))
    # seq_lens is checked before it sizes kv.
    expect(TypeError, "seq_lens", lambda: dcpmla.reference_attend(q, kv, starts, None, 0.1))
    expect(TypeError, "seq_lens", lambda: dcpmla.reference_attend(q, kv, starts, "29", 0.1))
    expect(ValueError, "seq_lens", lambda: dcpmla.reference_attend(q, kv, starts, [lens], 0.1))


def test_messages_show_what_was_found(case):
    big_endian = {**case, "query_start_loc": case["query_start_loc"].astype(">i4")}
    with pytest.raises(TypeError, match="non-native byte order \\('>i4'\\)"):
        dcpmla.cpu.mla_decode(**big_endian)
    reversed_q = {**case, "q": case["q"][::-1]}
    with pytest.raises(ValueError, match=r"strides \(-2304, 576, 1\)"):
        dcpmla.cpu.mla_decode(**reversed_q)


def test_dcp_step_simulated_refuses_an_output_over_a_rank_cache(case):
    caches = [case["kv_cache"].astype(np.float32) for _ in range(2)]
    out = caches[1].reshape(-1)[: 3 * 4 * 512].reshape(3, 4, 512)
    args = {**step_args(case), "kv_caches": caches, "out": out}
    expect(ValueError, "out", lambda: dcpmla.cpu.dcp_step_simulated(**args))
    with pytest.raises(ValueError, match=r"kv_caches\[1\]"):
        dcpmla.cpu.dcp_step_simulated(**args)
