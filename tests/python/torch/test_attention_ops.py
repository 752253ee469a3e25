"""write_kv_ and merge_states_ on CPU tensors against numpy, and the ops traced by
torch.compile(fullgraph=True) through their fake implementations."""

import numpy as np
import pytest
import torch

import dcpmla
from dcpmla.attention_ops import merge_states_, write_kv_

from numpy_reference import merge
from scenarios import SOFTMAX_SCALE, make_scenario, seed_of
from torch_scenarios import TORCH_DTYPES, to_numpy, to_torch, workspace


@pytest.mark.parametrize(
    "latent_dtype,cache_dtype,k_scale",
    [("f32", "f32", 1.0), ("bf16", "bf16", 1.0), ("f32", "fp8", 0.25)],
)
def test_write_kv_stores_latents_at_their_slots(latent_dtype, cache_dtype, k_scale):
    rng = np.random.default_rng(seed_of("write_kv", latent_dtype, cache_dtype))
    cache = torch.full((6, 16, 576), float("nan")).to(TORCH_DTYPES[cache_dtype])
    latent = torch.from_numpy(rng.standard_normal((9, 576)).astype(np.float32))
    latent = latent.to(TORCH_DTYPES[latent_dtype])
    slots = torch.from_numpy(rng.permutation(96)[:9].astype(np.int64))
    slots[[2, 5]] = -1  # tokens another rank owns
    write_kv_(latent, slots, cache, k_scale=k_scale)
    rows = cache.view(-1, 576)
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            want = (latent[i].float() / k_scale).to(cache.dtype)
            assert torch.equal(rows[slot].float(), want.float())
    written = torch.zeros(96, dtype=torch.bool)
    written[slots[slots >= 0]] = True
    assert torch.isnan(rows[~written].float()).all()


def random_states(rng, S, N, H, D, dtype):
    v = torch.from_numpy(rng.standard_normal((S, N, H, D)).astype(np.float32)).to(dtype)
    s = torch.from_numpy((rng.standard_normal((S, N, H)) * 3).astype(np.float32))
    s[0, 0] = float("-inf")  # an empty state is skipped ...
    s[:, 1, 0] = float("-inf")  # ... and a pair without any state is O = 0, LSE = -inf
    v[0, 0] = float("nan")  # the payload behind a zero weight is never read
    return v, s


@pytest.mark.parametrize("S,D,dtype", [(2, 512, torch.float32), (5, 128, torch.bfloat16)])
@pytest.mark.parametrize("lse_base_e", [True, False])
def test_merge_states_matches_numpy(S, D, dtype, lse_base_e):
    rng = np.random.default_rng(seed_of("merge", S, D, str(dtype), lse_base_e))
    N, H = 3, 4
    v, s = random_states(rng, S, N, H, D, dtype)
    v_out = torch.empty((N, H, D), dtype=dtype)
    s_out = torch.empty((N, H))
    merge_states_(v, s, v_out, s_out, lse_base_e=lse_base_e)
    to_e = 1.0 if lse_base_e else np.log(2)
    # The reference multiplies the NaN payload behind the empty state by its zero weight: 0 there.
    payload = v.float().nan_to_num(0.0)
    want_v, want_s = merge([(to_numpy(payload[i]), to_numpy(s[i]) * to_e) for i in range(S)])
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert np.abs(to_numpy(v_out) - want_v).max() <= tolerance
    got_s = to_numpy(s_out) * to_e
    assert (np.isneginf(got_s) == np.isneginf(want_s)).all()
    finite = np.isfinite(want_s)
    # Relative to each finite LSE (the -inf pairs are checked above).
    assert (
        np.abs(got_s[finite] - want_s[finite]) <= 2e-5 * np.maximum(1, np.abs(want_s[finite]))
    ).all()
    assert (to_numpy(v_out)[~finite] == 0).all()


def test_merge_states_keeps_a_nan_state_visible():
    v = torch.ones((2, 1, 1, 8))
    s = torch.tensor([[[0.5]], [[float("nan")]]])
    v_out, s_out = torch.empty((1, 1, 8)), torch.empty((1, 1))
    merge_states_(v, s, v_out, s_out)
    assert torch.isnan(v_out).all() and torch.isnan(s_out).all()


def decode_step(
    latent, slots, q, kv_cache, block_table, schedule, ws, out, lse, merged, merged_lse
):
    """One layer's step as an engine's compiled graph calls the ops: write the new tokens, decode,
    merge the rank's partial with a second state (here the same one: the merge gives it back)."""
    torch.ops.dcpmla.write_kv_(latent, slots, kv_cache)
    torch.ops.dcpmla.mla_decode_(q, kv_cache, block_table, schedule, ws, out, lse, SOFTMAX_SCALE)
    torch.ops.dcpmla.merge_states_(
        torch.stack([out, out]), torch.stack([lse, lse]), merged, merged_lse
    )
    return merged * 2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_traces_the_ops(backend):
    torch._dynamo.reset()
    rng = np.random.default_rng(seed_of("compile"))
    sc = make_scenario(rng, [1, 3], [40, 20], heads=4, block_size=16, q_dtype="f32", padding=1)
    wrapper = dcpmla.BatchMLADecodeWrapper(
        workspace(), 4, 16, torch.bfloat16, num_blocks=sc.caches[0].shape[0]
    )
    wrapper.plan(
        to_torch(sc.query_start_loc),
        to_torch(sc.seq_lens),
        sc.num_tokens,
        softmax_scale=SOFTMAX_SCALE,
    )
    q, table = to_torch(sc.q), to_torch(sc.block_table)
    latent = torch.from_numpy(rng.standard_normal((2, 576)).astype(np.float32))
    unused = (np.isnan(sc.caches[0].astype(np.float32)).all(axis=(1, 2))).nonzero()[0]
    slots = torch.tensor([int(unused[0]) * 16, -1])  # a page no request reads

    def arguments():
        outs = [torch.empty((sc.num_tokens, 4, 512)), torch.empty((sc.num_tokens, 4))]
        merged = [torch.empty((sc.num_tokens, 4, 512)), torch.empty((sc.num_tokens, 4))]
        cache = to_torch(sc.caches[0])
        return (
            latent,
            slots,
            q,
            cache,
            table,
            wrapper.schedule,
            wrapper._workspace,
            *outs,
            *merged,
        )

    eager_args, compiled_args = arguments(), arguments()
    want = decode_step(*eager_args)
    got = torch.compile(decode_step, fullgraph=True, backend=backend)(*compiled_args)
    assert torch.equal(got, want)
    for a, b in zip(eager_args, compiled_args):
        assert torch.equal(a.float().nan_to_num(7.0), b.float().nan_to_num(7.0))  # written in place
