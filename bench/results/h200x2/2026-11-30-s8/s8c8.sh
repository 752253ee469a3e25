#!/usr/bin/env bash
# Session 8 call 8 (2 H200s): main at 1ccc585, the session's last commit with code. scripts/device_multigpu.sh
# (build; every multi-GPU suite incl. the multi-process peer join; demos over NCCL and peer;
# breakdown at 32K x 32 over both).
set -u
cd "$(dirname "$0")/s8/main" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export NCCL_NVLS_ENABLE=0
R=$OUT
log() { echo "== [${SECONDS}s] $*" | tee -a "$R/summary.txt"; }
mkdir -p "$R/mg"
OUT="$R/mg" DCPMLA_COMMIT=1ccc585 DCPMLA_STEPS="build tests demo breakdown" DCPMLA_BUDGET_S=300 timeout 310 bash scripts/device_multigpu.sh > "$R/mg/device_multigpu.out" 2>&1
log "device_multigpu rc $?"
grep -E "tests passed|Failed|FAIL" "$R/mg/device_multigpu.out" | head
grep -E "^ 2 " "$R/mg/device_multigpu.out" | cut -c1-150
cat "$R/summary.txt"
bash ../../../scripts/pack_outputs.sh "$R"
