import json,sys,glob,statistics
def load(pat):
    runs=[json.load(open(f))['results'] for f in sorted(glob.glob(pat))]
    out={}
    for run in runs:
        for r in run:
            k=(r['group'],r['B'],r['L_local'],r['H'],r['rows'],r['form'],r['kv_dtype'],r['block_size'])
            out.setdefault(k,[]).append((r['min_us'],r['median_us'],r['work_items']))
    return out
a=load(sys.argv[1]); b=load(sys.argv[2])
print(f"{'shape':58s} {'base min':>9s} {'new min':>9s} {'d%':>6s} {'base med':>9s} {'new med':>9s} {'d%':>6s} items")
for k in a:
    if k not in b: continue
    am=min(x[0] for x in a[k]); bm=min(x[0] for x in b[k])
    ad=min(x[1] for x in a[k]); bd=min(x[1] for x in b[k])
    print(f"{str(k):58s} {am:9.1f} {bm:9.1f} {100*(bm/am-1):6.1f} {ad:9.1f} {bd:9.1f} {100*(bd/ad-1):6.1f} {a[k][0][2]}->{b[k][0][2]}")
