#!/usr/bin/env bash
# Session 12 call 11 (one H200): the final main (the launch-plan order rebuilt without a vector
# per work item) validated by scripts/device_gpu.sh.
set -u
cd "$(dirname "$0")/s12" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
R=$OUT
(cd head && OUT="$R/head_gpu" DCPMLA_COMMIT="$(cat ../COMMIT)" timeout 240 bash scripts/device_gpu.sh > "$R/head_device_gpu.out" 2>&1; echo "head device_gpu rc $?" >> "$R/summary.txt")
cat "$R/head_gpu/summary.txt" >> "$R/summary.txt" 2>/dev/null
bash ../../scripts/pack_outputs.sh "$R"
