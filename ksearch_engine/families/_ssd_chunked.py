"""Chunked Mamba-2 SSD as three kernels (CUDA and Metal from one source through `Dialect`; fp32, CUDA-core math).

The sequence is cut into chunks of T steps; a chunk c of head h has the cumulative log-decay
ac_t = sum_{s<=t} dt_s A_h (t within the chunk). With u_t = dt_t x_t:
  1. `states`, two kinds of threadgroups in one launch:
     - one per (batch, chunk, head): ac by a warp scan, then the chunk's end state from a zero start,
       S_c[n][p] = sum_t exp(ac_end - ac_t) dt_t B_t[n] x_t[p]  (an N x P GEMM over the T steps), and the
       chunk's total decay exp(ac_end);
     - one per (batch, chunk, group): the chunk's scores (C B^T)^T[s][t] = B_s . C_t (a T x T GEMM over N),
       computed once for all the heads of the group instead of once per head.
  2. `carry` (one thread per (batch, head, n, p)): the state entering each chunk,
     hin_0 = 0, hin_(c+1) = exp(ac_end,c) hin_c + S_c  (NC steps; the loads are issued 8 chunks at a time).
  3. `output` (one threadgroup per (batch, chunk, head)): ac again; the scores masked and decayed into threadgroup
     memory, Gm[t][s] = (C_t . B_s) exp(ac_t - ac_s) for s <= t, else 0; then
     y[t][p] = sum_s Gm[t][s] u_s[p] + exp(ac_t) sum_n C_t[n] hin[n][p] + D x_t[p]: one T x P GEMM whose
     reduction runs over the T steps of the chunk (k-tiles above a thread's rows skipped) and then the N states.
Every GEMM is register-tiled: a thread owns TM x TN outputs (rows ty * TM + i, columns tx * TN + j; RX = 16
thread columns, RY = threads / 16 rows; TM, TN multiples of 4, read as float4 in CUDA), operands staged KT
reduction steps at a time through threadgroup memory, zero-filled past the edges so the inner loop has no bounds
checks. Steps past the end of the sequence read as dt = 0 (no decay, no input) and their outputs are not written.

ssd.chunked_mma (CUDA only; its Metal twin is ssd.chunked_kernels) runs the same three GEMMs on tensor cores:
warps in a WM x WN grid, each owning 16 rows and FN 8-column tiles, mma.sync m16n8k8 tf32 with fp32 accumulation,
every operand split into tf32 hi + lo and multiplied as lo*hi + hi*lo + hi*hi (3xTF32: about fp32 precision; one
tf32 product alone misses the task's 3e-4 tolerance). The staged k-tiles are stored already split (hi and lo
planes); the scores operand (threadgroup GmT) is split per k-step. Tile rows are padded by 8 words so the
fragment reads are conflict-free.

Knobs: chunk (T), warps (threads = 32 * warps), k_tile (KT).
"""
from __future__ import annotations

from ._mma import TF32_HEADER
from ._src import Dialect, header, kernel_ctor, tag

INPUTS = ["x", "dt", "A", "B", "C", "D"]


def chunked_valid(k: dict) -> bool:
    return k["chunk"] in (16, 32, 64) and k["warps"] in (2, 4, 8) and k["k_tile"] in (8, 16) and k["chunk"] % k["k_tile"] == 0


def _cmin(a: str, b: str) -> str:
    return f"(({a}) < ({b}) ? ({a}) : ({b}))"


def _shared(d: Dialect, decl: str) -> str:
    """A threadgroup array; 16-byte aligned in CUDA, where the GEMMs read it as float4."""
    return d.shared(decl) if d.metal else f"__shared__ __align__(16) {decl};"


def _load4(d: Dialect, dst: str, count: str, addr: str) -> str:
    """dst[0..count) = threadgroup floats at addr.. (count and addr multiples of 4): float4 reads in CUDA."""
    if d.metal:
        return f"for (int q = 0; q < {count}; ++q) {dst}[q] = {addr.replace('@', 'q')};"
    a4 = addr.replace("@", "4 * q")
    return (f"#pragma unroll\n      for (int q = 0; q < {count} / 4; ++q) {{ const float4 v = *reinterpret_cast<const float4*>(&{a4}); "
            f"{dst}[4 * q] = v.x; {dst}[4 * q + 1] = v.y; {dst}[4 * q + 2] = v.z; {dst}[4 * q + 3] = v.w; }}")


def _tiles(d: Dialect, mma: bool, a: str, b: str) -> list[str]:
    """The staged k-tiles: As, Bs (floats), or for tensor cores their tf32 hi and lo planes Ah, Al, Bh, Bl."""
    if mma and not d.metal:
        return [_shared(d, f"unsigned {n}[{sz}]") for n, sz in (("Ah", a), ("Al", a), ("Bh", b), ("Bl", b))]
    return [_shared(d, f"float As[{a}]"), _shared(d, f"float Bs[{b}]")]


class _Gemm:
    """Text of one register-tiled GEMM C[M][NN] (+)= sum over segments of A_seg[m][k] B_seg[k][n].

    A thread owns rows m0 + ty * TM + i and columns n0 + tx * TN + j (TM, TN multiples of 4: float4 reads of
    the staged tiles As[k][m], Bs[k][n], rows padded by 4 floats)."""

    def __init__(self, d: Dialect, name: str, M: str, NN: str, tm_cap: int = 16, tn_cap: int = 8, mma: bool = False):
        self.d, self.p, self.M, self.NN = d, name, M, NN
        self.tm_cap, self.tn_cap = tm_cap, tn_cap
        self.mma = mma and not d.metal

    def consts(self) -> list[str]:
        p = self.p
        if self.mma:
            # warps WM x WN; a warp owns 16 rows and FN 8-column tiles (m16n8k8 fragments); rows padded by 8
            # floats so that the fragment reads (rows q, q + 4 of a k-step, 8 consecutive columns) hit 32 banks
            return [f"constexpr int {p}WM = {_cmin('NW', f'({self.M} + 15) / 16')};",
                    f"constexpr int {p}WN = NW / {p}WM;",
                    f"constexpr int {p}FN = {_cmin(f'(({self.NN} + 7) / 8 + {p}WN - 1) / {p}WN', '8')};",
                    f"constexpr int {p}MS = 16 * {p}WM;", f"constexpr int {p}NS = 8 * {p}FN * {p}WN;",
                    f"constexpr int {p}LDA = {p}MS + 8;", f"constexpr int {p}LDB = {p}NS + 8;"]
        tm = _cmin(f"({self.M} + RY - 1) / RY", str(self.tm_cap))
        tn = _cmin(f"({self.NN} + RX - 1) / RX", str(self.tn_cap))
        return [f"constexpr int {p}TM = (({tm}) + 3) / 4 * 4;",
                f"constexpr int {p}TN = (({tn}) + 3) / 4 * 4;",
                f"constexpr int {p}MS = RY * {p}TM;", f"constexpr int {p}NS = RX * {p}TN;",
                f"constexpr int {p}LDA = {p}MS + 4;", f"constexpr int {p}LDB = {p}NS + 4;"]

    def body(self, segments: list[dict], epilogue: list[str]) -> list[str]:
        """segments: dicts with K (C expression), a and b: ("stage", load(k, m) -> expr, k_fastest), or for A
        ("smem", address(m, k) -> expr with contiguous m, None); optional skip: a condition on k0 and the
        thread's rows (mlo, mhi) under which this thread's products of the k-tile are all zero.
        Epilogue lines see VAL (the result), row m and column n."""
        d, p = self.d, self.p
        unroll = "" if d.metal else "#pragma unroll"
        L = [f"for (int m0 = 0; m0 < {self.M}; m0 += {p}MS) {{",
             f"for (int n0 = 0; n0 < {self.NN}; n0 += {p}NS) {{"]
        if self.mma:
            L += [f"  float acc[{p}FN][4];",
                  f"  #pragma unroll\n  for (int f = 0; f < {p}FN; ++f) {{ acc[f][0] = 0.0f; acc[f][1] = 0.0f; acc[f][2] = 0.0f; acc[f][3] = 0.0f; }}",
                  f"  const int wr = (tid >> 5) % {p}WM; const int wc = (tid >> 5) / {p}WM;",
                  "  const int lg = (tid & 31) >> 2; const int lq = tid & 3;",
                  f"  const int mlo = m0 + 16 * wr; const int mhi = mlo + 15; const int nw = n0 + 8 * {p}FN * wc;"]
        else:
            L += [f"  float acc[{p}TM][{p}TN];",
                  f"  {unroll}\n  for (int i = 0; i < {p}TM; ++i)\n    {unroll}\n    for (int j = 0; j < {p}TN; ++j) acc[i][j] = 0.0f;",
                  f"  const int mlo = m0 + ty * {p}TM; const int mhi = mlo + {p}TM - 1;"]
        for seg in segments:
            K = seg["K"]
            staged = []
            for which, spec, rows, tile, ld in (("a", seg["a"], f"{p}MS", "As", f"{p}LDA"),
                                                ("b", seg["b"], f"{p}NS", "Bs", f"{p}LDB")):
                mode, fn, kfast = spec
                if mode == "stage":
                    staged.append((which, fn, kfast, rows, tile, ld))
            # each thread holds its share of the next k-tile in registers while the current one is multiplied
            L += ["  {"]
            for which, fn, kfast, rows, tile, ld in staged:
                L += [f"  constexpr int R{which} = (KT * {rows} + NTH - 1) / NTH;", f"  float r{which}[R{which}];"]

            def fetch(kexpr: str) -> list[str]:
                out = []
                for which, fn, kfast, rows, tile, ld in staged:
                    base = "m0" if which == "a" else "n0"
                    lim = self.M if which == "a" else self.NN
                    idx = "const int kk = e % KT; const int mm = e / KT;" if kfast else \
                          f"const int mm = e % {rows}; const int kk = e / {rows};"
                    out += [f"    {unroll}", f"    for (int r = 0; r < R{which}; ++r) {{",
                            f"      const int e = tid + r * NTH; {idx}",
                            f"      const int gk = {kexpr} + kk; const int gm = {base} + mm;",
                            f"      r{which}[r] = (e < KT * {rows} && gk < {K} && gm < {lim}) ? ({fn('gk', 'gm')}) : 0.0f;",
                            "    }"]
                return out

            L += fetch("0")
            L += [f"  for (int k0 = 0; k0 < {K}; k0 += KT) {{"]
            for which, fn, kfast, rows, tile, ld in staged:
                idx = "const int kk = e % KT; const int mm = e / KT;" if kfast else \
                      f"const int mm = e % {rows}; const int kk = e / {rows};"
                L += [f"    {unroll}", f"    for (int r = 0; r < R{which}; ++r) {{",
                      f"      const int e = tid + r * NTH; {idx}",
                      (f"      if (e < KT * {rows}) {{ unsigned hi, lo; ks_split(hi, lo, r{which}[r]); "
                       f"{tile[0]}h[kk * {ld} + mm] = hi; {tile[0]}l[kk * {ld} + mm] = lo; }}") if self.mma else
                      f"      if (e < KT * {rows}) {tile}[kk * {ld} + mm] = r{which}[r];",
                      "    }"]
            L += [f"    {d.barrier()}", f"    if (k0 + KT < {K}) {{"] + ["  " + x for x in fetch("(k0 + KT)")] + ["    }"]
            if seg.get("skip"):
                L += [f"    if (!({seg['skip']})) {{"]
            amode, afn, _ = seg["a"]
            if self.mma:
                # staged tiles hold the operands already split (hi, lo planes); A from a plain smem array is
                # split here, once per k-step for all FN tiles
                frag = (("mlo + lg", "k8 + lq"), ("mlo + lg + 8", "k8 + lq"), ("mlo + lg", "k8 + lq + 4"),
                        ("mlo + lg + 8", "k8 + lq + 4"))
                L += ["    #pragma unroll", "    for (int k8 = 0; k8 < KT; k8 += 8) {",
                      "      unsigned ah[4], al[4];"]
                for i, (mrow, kcol) in enumerate(frag):
                    if amode == "stage":
                        a_ = f"({kcol}) * {p}LDA + {mrow} - m0"
                        L.append(f"      ah[{i}] = Ah[{a_}]; al[{i}] = Al[{a_}];")
                    else:
                        L.append(f"      ks_split(ah[{i}], al[{i}], {afn(mrow, f'k0 + {kcol}')});")
                b0 = f"(k8 + lq) * {p}LDB + nw - n0 + 8 * f + lg"
                b1 = f"(k8 + lq + 4) * {p}LDB + nw - n0 + 8 * f + lg"
                L += [f"      #pragma unroll\n      for (int f = 0; f < {p}FN; ++f) {{",
                      "        unsigned bh[2], bl[2];",
                      f"        bh[0] = Bh[{b0}]; bl[0] = Bl[{b0}]; bh[1] = Bh[{b1}]; bl[1] = Bl[{b1}];",
                      "        ks_mma1688(acc[f], al, bh); ks_mma1688(acc[f], ah, bl); ks_mma1688(acc[f], ah, bh);",
                      "      }", "    }"]
            else:
                L += [f"    {unroll}", "    for (int kk = 0; kk < KT; ++kk) {",
                      f"      float av[{p}TM]; float bv[{p}TN];"]
                aaddr = f"As[kk * {p}LDA + ty * {p}TM + @]" if amode == "stage" else afn("mlo + @", "k0 + kk")
                L += ["      " + _load4(d, "av", f"{p}TM", aaddr),
                      "      " + _load4(d, "bv", f"{p}TN", f"Bs[kk * {p}LDB + tx * {p}TN + @]"),
                      f"      {unroll}\n      for (int i = 0; i < {p}TM; ++i)",
                      f"        {unroll}\n        for (int j = 0; j < {p}TN; ++j) acc[i][j] += av[i] * bv[j];",
                      "    }"]
            if seg.get("skip"):
                L += ["    }"]
            L += [f"    {d.barrier()}", "  }", "  }"]
        if self.mma:
            L += [f"  #pragma unroll\n  for (int f = 0; f < {p}FN; ++f) {{", "    #pragma unroll\n    for (int r = 0; r < 4; ++r) {",
                  "      const int m = mlo + lg + 8 * (r >> 1); const int n = nw + 8 * f + 2 * lq + (r & 1);"]
            L += ["      " + e.replace("VAL", "acc[f][r]") for e in epilogue]
        else:
            L += [f"  {unroll}\n  for (int i = 0; i < {p}TM; ++i) {{", "    const int m = mlo + i;",
                  f"    {unroll}\n    for (int j = 0; j < {p}TN; ++j) {{", f"      const int n = n0 + tx * {p}TN + j;"]
            L += ["      " + e.replace("VAL", "acc[i][j]") for e in epilogue]
        L += ["    }", "  }", "}", "}"]
        return L


def _consts(k: dict) -> list[str]:
    return [
        f"constexpr int TCH = {k['chunk']}; constexpr int NTH = {32 * k['warps']}; constexpr int KT = {k['k_tile']};",
        "constexpr int RX = 16; constexpr int RY = NTH / RX; constexpr int NW = NTH / 32;",
        "constexpr int SPL = (TCH + 31) / 32;          // scan elements per lane",
    ]


def _scan(d: Dialect) -> list[str]:
    """The chunk's dt (dts) and cumulative log-decay (ac) in threadgroup memory (b, c, hh, t0 set)."""
    return [
        "if (tid < 32) {                                // warp 0: inclusive scan of dt * A over the chunk",
        "  const float ah = A[hh];",
        "  float v[SPL]; float s = 0.0f;",
        "  for (int i = 0; i < SPL; ++i) {",
        "    const int j = tid * SPL + i;",
        "    const float dl = (j < TCH && t0 + j < SEQ) ? dt[((size_t)b * SEQ + t0 + j) * NH + hh] : 0.0f;",
        "    if (j < TCH) dts[j] = dl;",
        "    s += dl * ah; v[i] = s;",
        "  }",
        "  float inc = s;",
        "  for (int o = 1; o < 32; o *= 2) {",
        f"    const float up = {d.shfl('inc', '(tid >= o ? tid - o : tid)')};",
        "    if (tid >= o) inc += up;",
        "  }",
        "  const float ex = inc - s;",
        "  for (int i = 0; i < SPL; ++i) { const int j = tid * SPL + i; if (j < TCH) ac[j] = ex + v[i]; }",
        "}",
        d.barrier(),
    ]


def _states(kind: str, k: dict, mma: bool = False) -> str:
    """Blocks [0, BATCH*NC*NH): a chunk's end state and decay; then BATCH*NC*NG blocks: (C B^T)^T of a chunk."""
    d = Dialect(kind)
    gs = _Gemm(d, "S_", "NST", "HP", mma=mma)
    gc = _Gemm(d, "Q_", "TCH", "TCH", tm_cap=8, tn_cap=8, mma=mma)
    L = _consts(k) + gs.consts() + gc.consts() + [
        "constexpr int AMS = S_LDA > Q_LDA ? S_LDA : Q_LDA;",
        "constexpr int BNS = S_LDB > Q_LDB ? S_LDB : Q_LDB;",
        *_tiles(d, mma, "KT * AMS", "KT * BNS"),
        d.shared("float dts[TCH]"), d.shared("float ac[TCH]"), d.shared("float w[TCH]"),
        f"const int tid = {d.tid()};", "const int tx = tid % RX; const int ty = tid / RX;",
        f"const int blk = {d.bid('x')};",
        "constexpr int NSB = BATCH * NC * NH;",
        "if (blk < NSB) {",
        "const int hh = blk % NH; const int c = (blk / NH) % NC; const int b = blk / (NH * NC);",
        "const int grp = hh / (NH / NG);", "const int t0 = c * TCH;",
    ] + _scan(d) + [
        "const float aend = ac[TCH - 1];",
        f"for (int i = tid; i < TCH; i += NTH) w[i] = {d.exp('aend - ac[i]')} * dts[i];",
        f"if (tid == 0) cd[blk] = {d.exp('aend')};",
        d.barrier(),
        "const size_t row0 = (size_t)b * SEQ + t0;      // first step of the chunk",
        "const size_t sbase = (size_t)blk * NST * HP;",
    ]
    seg = {"K": "TCH",
           "a": ("stage", lambda kk, m: f"(t0 + {kk} < SEQ) ? B[((row0 + {kk}) * NG + grp) * NST + {m}] : 0.0f", False),
           "b": ("stage", lambda kk, n: f"(t0 + {kk} < SEQ) ? w[{kk}] * x[((row0 + {kk}) * NH + hh) * HP + {n}] : 0.0f", False)}
    L += gs.body([seg], ["if (m < NST && n < HP) S[sbase + (size_t)m * HP + n] = VAL;"])
    L += ["} else {",
          "const int qb = blk - NSB;",
          "const int grp = qb % NG; const int c = (qb / NG) % NC; const int b = qb / (NG * NC);",
          "const int t0 = c * TCH;",
          "const size_t row0 = (size_t)b * SEQ + t0;",
          "const size_t qbase = (size_t)qb * TCH * TCH;    // (b, c, g): [s][t] = B_s . C_t",
          ]
    cb = {"K": "NST",
          "a": ("stage", lambda kk, m: f"(t0 + {m} < SEQ) ? B[((row0 + {m}) * NG + grp) * NST + {kk}] : 0.0f", True),
          "b": ("stage", lambda kk, n: f"(t0 + {n} < SEQ) ? C[((row0 + {n}) * NG + grp) * NST + {kk}] : 0.0f", True)}
    L += gc.body([cb], ["if (m < TCH && n < TCH) CBT[qbase + m * TCH + n] = VAL;"])
    L += ["}"]
    return "\n".join(L)


def _carry(kind: str) -> str:
    d = Dialect(kind)
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    return "\n".join([
        "constexpr int PER = NST * HP;                  // one head's state",
        "constexpr int U = 8;                           // chunks whose loads are issued together",
        f"const int e = {gid};",
        "if (e >= BATCH * NH * PER) return;",
        "const int b = e / (NH * PER); const int hh = (e / PER) % NH; const int r = e % PER;",
        "float h = 0.0f;",
        "for (int c0 = 0; c0 < NC; c0 += U) {",
        "  float sv[U]; float dv[U];",
        "  for (int u = 0; u < U; ++u) {",
        "    const int c = c0 + u;",
        "    const size_t hc = ((size_t)b * NC + (c < NC ? c : 0)) * NH + hh;",
        "    sv[u] = c < NC ? S[hc * PER + r] : 0.0f;",
        "    dv[u] = c < NC ? cd[hc] : 1.0f;",
        "  }",
        "  for (int u = 0; u < U; ++u) {",
        "    const int c = c0 + u;",
        "    if (c < NC) hin[(((size_t)b * NC + c) * NH + hh) * PER + r] = h;",
        "    h = dv[u] * h + sv[u];",
        "  }",
        "}",
    ])


def _output(kind: str, k: dict, mma: bool = False) -> str:
    d = Dialect(kind)
    g2 = _Gemm(d, "Y_", "TCH", "HP", tm_cap=8, tn_cap=8, mma=mma)
    L = _consts(k) + g2.consts() + [
        "constexpr int GMR = ((TCH + Y_MS - 1) / Y_MS) * Y_MS;   // every row a supertile reads",
        "constexpr int LDT = GMR + 8;                // float4 reads (CUDA cores), conflict-free fragments (mma)",
        *_tiles(d, mma, "KT * Y_LDA", "KT * Y_LDB"),
        _shared(d, "float GmT[TCH * LDT]"),
        d.shared("float dts[TCH]"), d.shared("float ac[TCH]"), d.shared("float eac[TCH]"),
        f"const int tid = {d.tid()};", "const int tx = tid % RX; const int ty = tid / RX;",
        f"const int blk = {d.bid('x')};",
        "const int hh = blk % NH; const int c = (blk / NH) % NC; const int b = blk / (NH * NC);",
        "const int grp = hh / (NH / NG);", "const int t0 = c * TCH;",
    ] + _scan(d) + [
        f"for (int i = tid; i < TCH; i += NTH) eac[i] = {d.exp('ac[i]')};",
        "const size_t qbase = (((size_t)b * NC + c) * NG + grp) * TCH * TCH;",
        "// the masked, decayed scores, transposed: GmT[s][t] = (C_t . B_s) exp(ac_t - ac_s) for s <= t, else 0",
        "for (int e = tid; e < TCH * GMR; e += NTH) {",
        "  const int t = e % GMR; const int s = e / GMR;",
        f"  GmT[s * LDT + t] = (t < TCH && s <= t) ? CBT[qbase + s * TCH + t] * {d.exp('ac[t] - ac[s]')} : 0.0f;",
        "}",
        d.barrier(),
        "const size_t row0 = (size_t)b * SEQ + t0;",
        "const size_t hbase = (size_t)blk * NST * HP;   // hin of this (batch, chunk, head): [n][p]",
        "const float dd = D[hh];",
    ]
    intra = {"K": "TCH", "a": ("smem", lambda m, kk: f"GmT[({kk}) * LDT + {m}]", None),
             "b": ("stage", lambda kk, n: f"(t0 + {kk} < SEQ) ? dts[{kk}] * x[((row0 + {kk}) * NH + hh) * HP + {n}] : 0.0f", False),
             "skip": "k0 > mhi"}
    inter = {"K": "NST",
             "a": ("stage", lambda kk, m: f"(t0 + {m} < SEQ) ? eac[{m}] * C[((row0 + {m}) * NG + grp) * NST + {kk}] : 0.0f", True),
             "b": ("stage", lambda kk, n: f"hin[hbase + (size_t)({kk}) * HP + {n}]", False)}
    L += g2.body([intra, inter], [
        "if (m < TCH && t0 + m < SEQ && n < HP) {",
        "  const size_t o = ((row0 + m) * NH + hh) * HP + n;",
        "  y[o] = VAL + dd * x[o];",
        "}"])
    return "\n".join(L)


def render_chunked(k: dict, kind: str, mma: bool = False) -> str:
    tid = "ssd.chunked_mma" if mma else "ssd.chunked_kernels"
    if kind not in (("cuda",) if mma else ("metal", "cuda")):
        raise ValueError(f"{tid} renders {'cuda' if mma else 'metal or cuda'} candidates")
    name = tag(tid, k, kind)
    nth = 32 * k["warps"]
    return f'''{header("ssd", tid, k, kind)}
_STATES = r"""
{_states(kind, k, mma)}
"""
_CARRY = r"""
{_carry(kind)}
"""
_OUTPUT = r"""
{_output(kind, k, mma)}
"""
_HEADER = r"""{TF32_HEADER if mma else ""}"""
_KS = {kernel_ctor(kind, name + "_states", ["x", "dt", "A", "B", "C"], ["S", "cd", "CBT"], src_var="_STATES")}
_KC = {kernel_ctor(kind, name + "_carry", ["S", "cd"], ["hin"], src_var="_CARRY")}
_KO = {kernel_ctor(kind, name + "_output", ["x", "dt", "A", "C", "D", "hin", "CBT"], ["y"], src_var="_OUTPUT")}
TCH = {k["chunk"]}
NTH = {nth}


def kernel(x, dt, A, B, C, D):
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    if H % G or ({mma} and N & (N - 1)):
        raise ValueError(f"{tid}: heads {{H}} must be a multiple of the groups {{G}}"
                         + (f", the state size {{N}} a power of two" if {mma} else ""))
    nc = (L + TCH - 1) // TCH
    tmpl = [("BATCH", b), ("SEQ", L), ("NH", H), ("HP", P), ("NG", G), ("NST", N), ("NC", nc)]
    blocks = b * nc * H
    S, cd, cbt = _KS(inputs=[x, dt, A, B, C], template=tmpl, grid=((blocks + b * nc * G) * NTH, 1, 1),
                     threadgroup=(NTH, 1, 1), output_shapes=[(b, nc, H, N, P), (b, nc, H), (b, nc, G, TCH, TCH)],
                     output_dtypes=[mx.float32, mx.float32, mx.float32])
    total = b * H * N * P
    hin = _KC(inputs=[S, cd], template=tmpl, grid=(((total + 255) // 256) * 256, 1, 1), threadgroup=(256, 1, 1),
              output_shapes=[(b, nc, H, N, P)], output_dtypes=[mx.float32])[0]
    return _KO(inputs=[x, dt, A, C, D, hin, cbt], template=tmpl, grid=(blocks * NTH, 1, 1), threadgroup=(NTH, 1, 1),
               output_shapes=[x.shape], output_dtypes=[mx.float32])[0]
'''


def render_chunked_mma(k: dict, kind: str) -> str:
    return render_chunked(k, kind, mma=True)
