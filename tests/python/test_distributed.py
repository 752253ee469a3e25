"""dcpmla.dcp_combine and dcpmla.dcp_gather_heads over torch.distributed: W = 2 and 4 real
processes (gloo), each rank's partial from the library's decode of its shard, merged by both
combine modes and compared with the float64 numpy reference of the whole attention."""

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dcpmla  # noqa: E402
from dcpmla.distributed import merge_partials  # noqa: E402

from checks import assert_matches  # noqa: E402
from scenarios import make_scenario, reference  # noqa: E402
from torch_ranks import run_ranks  # noqa: E402

# Q per request, T per request: ragged, with rows that see no key on some ranks (T < W + Q), and
# padding rows (O = 0, LSE = -inf on every rank).
Q_LENS, SEQ_LENS, PADDING = [8, 1, 3, 2], [100, 40, 3, 2], 2
HEADS = 8


def _scenario(world, q_dtype):
    rng = np.random.default_rng(world)
    return make_scenario(
        rng,
        Q_LENS,
        SEQ_LENS,
        heads=HEADS,
        block_size=16,
        world=world,
        q_dtype=q_dtype,
        kv_dtype="bf16",
        padding=PADDING,
    )


def _combine_matches_reference(rank, world):
    for q_dtype in ("f32", "bf16"):
        sc = _scenario(world, q_dtype)
        heads_local = HEADS // world
        mine = slice(rank * heads_local, (rank + 1) * heads_local)
        want_out, want_lse = reference(sc)
        # The query this rank holds, gathered over heads, equals the whole query.
        q_local = torch.from_numpy(sc.q.astype(np.float32)[:, mine].copy())
        gathered = dcpmla.dcp_gather_heads(q_local)
        np.testing.assert_array_equal(gathered.numpy(), sc.q.astype(np.float32))

        out, lse = sc.decode(rank)
        out_t = torch.from_numpy(np.asarray(out).astype(np.float32))
        if q_dtype == "bf16":
            out_t = out_t.to(torch.bfloat16)
        lse_t = torch.from_numpy(np.asarray(lse))
        for mode in ("ag_rs", "a2a"):
            merged, merged_lse = dcpmla.dcp_combine(out_t, lse_t, mode=mode, return_lse=True)
            assert merged.dtype == out_t.dtype and merged.shape == (sc.num_tokens, heads_local, 512)
            got_out = merged.float().numpy()
            if q_dtype == "bf16":
                # assert_matches takes bf16 tolerances from the dtype
                got_out = got_out.astype(ml_dtypes.bfloat16)
            assert_matches(got_out, merged_lse.numpy(), want_out[:, mine], want_lse[:, mine])
            padding = slice(sc.num_tokens - PADDING, sc.num_tokens)
            assert (merged[padding] == 0).all() and torch.isneginf(merged_lse[padding]).all()
            assert not torch.isnan(merged).any()


def _edge_cases(rank, world):
    n, heads = 3, 2 * world
    out = torch.full((n, heads, 512), float(rank + 1))
    lse = torch.zeros(n, heads)
    lse[0] = float("-inf")  # row 0 empty on every rank
    out[0] = float("nan")  # a garbage payload behind an empty partial never leaks
    if rank == 1:
        lse[1] = float("-inf")  # row 1 empty on rank 1 only
        lse[2, 0] = float("nan")  # a NaN read on rank 1: head 0 of row 2 is NaN everywhere
    for mode in ("ag_rs", "a2a"):
        merged, merged_lse = dcpmla.dcp_combine(out, lse, mode=mode, return_lse=True)
        assert (merged[0] == 0).all() and torch.isneginf(merged_lse[0]).all()
        # Row 1: every rank but 1 contributes its value rank + 1, all with the same weight.
        others = [r + 1 for r in range(world) if r != 1]
        assert torch.allclose(merged[1], torch.tensor(sum(others) / len(others)))
        assert torch.allclose(merged_lse[1], torch.tensor(np.log(world - 1.0), dtype=torch.float32))
        nan_head = rank == 0  # head 0 is rank 0's
        assert torch.isnan(merged[2, 0]).all() == nan_head
        assert torch.isnan(merged_lse[2, 0]) == nan_head
        assert not torch.isnan(merged[2, 1:]).any()

    with pytest.raises(ValueError, match=r"^out \(shape mismatch\).*divisible.*got 3$"):
        dcpmla.dcp_combine(torch.zeros(1, 3, 512), torch.zeros(1, 3), mode="a2a")
    with pytest.raises(ValueError, match=r"^mode \(invalid value\)"):
        dcpmla.dcp_combine(out, lse, mode="allreduce")
    with pytest.raises(ValueError, match=r"^lse \(shape mismatch\)"):
        dcpmla.dcp_combine(out, lse[:, :1].contiguous())
    with pytest.raises(TypeError, match=r"^lse \(dtype mismatch\).*float32"):
        dcpmla.dcp_combine(out, lse.double())
    with pytest.raises(ValueError, match=r"^q_local \(shape mismatch\)"):
        dcpmla.dcp_gather_heads(torch.zeros(3, 576))
    with pytest.raises(ValueError, match=r"^q_local \(shape mismatch\).*576"):
        dcpmla.dcp_gather_heads(torch.zeros(3, 2, 512))
    with pytest.raises(ValueError, match=r"^out \(shape mismatch\).*512"):
        dcpmla.dcp_combine(torch.zeros(n, heads, 7), lse)
    with pytest.raises(ValueError, match=r"^lse \(invalid argument\).*device"):
        dcpmla.dcp_combine(out, lse.to("meta"))
    # A group this rank is not in (every rank creates it; only rank 0 joins).
    outside = torch.distributed.new_group([0])
    if rank != 0:
        with pytest.raises(ValueError, match=r"^group \(invalid argument\).*not a member"):
            dcpmla.dcp_combine(out, lse, group=outside)


def _rank_checks(rank, world):
    _combine_matches_reference(rank, world)
    _edge_cases(rank, world)


# One group per world size runs every check (starting the processes is most of the time).
@pytest.mark.parametrize("world", [2, 4])
def test_combine_over_ranks(world):
    run_ranks(_rank_checks, world)


def test_merge_matches_spec_vectors():
    # SPEC 6: O=[1,0], L=ln 3 with O=[0,1], L=0 -> O=[0.75, 0.25], L=ln 4.
    out = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    merged, lse = merge_partials(out, torch.tensor([np.log(3.0), 0.0]))
    assert torch.allclose(merged, torch.tensor([0.75, 0.25])) and abs(lse - np.log(4)) < 1e-6
    empty = torch.tensor([[1.0, 0.0], [123.0, float("nan")]])
    merged, lse = merge_partials(empty, torch.tensor([np.log(3.0), float("-inf")]))
    assert torch.equal(merged, torch.tensor([1.0, 0.0])) and abs(lse - np.log(3)) < 1e-6
    merged, lse = merge_partials(empty, torch.tensor([float("-inf")] * 2))
    assert torch.equal(merged, torch.zeros(2)) and torch.isneginf(lse)
    merged, lse = merge_partials(out, torch.tensor([np.log(3.0), float("nan")]))
    assert torch.isnan(merged).all() and torch.isnan(lse)
