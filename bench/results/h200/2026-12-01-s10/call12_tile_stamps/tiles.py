# Per-tile S-done times (median over blocks, us from the first block's entry) from ps_*.txt.
import statistics as st
import sys

for f in sys.argv[1:]:
    base, S = {}, {}
    for line in open(f):
        r = line.split()
        if line.startswith("stamp"):
            base[int(r[2])] = (int(r[4]), int(r[8]))
        elif line.startswith("tiles") and r[3] == "s":
            S[int(r[2])] = list(map(int, r[4:20]))
    t0 = min(v[0] for v in base.values())
    print(f, "decode end median %.1f us" % st.median([(v[1] - t0) / 1e3 for v in base.values()]))
    print("  S done:", " ".join("%.2f" % st.median([(S[b][i] - t0) / 1e3 for b in S]) for i in range(16)))
    print("  dS    :", " ".join("%.2f" % st.median([(S[b][i] - S[b][i - 1]) / 1e3 for b in S]) for i in range(1, 16)))
