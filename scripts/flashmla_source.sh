#!/usr/bin/env bash
# Makes the FlashMLA source tree that scripts/device_vs_flashmla.sh builds and times: FlashMLA
# 9241ae3 (the commit every FlashMLA figure in bench/results/ used) with its CUTLASS submodule
# 147f567, reduced to the dense bf16 sm90 decode, its split combine and its scheduler metadata,
# with a setup_dense.py that builds only those (about 80 s on 16 cores).
#
#   run: scripts/flashmla_source.sh FLASHMLA_GIT CUTLASS_GIT [OUT_DIR]
#
# FLASHMLA_GIT and CUTLASS_GIT are git directories holding those commits (bare mirrors or
# clones of github.com/deepseek-ai/FlashMLA and github.com/NVIDIA/cutlass). OUT_DIR (default
# .flashmla, ignored by git; ~30 MB) is then taken along to the GPU machine.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 FLASHMLA_GIT CUTLASS_GIT [OUT_DIR]" >&2
  exit 2
fi
flashmla_git=$1 cutlass_git=$2 out=${3:-.flashmla}
flashmla_commit=9241ae3ef9bac614dd25e45e507e089f888280e0
cutlass_commit=147f5673d0c1c3dcf66f78d677fd647e4a020219 # FlashMLA's csrc/cutlass at that commit

rm -rf "$out"
mkdir -p "$out/csrc/cutlass"
git -C "$flashmla_git" archive "$flashmla_commit" | tar -x -C "$out"
git -C "$cutlass_git" archive "$cutlass_commit" include tools/util/include |
  tar -x -C "$out/csrc/cutlass"

# The extension's only entry: FlashMLA's dense decode interface (dense_decode.h), bound as
# flash_mla.cuda.dense_decode_fwd.
cat > "$out/csrc/api/api_dense.cpp" << 'EOF'
#include <pybind11/pybind11.h>

#include "dense_decode.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("dense_decode_fwd", &dense_attn_decode_interface, "dense sm90 decode");
}
EOF

# CUDA 13 keeps CCCL under include/cccl, which the host compiler needs too.
cat > "$out/setup_dense.py" << 'EOF'
"""Builds flash_mla.cuda with the dense sm90 decode only (bf16, sm_90a)."""

import os
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension

root = Path(__file__).resolve().parent
cuda = Path(CUDA_HOME or "/usr/local/cuda")
common = ["-O3", "-std=c++20", "-DNDEBUG", "-DFLASH_MLA_DISABLE_FP16",
          "-Wno-deprecated-declarations"]
nvcc = common + [
    "-D_USE_MATH_DEFINES", "--expt-relaxed-constexpr", "--expt-extended-lambda",
    "--use_fast_math", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-gencode", "arch=compute_90a,code=sm_90a", "--threads", str(min(8, os.cpu_count() or 1)),
]
sources = [
    "csrc/api/api_dense.cpp",
    "csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu",
    "csrc/smxx/decode/combine/combine.cu",
    "csrc/sm90/decode/dense/instantiations/bf16.cu",
]
includes = [root / "csrc", root / "csrc/kerutils/include", root / "csrc/sm90",
            root / "csrc/cutlass/include", root / "csrc/cutlass/tools/util/include",
            cuda / "include/cccl"]
setup(
    name="flash_mla",
    packages=["flash_mla"],
    ext_modules=[CUDAExtension("flash_mla.cuda", sources, include_dirs=[str(p) for p in includes],
                               extra_compile_args={"cxx": common, "nvcc": nvcc})],
    cmdclass={"build_ext": BuildExtension},
)
EOF
echo "FlashMLA $flashmla_commit (dense sm90 decode only) in $out"
