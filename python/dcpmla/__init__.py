"""dcpmla: MLA (DeepSeek latent attention) decode under decode context parallelism (DCP) with
speculative decoding.

The numpy path runs the library's CPU backend on numpy arrays or any DLPack array, in place:

- ``dcpmla.cpu.mla_decode``: one rank's decode (with W > 1, the rank-local partial result);
- ``dcpmla.cpu.dcp_step_simulated``: a whole DCP step of W ranks simulated as threads;
- ``dcpmla.reference_attend``: the library's double-precision reference;
- sharding helpers: ``dcp_local_seq_lens``, ``slot_mapping``, ``step_positions``, ``row_bounds``;
- with torch: ``dcp_combine`` and ``dcp_gather_heads`` over a torch.distributed process group
  (``dcpmla.distributed``, imported on first use so that the numpy path needs no torch).

The torch path (built when torch >= 2.11 is importable at build time; imported on first use, so
the package works without torch): ``dcpmla.BatchMLADecodeWrapper`` (plan once, run many, CUDA
graphs) and ``dcpmla.attention_ops`` (the ops ``torch.ops.dcpmla.mla_decode_``,
``merge_states_``, ``write_kv_``).

Semantics: docs/spec.md. Bad arguments raise ValueError (values, shapes, layouts), TypeError
(dtypes) or RuntimeError (what cannot run), naming the argument; the exception's ``argument``,
``expected``, ``actual`` and ``kind`` attributes hold the parts of the message.
"""

from dcpmla import cpu
from dcpmla._core import HEAD_DIM, LATENT_DIM, ROPE_DIM, Plan, __version__
from dcpmla.reference import reference_attend
from dcpmla.sharding import dcp_local_seq_lens, row_bounds, slot_mapping, step_positions

# Imported on first use: they import torch (module, or the module holding the name).
_TORCH_ATTRIBUTES = {
    "BatchMLADecodeWrapper": "dcpmla.decode_wrapper",
    "attention_ops": None,
    "dcp_combine": "dcpmla.distributed",
    "dcp_gather_heads": "dcpmla.distributed",
}


def __getattr__(name):
    if name not in _TORCH_ATTRIBUTES:
        raise AttributeError(f"module 'dcpmla' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(_TORCH_ATTRIBUTES[name] or f"dcpmla.{name}")
    return module if _TORCH_ATTRIBUTES[name] is None else getattr(module, name)


# The star import takes the numpy path only: the torch names would import torch (and need it).
__all__ = [
    "HEAD_DIM",
    "LATENT_DIM",
    "ROPE_DIM",
    "Plan",
    "__version__",
    "cpu",
    "dcp_local_seq_lens",
    "reference_attend",
    "row_bounds",
    "slot_mapping",
    "step_positions",
]
