#!/usr/bin/env bash
# Session 17, call 8: main f7dffd1 (the last-wave cut) validated: scripts/device_gpu.sh (build,
# GPU tests, benchmark, micro-benchmarks, demo, compute-sanitizer).
set -u
export PATH="/usr/local/cuda/bin:$PATH"
OUT=${OUT:-$PWD/gpu-out}
cd devrun/s17/base && DCPMLA_COMMIT=f7dffd1 timeout 280 bash scripts/device_gpu.sh
