#!/usr/bin/env bash
# Installs what dcpmla needs to build and test on Debian (as root, or through sudo).
# Skips apt entirely when everything is already there. CUDA is optional: with nvcc on PATH
# (or at /usr/local/cuda/bin) the CUDA backend is built as well.
set -euo pipefail
# clang and its runtime libraries (libFuzzer, ASan, UBSan) build the fuzz targets (tests/fuzz).
packages=(cmake ninja-build g++ libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev
          libgmock-dev libbenchmark-dev clang-format clang libclang-rt-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
