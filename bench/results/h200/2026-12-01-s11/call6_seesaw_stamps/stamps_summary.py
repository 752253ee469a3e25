# Per-step phases of block 0 of one seesaw launch (SM cycles), from stamps_<index>.txt:
# wait0 = retiring the step's pending MMAs, refill = (warpgroup 0: waiting for warpgroup 1's
# P.V) + issuing the refill of stage i - 1, then own: softmax + publish / other: waiting for P,
# then own: P.V issue / other: waiting for the next tile to land + P.V + S.
import re, statistics, sys
st = {}
for ln in open(sys.argv[1]):
    m = re.match(r'stamp w (\d) i (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)', ln)
    if m:
        st[(int(m[1]), int(m[2]))] = [int(x) for x in m.groups()[2:]]
n = max(i for _, i in st) + 1
for role in ('own', 'other'):
    for w in (0, 1):
        rows = [st[(w, i)] for i in range(8, n - 2) if ((i % 2) == w) == (role == 'own')]
        d = [statistics.mean(e[k + 1] - e[k] for e in rows) for k in range(4)]
        print(f'w {w} {role:5s}: wait0 {d[0]:6.0f} refill {d[1]:6.0f} softmax/P-wait {d[2]:6.0f} '
              f'PV/land+PV+S {d[3]:6.0f}')
for w in (0, 1):
    print(f'w {w} mean step', statistics.mean(st[(w, i + 1)][0] - st[(w, i)][0] for i in range(8, n - 2)))
