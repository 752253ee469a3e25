#!/usr/bin/env bash
# Session 8 call 9 (2 H200s): main at 5d00dc2. Build, then the new multi-GPU test (each rank's whole
# DCP step captured in a CUDA graph and replayed, over NCCL and peer), then the whole DCP suite.
set -u
cd "$(dirname "$0")/s8/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg"
OUT="$R/mg" DCPMLA_COMMIT=5d00dc2 DCPMLA_STEPS="build" timeout 200 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "build rc $?"
T=build-multigpu/tests/nccl/nccl_dcp_test
timeout 120 $T --gtest_filter='*WholeStepCaptured*' > "$R/graph_test.log" 2>&1; log "graph test rc $?"; tail -15 "$R/graph_test.log"
timeout 200 $T > "$R/dcp_suite.log" 2>&1; log "DCP suite rc $? $(tail -1 $R/dcp_suite.log)"
grep -E "OK|FAILED" "$R/dcp_suite.log" | tail -14
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
