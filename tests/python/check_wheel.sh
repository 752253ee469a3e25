#!/usr/bin/env bash
# `pip install` of the package as a user gets it: builds the wheel from the source tree (without
# build isolation: install-deps.sh installed the build tools), installs it into a new virtual
# environment that sees this Python's numpy and ml_dtypes, and runs a decode through it from
# outside the tree, against the package's own reference; with torch importable, the same through
# the torch extension.
# Usage: check_wheel.sh PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
python=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
# Without the CUDA backend: its kernels would be compiled a second time for a package check that
# runs on the CPU (the torch extension links them when they are built).
"$python" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps \
  -C cmake.define.DCPMLA_CUDA=OFF --wheel-dir "$work/wheels" "$source"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-index \
  "$work"/wheels/dcpmla-*.whl
cd "$work"
env -u PYTHONPATH "$work/venv/bin/python" - <<'PY'
import numpy as np

import dcpmla

assert dcpmla.__file__.startswith(__import__("sys").prefix), dcpmla.__file__
rng = np.random.default_rng(0)
starts, lens = np.array([0, 3, 4], np.int32), np.array([40, 9], np.int32)
table = np.array([[2, 0, 1], [3, -1, -1]], np.int32)
cache = rng.standard_normal((4, 16, 576)).astype(np.float32)
q = rng.standard_normal((4, 8, 576)).astype(np.float32)
out, lse = dcpmla.cpu.mla_decode(q, cache, table, starts, lens, 0.1352338)
kv = [cache[table[b, : -(-n // 16)]].reshape(-1, 576)[:n] for b, n in enumerate(lens)]
want_out, want_lse = dcpmla.reference_attend(q, kv, starts, lens, 0.1352338)
assert np.abs(out - want_out).max() < 1e-4 and np.abs(lse - want_lse).max() < 2e-4
print(f"dcpmla {dcpmla.__version__} wheel: decode matches the reference")
PY

# The torch extension, when torch was importable at build time (it is in the wheel then).
env -u PYTHONPATH "$work/venv/bin/python" - <<'PY'
import importlib.util
import zipfile
from pathlib import Path

import numpy as np

wheel = next(Path("wheels").glob("dcpmla-*.whl"))
has_torch_ops = "dcpmla/_torch_ops.so" in zipfile.ZipFile(wheel).namelist()
if importlib.util.find_spec("torch") is None:
    print("no torch: the wheel's torch extension is not checked")
    raise SystemExit(0)
assert has_torch_ops, f"{wheel.name} lacks dcpmla/_torch_ops.so though torch is importable"
import torch

import dcpmla

w = dcpmla.BatchMLADecodeWrapper(torch.empty(1 << 20, dtype=torch.uint8), 8, 16, torch.float32,
                                 num_blocks=4)
w.plan(torch.tensor([0, 3, 4]), torch.tensor([40, 9]), softmax_scale=0.1352338)
cache = torch.randn((4, 16, 576))
table = torch.tensor([[2, 0, 1], [3, -1, -1]], dtype=torch.int32)
q = torch.randn((4, 8, 576))
out, lse = w.run(q, cache, table)
kv = [cache[table[b, : -(-n // 16)]].reshape(-1, 576)[:n].numpy() for b, n in enumerate([40, 9])]
starts, lens = np.array([0, 3, 4], np.int32), np.array([40, 9], np.int32)
want_out, want_lse = dcpmla.reference_attend(q.numpy(), kv, starts, lens, 0.1352338)
assert abs(out.numpy() - want_out).max() < 1e-4 and abs(lse.numpy() - want_lse).max() < 2e-4
print(f"dcpmla {dcpmla.__version__} wheel: torch {torch.__version__} decode matches the reference")
PY
