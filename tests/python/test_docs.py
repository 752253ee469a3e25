"""The Python examples of docs/python.md run as written (one namespace, in order)."""

import importlib.util
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def test_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks
    namespace = {}
    for block in blocks:
        # Examples of the torch part run where torch is installed (install-deps.sh installs it).
        if "import torch" in block and importlib.util.find_spec("torch") is None:
            continue
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["out"].shape == (9, 16, 512)
