"""Loads the torch ops (torch.ops.dcpmla, the extension _torch_ops built against the libtorch
stable ABI), registers their fake implementations for torch.compile, and turns the library's
errors back into the exceptions dcpmla._core raises.

torch keeps the message of an error leaving an op but knows only ValueError and RuntimeError;
the extension records each error's parts, which ``call`` reads back to raise TypeError for dtypes
and to set ``argument``, ``expected``, ``actual`` and ``kind`` on the exception.
"""

from pathlib import Path

import torch

_LIBRARY = Path(__file__).with_name("_torch_ops.so")
if not _LIBRARY.exists():
    raise ImportError(
        f"dcpmla was built without its torch extension ({_LIBRARY.name} is missing): build it "
        "with torch >= 2.11 importable (pip install --no-build-isolation ., or CMake with "
        "DCPMLA_TORCH=ON)"
    )
torch.ops.load_library(str(_LIBRARY))
ops = torch.ops.dcpmla

_TYPES = {"ValueError": ValueError, "TypeError": TypeError, "RuntimeError": RuntimeError}


def library_error(exc):
    """The exception dcpmla._core raises for the library error behind `exc` (or `exc` itself)."""
    type_name, kind, argument, expected, actual, message = ops.last_error()
    if not message or not str(exc).startswith(message):
        return exc
    error = _TYPES[type_name](message)
    error.argument, error.expected, error.actual, error.kind = argument, expected, actual, kind
    return error


def call(op, *args):
    """op(*args) with the library's errors raised as dcpmla._core raises them."""
    try:
        return op(*args)
    except (ValueError, RuntimeError) as exc:
        error = library_error(exc)
        if error is exc:
            raise
        raise error from None


# The ops write their outputs in place and return nothing: their fakes only accept the call.
@torch.library.register_fake("dcpmla::mla_decode_")
def _mla_decode_fake(
    q, kv_cache, block_table, schedule, workspace, out, lse, softmax_scale, q_scale=1.0, k_scale=1.0
):
    return None


@torch.library.register_fake("dcpmla::merge_states_")
def _merge_states_fake(v, s, v_out, s_out, lse_base_e=True):
    return None


@torch.library.register_fake("dcpmla::write_kv_")
def _write_kv_fake(latent, slot_mapping, kv_cache, k_scale=1.0):
    return None
