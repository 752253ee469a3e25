"""Output arrays a call allocates when the caller passes none."""

import ml_dtypes
import numpy as np

from dcpmla import _core

# The query dtypes the library takes; the output of a decode defaults to the query's.
_QUERY_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def attention_outputs(q, out, lse):
    """out [rows, heads, 512] (q's dtype) and lse [rows, heads] float32 for q [rows, heads, 576].

    An argument given is returned as it is. When q is not a 3-D float32 or bfloat16 array nothing
    is allocated: the library then reports q's problem, naming it.
    """
    if out is not None and lse is not None:
        return out, lse
    try:
        dtype_name, shape = _core.array_signature(q, "q")
    except TypeError:
        return out, lse
    if len(shape) != 3 or dtype_name not in _QUERY_DTYPES:
        return out, lse
    rows, heads = shape[0], shape[1]
    if out is None:
        out = np.empty((rows, heads, _core.LATENT_DIM), dtype=_QUERY_DTYPES[dtype_name])
    if lse is None:
        lse = np.empty((rows, heads), dtype=np.float32)
    return out, lse
