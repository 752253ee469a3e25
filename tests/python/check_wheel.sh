#!/usr/bin/env bash
# `pip install` of the package as a user gets it: builds the wheel from the source tree (without
# build isolation: install-deps.sh installed the build tools), installs it into a new virtual
# environment that sees this Python's numpy and ml_dtypes, and runs a decode through it from
# outside the tree, against the package's own reference.
# Usage: check_wheel.sh PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
python=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$python" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps \
  --wheel-dir "$work/wheels" "$source"
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
