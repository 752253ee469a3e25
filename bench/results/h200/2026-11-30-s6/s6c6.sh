#!/usr/bin/env bash
# Session 6 call 6: the final main (v3 decode, PDL merge and padding fill): scripts/device_gpu.sh
# (build, GPU tests, full benchmark, demo, memcheck / racecheck / synccheck), then the
# (1, 65536, 128, 1) shape alone with and without PDL, twice.
set -u
cd "$(dirname "$0")/s6" || exit 1
C=${1:-unknown}
DCPMLA_COMMIT=$C timeout 420 scripts/device_gpu.sh > "$OUT/device_gpu.out" 2>&1
echo "device_gpu.sh rc $?"
cat "$OUT/summary.txt"
mkdir -p "$OUT/pdl"
for rep in 1 2; do
  for v in pdl nopdl; do
    e=(); [ $v = nopdl ] && e=(DCPMLA_NO_PDL=1)
    env "${e[@]}" timeout 30 build-gpu/bench/gpu/dcpmla_gpu_bench --filter flashmla_table --index 9 \
      --commit "$C+$v" --out "$OUT/pdl/${v}_r$rep.json" > "$OUT/pdl/${v}_r$rep.txt" 2>&1
    echo "$v r$rep: $(tail -1 "$OUT/pdl/${v}_r$rep.txt" | cut -c1-130)"
  done
done
cd "$OUT" && mkdir -p more && mv pdl device_gpu.out more/ && tar czf more.tgz more && rm -rf more
