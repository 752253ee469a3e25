"""dcpmla.reference_attend (the library's float64 reference) against the numpy one here."""

import numpy as np

import dcpmla

from scenarios import SOFTMAX_SCALE, make_scenario, reference


def test_reference_matches_numpy_in_both_kv_forms():
    rng = np.random.default_rng(5)
    masks = ["causal", "full", "causal"]
    sc = make_scenario(rng, [3, 2, 1], [7, 40, 1], heads=4, block_size=16, padding=2, masks=masks)
    want_out, want_lse = reference(sc)
    for kv in (sc.keys, np.concatenate(sc.keys)):
        out, lse = dcpmla.reference_attend(
            sc.q,
            kv,
            sc.query_start_loc,
            sc.seq_lens,
            SOFTMAX_SCALE,
            num_tokens=sc.num_tokens,
            mask=masks,
        )
        assert out.dtype == np.float64 and out.shape == (sc.num_tokens, 4, 512)
        np.testing.assert_allclose(out, want_out, rtol=0, atol=1e-12)
        np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-12)
        assert (out[-2:] == 0).all() and np.isneginf(lse[-2:]).all()
