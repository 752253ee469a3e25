import sys,statistics as st
for f in sys.argv[1:]:
    rows=[l.split() for l in open(f) if l.startswith('stamp')]
    # stamp label b n t0 t1 t2 t3 t4
    d=[(int(r[2]),int(r[3]),*map(int,r[4:9])) for r in rows]
    t0min=min(x[2] for x in d)
    ends=[x[6]-t0min for x in d]
    def q(v): v=sorted(v); return f"min {v[0]/1e3:6.2f} med {v[len(v)//2]/1e3:6.2f} max {v[-1]/1e3:6.2f}"
    print(f, "blocks", len(d), "tiles/block", sorted(set(x[1] for x in d))[:5])
    print("  start offset   ", q([x[2]-t0min for x in d]))
    print("  prologue       ", q([x[3]-x[2] for x in d]))
    print("  first S done   ", q([x[4]-x[3] for x in d]))
    print("  loop (after S0)", q([x[5]-x[4] for x in d]))
    print("  per tile       ", q([(x[5]-x[4])/max(1,x[1]-1) for x in d]))
    print("  epilogue       ", q([x[6]-x[5] for x in d]))
    print("  end offset     ", q(ends))
