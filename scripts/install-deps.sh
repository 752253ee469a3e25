#!/usr/bin/env bash
# Installs what dcpmla needs to build and test on Debian (as root, or through sudo): Debian
# packages with apt, then the Python packages of the Python module and its tests with pip.
# Skips apt and pip entirely when everything is already there. CUDA is optional: with nvcc on
# PATH the CUDA backend is built as well.
set -euo pipefail
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"

# clang and its runtime libraries (libFuzzer, ASan, UBSan) build the fuzz targets (tests/fuzz).
packages=(cmake ninja-build g++ libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev
          libgmock-dev libbenchmark-dev clang-format clang libclang-rt-dev)
# The Python module needs an interpreter with its headers, pip and venv (the wheel test); a
# Python already on PATH, e.g. pyenv's, is used as it is.
if ! command -v python3 >/dev/null; then
  packages+=(python3 python3-dev python3-pip python3-venv)
elif [ "$(command -v python3)" = /usr/bin/python3 ]; then
  packages+=(python3-dev python3-pip python3-venv)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages (module -> PyPI name) of the build (nanobind; scikit-build-core for
# `pip install .`; torch for the torch extension, whose stable ABI needs >= 2.11), of the tests
# (numpy, ml_dtypes, pytest) and of dcpmla.dcp_combine and the serving harness (torch;
# transformers, the oracle, at the version the harness is tested with; tqdm, matplotlib).
# find_spec and the installed metadata look the modules up without importing them, so the check
# is fast when all are there.
mapfile -t missing < <(python3 - <<'PY'
import importlib.metadata
import importlib.util
modules = {"numpy": "numpy", "nanobind": "nanobind", "scikit_build_core": "scikit-build-core",
           "pytest": "pytest", "ml_dtypes": "ml_dtypes", "torch": "torch==2.11.0",
           "transformers": "transformers==5.25.0", "tqdm": "tqdm", "matplotlib": "matplotlib"}
for module, package in modules.items():
    if importlib.util.find_spec(module) is None:
        print(package)
    elif module == "torch":
        version = importlib.metadata.version("torch").split("+")[0].split(".")
        if tuple(int(v) for v in version[:2]) < (2, 11):
            print(package)
PY
)
if [ ${#missing[@]} -gt 0 ]; then
  pip_flags=(--quiet --disable-pip-version-check)
  # Debian's own Python refuses pip installs into it unless told (PEP 668).
  if python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(
      os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")))'; then
    pip_flags+=(--break-system-packages)
  fi
  python_cmd=(python3)
  [ -n "$sudo_cmd" ] && [ "$(command -v python3)" = /usr/bin/python3 ] && python_cmd=(sudo python3)
  "${python_cmd[@]}" -m pip install "${pip_flags[@]}" "${missing[@]}"
fi
