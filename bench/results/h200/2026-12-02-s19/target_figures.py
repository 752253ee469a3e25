# Issue 3's target rows over several gpu_bench JSON runs: per row the min us over runs, the range
# of the medians, and the range of the benchmark's own fractions of the copy and GEMM ceilings
# (median-based, against the ceilings measured in the same run).
#   run: python3 target_figures.py "<glob of gpu_bench JSONs>" [...]
import glob
import json
import sys

runs = [json.load(open(f)) for g in sys.argv[1:] for f in sorted(glob.glob(g))]
ROWS = [('flashmla_table', 128, 8192, 16, 128, 'native', 'bf16', 64),
        ('flashmla_table', 64, 4096, 128, 128, 'native', 'bf16', 64),
        ('flashmla_table', 64, 4096, 128, 256, 'native', 'bf16', 64),
        ('flashmla_table', 64, 4096, 128, 512, 'native', 'bf16', 64),
        ('flashmla_table', 1, 65536, 128, 1, 'native', 'bf16', 64),
        ('ragged_mix', 64, 4096, 128, 285, 'native', 'bf16', 64),
        ('ragged_mix', 64, 32768, 16, 285, 'native', 'bf16', 64),
        ('native_vs_flattened', 16, 32768, 16, 128, 'native', 'bf16', 64),
        ('native_vs_flattened', 16, 32768, 16, 128, 'flattened', 'bf16', 64),
        ('kimi_k3_dcp8', 32, 32768, 96, 32, 'native', 'bf16', 64)]
KEY = ('group', 'B', 'L_local', 'H', 'rows', 'form', 'kv_dtype', 'block_size')
print(f'{len(runs)} runs: ' + ', '.join(f"{r['commit']} {r['date']}" for r in runs))
for row in ROWS:
    rs = [x for r in runs for x in r['results'] if tuple(x[k] for k in KEY) == row]
    fc = [x['frac_copy'] * 100 for x in rs]
    fg = [x['frac_gemm'] * 100 for x in rs]
    md = [x['median_us'] for x in rs]
    print(f"{row[0]:20s} ({row[1]},{row[2]},{row[3]}) rows {row[4]:3d} {row[5]:9s} "
          f"min {min(x['min_us'] for x in rs):7.1f}  median {min(md):7.1f}-{max(md):7.1f}  "
          f"copy {min(fc):5.1f}-{max(fc):5.1f} %  GEMM {min(fg):5.1f}-{max(fg):5.1f} %  "
          f"FlashMLA {rs[0]['flashmla_us']}")
