import csv, sys, collections
def load(fn):
    lines=open(fn).readlines()
    start=[i for i,l in enumerate(lines) if l.startswith('"Address"')][0]
    r=csv.reader(lines[start:]); hdr=next(r)
    return [dict(zip(hdr,row)) for row in r if len(row)>=len(hdr)]
for fn in sys.argv[1:]:
    rows=load(fn)
    c=collections.Counter(); e=collections.Counter()
    for r in rows:
        x=float(r['Instructions Executed'].replace(',','') or 0)
        if x==0: continue
        b=round(x/10000)*10000
        c[b]+=1; e[b]+=x
    print(fn)
    for b,_ in sorted(e.items(), key=lambda kv:-kv[1])[:8]:
        print(f"  ~{b:>9}: {c[b]:5d} instrs, {e[b]/1e6:7.1f}M executed")
