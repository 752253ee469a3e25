# Summarises seesaw stamps (DCPMLA_STAMPS builds of wip/seesaw-stamps): python3 stamps.py
# [--refill-under-pv] <v>_stamps_r<k>.txt... (file names end in ss<kind>..., kind P or S). With
# --refill-under-pv the other warpgroup's points come in the order of DCPMLA_SEESAW_REFILL_UNDER_PV.
import sys, statistics as st, collections
def load(path):
    d = collections.defaultdict(dict)
    for line in open(path):
        w,i,k,c = map(int,line.split())
        d[(w,i)][k]=c
    return d
orders = {'P': {'own':[0,1,2,3,4], 'other':[5,6,7,8,11,12,13,9,10]},
          'S': {'own':[0,1,2,3,4], 'other':[5,6,7,8,9,10,11,12,13]}}
names = {0:'own start',1:'own retired',2:'m,l from other',3:'P published',4:'own P.V issued',
         5:'other start',6:'own P.V(i-1) retired',7:'kRetired (owner P.V(i-1))',8:'refill i+1 issued',
         9:'tile i+1 landed',10:'S(i+1) done',11:'P(i) ready seen',12:'P.V(i) issued',13:'P.V(i) retired'}
args = sys.argv[1:]
if args and args[0] == '--refill-under-pv':
    orders['P']['other'] = [5,6,7,11,12,8,13,9,10]
    args = args[1:]
for path, kind in [(a, a.split('/')[-1][2]) for a in args]:
    d = load(path)
    print('==', path)
    # period: owner step starts, per step i (owner w = i%2)
    starts = {i: d[(i%2,i)].get(0) for i in range(64) if (i%2,i) in d and 0 in d[(i%2,i)]}
    per = [starts[i+1]-starts[i] for i in range(8,56) if i in starts and i+1 in starts]
    print('  tile period (owner step start to next): median %d cycles, mean %.0f' % (st.median(per), st.mean(per)))
    for role in ['own','other']:
        seq = orders[kind][role]
        rows = []
        for i in range(8,56):
            w = i%2 if role=='own' else 1-i%2
            pts = d.get((w,i),{})
            if all(k in pts for k in seq): rows.append(pts)
        print('  %s steps (%d):' % (role, len(rows)))
        for a,b in zip(seq, seq[1:]):
            ds = [r[b]-r[a] for r in rows]
            print('    %-28s -> %-28s median %6d  (p10 %6d, p90 %6d)' % (names[a], names[b], st.median(ds), sorted(ds)[len(ds)//10], sorted(ds)[9*len(ds)//10]))
        tot = [r[seq[-1]]-r[seq[0]] for r in rows]
        print('    total %d' % st.median(tot))
    # cross: other's 'P(i) ready seen' vs owner's 'P published' same step
    lag = []
    for i in range(8,56):
        o = d.get((i%2,i),{}); x = d.get((1-i%2,i),{})
        if 3 in o and 11 in x: lag.append(x[11]-o[3])
    print('  P published (owner) -> seen by other: median %d' % st.median(lag))
    lag=[]
    for i in range(8,56):
        o = d.get((i%2,i),{}); x = d.get((1-i%2,i),{})
        if 0 in o and 5 in x: lag.append(x[5]-o[0])
    print('  other start - owner start, same step: median %d' % st.median(lag))
