"""Skip markers of the serving tests: the torch extension, and a CUDA GPU with it."""

import pytest
import torch


def torch_ops_built():
    try:
        from dcpmla import attention_ops  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


torch_ops = pytest.mark.skipif(not torch_ops_built(), reason="the torch extension is not built")
cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch_ops_built()),
    reason="needs a CUDA GPU and the torch extension",
)
