"""Comparison of a library result with the float64 numpy reference."""

import numpy as np

from scenarios import tolerances


def assert_matches(out, lse, want_out, want_lse):
    """out / lse within tolerance of the reference; rows the reference sees as empty (and padding
    rows) exactly O = 0, LSE = -inf."""
    out_tol, lse_tol = tolerances(out.dtype)
    lse = np.asarray(lse, dtype=np.float64)
    out = np.asarray(out).astype(np.float64)
    empty = np.isneginf(want_lse)
    np.testing.assert_array_equal(np.isneginf(lse), empty)
    assert (out[empty] == 0).all()
    assert np.isfinite(lse[~empty]).all() and np.isfinite(out).all()
    assert np.abs(lse[~empty] - want_lse[~empty]).max(initial=0) <= lse_tol
    assert np.abs(out - want_out).max(initial=0) <= out_tol
