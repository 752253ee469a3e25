"""The library's double-precision reference attention, for checking any implementation."""

import numpy as np

from dcpmla import _core
from dcpmla._scalars import argument_error, optional_index, real


def _float64(array, argument):
    """array as a C-contiguous float64 numpy array (a converted copy: this is the reference)."""
    if not isinstance(array, np.ndarray) and hasattr(array, "__dlpack__"):
        array = np.from_dlpack(array)
    array = np.asarray(array)
    if array.dtype.kind not in "iuf" and array.dtype.name not in ("bfloat16", "float8_e4m3fn"):
        raise argument_error(
            TypeError, argument, "dtype mismatch", "an array of real numbers", array.dtype
        )
    return np.ascontiguousarray(array, dtype=np.float64)


def _lengths(seq_lens):
    """seq_lens as a 1-D int64 numpy array, checked before it sizes anything."""
    lens = np.asarray(seq_lens)
    if lens.dtype.kind not in "iu":
        raise argument_error(
            TypeError, "seq_lens", "dtype mismatch", "an integer array [B]", lens.dtype
        )
    if lens.ndim != 1:
        raise argument_error(ValueError, "seq_lens", "shape mismatch", "shape [B]", lens.shape)
    return lens.astype(np.int64)


def reference_attend(
    q, kv, query_start_loc, seq_lens, softmax_scale, *, num_tokens=None, mask=None
):
    """Exact MLA attention in global coordinates (no sharding, no paging); returns
    (out [N, H, 512] float64, lse [N, H] float64, natural log).

    q: [N, H, 576]. kv: every request's latents in position order, one [seq_lens[b], 576] array a
    request or all of them concatenated, [sum(seq_lens), 576]. Inputs of any real dtype are
    converted to float64: pass the values a cache holds (an fp8 cache's values times k_scale).
    Padding rows (past query_start_loc[B], up to num_tokens) are O = 0, LSE = -inf.
    """
    lens = _lengths(seq_lens)
    queries = _float64(q, "q")
    if queries.ndim != 3:
        raise argument_error(ValueError, "q", "shape mismatch", "shape [N, H, 576]", queries.shape)
    if isinstance(kv, (list, tuple)):
        per_request = [_float64(x, f"kv[{b}]") for b, x in enumerate(kv)]
    else:
        latents = _float64(kv, "kv")
        if latents.ndim != 2 or latents.shape[0] != lens.sum():
            raise argument_error(
                ValueError,
                "kv",
                "shape mismatch",
                f"shape ({lens.sum()}, {_core.HEAD_DIM}) ([sum(seq_lens), 576]) or one array a "
                "request",
                latents.shape,
            )
        per_request = np.split(latents, np.cumsum(lens)[:-1])
    return _core.reference_attend(
        queries,
        per_request,
        query_start_loc,
        seq_lens,
        real(softmax_scale, "softmax_scale"),
        optional_index(num_tokens, "num_tokens"),
        mask,
    )
