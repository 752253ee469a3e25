#!/usr/bin/env bash
# Session 19, call 2: main a452b19 validated, the closing figures of issue 3:
# scripts/device_gpu.sh (build, GPU tests, benchmark, micro-benchmarks, demo, compute-sanitizer).
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
cd devrun/s19/base && DCPMLA_COMMIT=a452b19 timeout 540 bash scripts/device_gpu.sh
