import csv, sys
def load(fn):
    rows=[]
    with open(fn) as f:
        lines=f.readlines()
    start=[i for i,l in enumerate(lines) if l.startswith('"Address"')][0]
    r=csv.reader(lines[start:])
    hdr=next(r)
    for row in r:
        if len(row)<len(hdr): continue
        rows.append(dict(zip(hdr,row)))
    return hdr,rows
hdr,rows=load(sys.argv[1])
stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
def num(x):
    try: return float(x.replace(',',''))
    except: return 0.0
tot=sum(num(r['Warp Stall Sampling (All Samples)']) for r in rows)
ins=sum(num(r['Instructions Executed']) for r in rows)
print('total samples',tot,'instructions executed',ins, 'n',len(rows))
agg={}
for r in rows:
    for s in stalls: agg[s]=agg.get(s,0)+num(r[s])
print(sorted(((round(v/tot*100,1),k) for k,v in agg.items()),reverse=True)[:8])
top=sorted(rows,key=lambda r:-num(r['Warp Stall Sampling (All Samples)']))[:int(sys.argv[2]) if len(sys.argv)>2 else 30]
for r in top:
    s=num(r['Warp Stall Sampling (All Samples)'])
    main=max(stalls,key=lambda k:num(r[k]))
    print(f"{r['Address']:>6} {s/tot*100:5.1f}% {main[6:]:14s} ex={num(r['Instructions Executed']):>10.0f} {r['Source'][:90]}")
