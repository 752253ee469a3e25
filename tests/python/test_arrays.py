"""Arrays are used in place: outputs given are written and returned, DLPack-only objects work,
and a refused call writes nothing."""

import numpy as np
import pytest

import dcpmla

from scenarios import SOFTMAX_SCALE, make_scenario


class DlpackOnly:
    """An array known only through the DLPack protocol, as a framework's tensor is."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def small_case(kv_dtype="f32"):
    sc = make_scenario(
        np.random.default_rng(2), [2, 1], [20, 9], heads=4, block_size=16, kv_dtype=kv_dtype
    )
    return sc, (sc.block_table, sc.query_start_loc, sc.seq_lens, SOFTMAX_SCALE)


def test_given_outputs_are_written_in_place_and_returned():
    sc, batch = small_case()
    want_out, want_lse = dcpmla.cpu.mla_decode(sc.q, sc.caches[0], *batch)
    out = np.full((3, 4, 512), 7.0, np.float32)
    lse = np.full((3, 4), 7.0, np.float32)
    got_out, got_lse = dcpmla.cpu.mla_decode(sc.q, sc.caches[0], *batch, out=out, lse=lse)
    assert got_out is out and got_lse is lse
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)


def test_dlpack_only_arrays_are_read_and_written_in_place():
    sc, batch = small_case()
    want_out, want_lse = dcpmla.cpu.mla_decode(sc.q, sc.caches[0], *batch)
    out = np.zeros((3, 4, 512), np.float32)
    lse = np.zeros((3, 4), np.float32)
    dcpmla.cpu.mla_decode(
        DlpackOnly(sc.q), DlpackOnly(sc.caches[0]), *batch, out=DlpackOnly(out), lse=DlpackOnly(lse)
    )
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)
    # Outputs for a DLPack query are allocated from its dtype and shape.
    got_out, _ = dcpmla.cpu.mla_decode(DlpackOnly(sc.q), sc.caches[0], *batch)
    assert got_out.dtype == np.float32
    np.testing.assert_array_equal(got_out, want_out)


def test_a_refused_call_writes_nothing():
    sc, (table, starts, _, scale) = small_case()
    out = np.full((3, 4, 512), 7.0, np.float32)
    lse = np.full((3, 4), 7.0, np.float32)
    bad_lens = np.array([20, 99], np.int32)  # request 1 needs blocks its row does not have
    with pytest.raises(ValueError):
        dcpmla.cpu.mla_decode(sc.q, sc.caches[0], table, starts, bad_lens, scale, out=out, lse=lse)
    assert (out == 7).all() and (lse == 7).all()


def test_read_only_inputs_are_accepted():
    sc, batch = small_case("bf16")
    q, cache = sc.q.copy(), sc.caches[0].copy()
    q.flags.writeable = cache.flags.writeable = False
    out, _ = dcpmla.cpu.mla_decode(q, cache, *batch)
    np.testing.assert_array_equal(out, dcpmla.cpu.mla_decode(sc.q, sc.caches[0], *batch)[0])
