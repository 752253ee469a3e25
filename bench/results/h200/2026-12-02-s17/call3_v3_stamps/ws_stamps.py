# v3 stamps (wip/late-half DCPMLA_STAMPS): per warpgroup, median cycles between its points over
# tiles [A, B) (--tiles A-B; 8-55 by default, 16-23 for call 5's stamps kept in shared memory), and
# a timeline of one tile period relative to the scores warpgroup's "P(i) published".
import sys, statistics as st, collections
args = sys.argv[1:]
lo, hi = 8, 55
if args and args[0] == '--tiles':
    lo, hi = map(int, args[1].split('-'))
    args = args[2:]
names = {0: {0:'S(i) done, softmax starts',1:'softmax done',2:'kPFree passed',3:'P(i) published',
             4:'kOIssued passed',5:'S(i+1) issued',6:'S(i+1) done',7:'set0(i+1) landed',8:'set1(i+1) landed'},
         1: {0:'top',1:'read ahead/before_p',2:'P(i) ready seen',3:'(kSDone)',4:'P.V(i) issued',
             5:'P.V(i) done',6:'refill issued'}}
for path in args:
    d = collections.defaultdict(dict)
    for line in open(path):
        w,i,k,c = map(int,line.split()); d[(w,i)][k]=c
    print('==', path)
    per=[d[(0,i+1)][3]-d[(0,i)][3] for i in range(lo,hi) if 3 in d[(0,i)] and 3 in d[(0,i+1)]]
    print('  period (P published to next): median %d' % st.median(per))
    for w in range(3):
        nm = names[min(w,1)]
        seq = sorted(nm)
        rows=[d[(w,i)] for i in range(lo,hi) if all(k in d[(w,i)] for k in seq)]
        if w==0:
            seq=[0,1,2,3,4,7,8,5,6]
        print('  warpgroup %d (%d tiles)' % (w,len(rows)))
        for a,b in zip(seq,seq[1:]):
            ds=sorted(r[b]-r[a] for r in rows)
            print('    %-26s -> %-26s %6d (p10 %6d p90 %6d)' % (nm[a],nm[b],st.median(ds),ds[len(ds)//10],ds[9*len(ds)//10]))
    print('  timeline relative to scores P(i) published (median over tiles):')
    ev=[]
    for w in range(3):
        for k in names[min(w,1)]:
            for di in (0,1):
                ds=[d[(w,i+di)][k]-d[(0,i)][3] for i in range(lo,hi) if k in d[(w,i+di)] and 3 in d[(0,i)]]
                if ds: ev.append((st.median(ds),w,k,di))
    for t,w,k,di in sorted(ev):
        if -500 < t < 4500: print('    %6d  wg%d %s%s' % (t,w,names[min(w,1)][k], ' (tile i+1)' if di else ''))
