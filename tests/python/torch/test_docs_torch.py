"""The torch examples of docs/python.md run as written (one namespace, in order): the
"python torch" blocks on the CPU, then the "python cuda" blocks where a GPU runs them."""

import re
from pathlib import Path

import torch

DOC = Path(__file__).resolve().parents[3] / "docs" / "python.md"


def blocks(kind):
    return re.findall(rf"```python {kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_torch_examples_run():
    assert blocks("torch") and blocks("cuda")
    namespace = {}
    for block in blocks("torch"):
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["o"].shape == (9, 16, 512) and namespace["lse"].shape == (9, 16)
    assert torch.isfinite(namespace["lse"]).all()  # rank 1 owns a position every row sees
    assert torch.allclose(namespace["merged_lse"], namespace["lse"] + torch.log(torch.tensor(2.0)))
    usable = (
        torch.cuda.is_available()
        and torch.ops.dcpmla.has_cuda_backend()
        and torch.cuda.get_device_capability(0) == (9, 0)
    )
    if usable:
        for block in blocks("cuda"):
            exec(compile(block, str(DOC), "exec"), namespace)
