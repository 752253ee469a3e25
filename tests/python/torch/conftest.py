"""The torch tests: they import torch and the extension dcpmla._torch_ops. Under ctest
(DCPMLA_TORCH_TESTS=1) a missing extension fails them; elsewhere they skip without torch."""

import os
import sys
from pathlib import Path

import pytest

# The shared helpers of tests/python (scenarios, reference, checks).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

if os.environ.get("DCPMLA_TORCH_TESTS") != "1":
    pytest.importorskip("torch")
    try:
        import dcpmla._torch_library  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"no torch extension: {exc}", allow_module_level=True)
