#!/usr/bin/env python3
"""Timing diagnostics of the v3 decode kernel: edits a source snapshot (scripts/snapshot.sh) so
that a part of each tile's work is left out, for scripts/device_ab.sh to time against the
unedited snapshot. The results are wrong by design (some also race); only the time means
anything. Before a device call, a variant's own cuda_tc_emulation_test shows it ends (its
checks fail, as they must, but no barrier deadlocks). Each edit replaces exact text and fails if that text is not found once, so a kernel
that changed since an edit was written stops the script instead of timing something else.

  run: scripts/diag_variants.py SNAPSHOT_DIR EDIT[,EDIT...]
  e.g. scripts/snapshot.sh devrun/s19 nomma main
       scripts/diag_variants.py devrun/s19/nomma nopv,nos

Edits (bench/NOTES.md, session 18, has what they measured on main 7768784):
  nopv      the output warpgroups issue no P.V wgmma (barriers, waits and refills kept)
  nos       the scores warpgroup issues no S wgmma (its chunk-set waits kept) and its scores
            are zeros (ptxas then spills ~200 bytes). Without the zeros (session 18, calls 6-9)
            the scores were whatever the registers held, and the same SASS timed -30 % in one
            call and +14 % in another (rescales and factors follow the garbage)
  noexp     the softmax without its exp2 (P = S scale - m)
  nomax     the softmax without the row max over a tile's scores
  nofence   no proxy fence before P's publication (races)
  norefill  bulk refills replaced by a bare arrival on the stage's mbarrier: tiles 2 and later
            reuse what the stage holds (the threads' copies of partial tiles are kept)
"""
import pathlib
import sys

KERNEL = "src/cuda/decode_ws_kernel.cuh"
REFILL = "src/cuda/decode_ws_refill.cuh"

EDITS = {
    "nopv": [(KERNEL,
              "        hopper::wgmma_m64n256k16_ss_tb(o, desc_p + ks * 2, desc_v + ks * (16 * 128 >> 4), true);",
              "        (void)desc_v;  // DIAGNOSTIC: no P.V")],
    "nos": [(KERNEL,
             "        hopper::wgmma_m64n64k16_ss(acc, desc_q + off, desc_k + off, ks > 0);",
             "        if (ks == 0) hopper::pin_registers(acc);  // DIAGNOSTIC: no S\n"
             "        (void)off;"),
            (KERNEL,
             "    float s[32];\n",
             "    float s[32];\n"
             "#pragma unroll\n"
             "    for (int k = 0; k < 32; ++k) s[k] = 0.0f;  // DIAGNOSTIC: scores of zero\n")],
    "noexp": [(KERNEL,
               "const float p0 = fast_exp2(fmaf(s[4 * j + 2 * r], scale_log2, -m_use[r]));",
               "const float p0 = fmaf(s[4 * j + 2 * r], scale_log2, -m_use[r]);  // DIAGNOSTIC"),
              (KERNEL,
               "const float p1 = fast_exp2(fmaf(s[4 * j + 2 * r + 1], scale_log2, -m_use[r]));",
               "const float p1 = fmaf(s[4 * j + 2 * r + 1], scale_log2, -m_use[r]);")],
    "nomax": [(KERNEL,
               "          mx[r] = fmaxf(mx[r], fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));",
               "          (void)j;  // DIAGNOSTIC: no row max")],
    "nofence": [(KERNEL,
                 "      hopper::fence_proxy_async_shared();\n"
                 "      named_barrier_arrive(kPReady, kThreads);",
                 "      named_barrier_arrive(kPReady, kThreads);  // DIAGNOSTIC: no proxy fence")],
    "norefill": [(REFILL,
                  "      if (Loader::issuer(p)) ld.issue_bulk(p, next_rows, sm.stage(i), sm.full_bar(i & 1, ld.og));",
                  "      // DIAGNOSTIC: no refill (the stage keeps what it holds)\n"
                  "      if ((threadIdx.x & 127) == 0) hopper::mbarrier_arrive(sm.full_bar(i & 1, ld.og));")],
}


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    names = [n for n in sys.argv[2].split(",") if n]
    unknown = [n for n in names if n not in EDITS]
    if unknown or not names:
        print(f"diag_variants: unknown edit(s) {unknown}; expected some of {sorted(EDITS)}",
              file=sys.stderr)
        return 2
    for name in names:
        for rel, old, new in EDITS[name]:
            path = root / rel
            text = path.read_text()
            if text.count(old) != 1:
                print(f"diag_variants: edit {name}: expected its text once in {path}, "
                      f"found it {text.count(old)} times", file=sys.stderr)
                return 1
            path.write_text(text.replace(old, new))
    return 0


if __name__ == "__main__":
    sys.exit(main())
