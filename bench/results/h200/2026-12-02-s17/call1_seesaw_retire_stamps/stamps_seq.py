# Generic seesaw stamp summary: per role (own / other), the points in observed time order
# (the most common order over steps 8-55) with median cycles between consecutive points.
import sys, statistics as st, collections
names = {0:'own start',1:'own retired',2:'m,l from other',3:'P published',4:'own P.V issued',
         5:'other start',6:'own P.V(i-1) retired',7:'kRetired (owner P.V(i-1))',8:'refill i+1 issued',
         9:'tile i+1 landed',10:'S(i+1) done',11:'P(i) ready seen',12:'P.V(i) issued',13:'P.V(i) retired'}
for path in sys.argv[1:]:
    d = collections.defaultdict(dict)
    for line in open(path):
        w,i,k,c = map(int,line.split()); d[(w,i)][k]=c
    print('==', path)
    starts = {i: d[(i%2,i)].get(0) for i in range(64) if 0 in d.get((i%2,i),{})}
    per = [starts[i+1]-starts[i] for i in range(8,56) if i in starts and i+1 in starts]
    print('  tile period: median %d cycles' % st.median(per))
    for role in ['own','other']:
        orders = collections.Counter()
        rows = []
        for i in range(8,56):
            w = i%2 if role=='own' else 1-i%2
            pts = d.get((w,i),{})
            if not pts: continue
            seq = tuple(sorted(pts, key=lambda k: pts[k]))
            orders[seq]+=1; rows.append(pts)
        seq = orders.most_common(1)[0][0]
        rows = [r for r in rows if all(k in r for k in seq)]
        print('  %s (%d steps, order seen in %d):' % (role, len(rows), orders[seq]))
        for a,b in zip(seq, seq[1:]):
            ds = sorted(r[b]-r[a] for r in rows)
            print('    %-28s -> %-28s median %6d (p10 %6d, p90 %6d)' % (names[a], names[b], st.median(ds), ds[len(ds)//10], ds[9*len(ds)//10]))
        print('    total %d' % st.median([r[seq[-1]]-r[seq[0]] for r in rows]))
