"""The library's double-precision reference attention, for checking any implementation."""

import numpy as np

from dcpmla import _core
from dcpmla._scalars import argument_error, optional_index, real


def _float64(array):
    """array as a C-contiguous float64 numpy array (a converted copy: this is the reference)."""
    if not isinstance(array, np.ndarray) and hasattr(array, "__dlpack__"):
        array = np.from_dlpack(array)
    return np.ascontiguousarray(np.asarray(array), dtype=np.float64)


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
    if isinstance(kv, (list, tuple)):
        per_request = [_float64(x) for x in kv]
    else:
        lens = np.asarray(seq_lens, dtype=np.int64)
        latents = _float64(kv)
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
        _float64(q),
        per_request,
        query_start_loc,
        seq_lens,
        real(softmax_scale, "softmax_scale"),
        optional_index(num_tokens, "num_tokens"),
        mask,
    )
