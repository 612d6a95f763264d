"""Chunked Mamba-2 SSD as three kernels (CUDA and Metal from one source through `Dialect`; fp32, CUDA-core math).

The sequence is cut into chunks of T steps; a chunk c of head h has the cumulative log-decay
ac_t = sum_{s<=t} dt_s A_h (t within the chunk). With u_t = dt_t x_t:
  1. `states` (one threadgroup per (batch, chunk, head)): ac by a warp scan, then the chunk's end state from a
     zero start, S_c[n][p] = sum_t exp(ac_end - ac_t) dt_t B_t[n] x_t[p]  (an N x P GEMM over the T steps),
     and the chunk's total decay exp(ac_end).
  2. `carry` (one thread per (batch, head, n, p)): the state entering each chunk,
     hin_0 = 0, hin_(c+1) = exp(ac_end,c) hin_c + S_c  (NC steps; the loads are issued 8 chunks at a time).
  3. `output` (one threadgroup per (batch, chunk, head)): ac again, the masked intra-chunk scores
     Gm[t][s] = (C_t . B_s) exp(ac_t - ac_s) [s <= t] (a T x T GEMM over N, kept in threadgroup memory), then
     y[t][p] = sum_s Gm[t][s] u_s[p] + exp(ac_t) sum_n C_t[n] hin[n][p] + D x_t[p]: one T x P GEMM whose
     reduction runs over the T steps of the chunk and then over the N states.
Every GEMM is register-tiled: a thread owns TM x TN outputs (rows ty + i * RY, columns tx + j * RX; RX = 16
thread columns, RY = threads / 16 rows), operands staged KT reduction steps at a time through threadgroup
memory (rows padded by one float), zero-filled past the edges so the inner loop has no bounds checks.
Steps past the end of the sequence read as dt = 0 (no decay, no input) and their outputs are not written.

Knobs: chunk (T), warps (threads = 32 * warps), k_tile (KT).
"""
from __future__ import annotations

from ._src import Dialect, header, kernel_ctor, tag

INPUTS = ["x", "dt", "A", "B", "C", "D"]


def chunked_valid(k: dict) -> bool:
    return k["chunk"] in (16, 32, 64) and k["warps"] in (2, 4, 8) and k["k_tile"] in (8, 16) and k["chunk"] % k["k_tile"] == 0


def _cmin(a: str, b: str) -> str:
    return f"(({a}) < ({b}) ? ({a}) : ({b}))"


class _Gemm:
    """Text of one register-tiled GEMM C[M][NN] (+)= sum over segments of A_seg[m][k] B_seg[k][n]."""

    def __init__(self, d: Dialect, name: str, M: str, NN: str, tm_cap: int = 16, tn_cap: int = 8):
        self.d, self.p, self.M, self.NN = d, name, M, NN
        self.tm_cap, self.tn_cap = tm_cap, tn_cap

    def consts(self) -> list[str]:
        p = self.p
        return [f"constexpr int {p}TM = {_cmin(f'({self.M} + RY - 1) / RY', str(self.tm_cap))};",
                f"constexpr int {p}TN = {_cmin(f'({self.NN} + RX - 1) / RX', str(self.tn_cap))};",
                f"constexpr int {p}MS = RY * {p}TM;", f"constexpr int {p}NS = RX * {p}TN;"]

    def body(self, segments: list[dict], epilogue: list[str]) -> list[str]:
        """segments: dicts with K (C expression), a and b: ("stage", load(k, m) -> expr, k_fastest) or
        ("smem", read(m, k) -> expr, None) for A. Epilogue lines see acc[i][j], row m and column n."""
        d, p = self.d, self.p
        unroll = "" if d.metal else "#pragma unroll"
        L = [f"for (int m0 = 0; m0 < {self.M}; m0 += {p}MS) {{",
             f"for (int n0 = 0; n0 < {self.NN}; n0 += {p}NS) {{",
             f"  float acc[{p}TM][{p}TN];",
             f"  for (int i = 0; i < {p}TM; ++i) for (int j = 0; j < {p}TN; ++j) acc[i][j] = 0.0f;"]
        for seg in segments:
            K = seg["K"]
            L += [f"  for (int k0 = 0; k0 < {K}; k0 += KT) {{"]
            for which, spec, rows, tile, ld in (("a", seg["a"], f"{p}MS", "As", f"({p}MS + 1)"),
                                                ("b", seg["b"], f"{p}NS", "Bs", f"({p}NS + 1)")):
                mode, fn, kfast = spec
                if mode != "stage":
                    continue
                base = "m0" if which == "a" else "n0"
                lim = self.M if which == "a" else self.NN
                if kfast:
                    idx = ["const int kk = e % KT;", f"const int mm = e / KT;"]
                else:
                    idx = [f"const int mm = e % {rows};", f"const int kk = e / {rows};"]
                L += [f"    for (int e = tid; e < KT * {rows}; e += NTH) {{",
                      "      " + " ".join(idx),
                      f"      const int gk = k0 + kk; const int gm = {base} + mm;",
                      f"      {tile}[kk * {ld} + mm] = (gk < {K} && gm < {lim}) ? ({fn('gk', 'gm')}) : 0.0f;",
                      "    }"]
            L += [f"    {d.barrier()}", f"    {unroll}", "    for (int kk = 0; kk < KT; ++kk) {",
                  f"      float av[{p}TM]; float bv[{p}TN];"]
            amode, afn, _ = seg["a"]
            if amode == "stage":
                L.append(f"      {unroll}\n      for (int i = 0; i < {p}TM; ++i) av[i] = As[kk * ({p}MS + 1) + ty + i * RY];")
            else:
                L.append(f"      {unroll}\n      for (int i = 0; i < {p}TM; ++i) av[i] = {afn('m0 + ty + i * RY', 'k0 + kk')};")
            L += [f"      {unroll}\n      for (int j = 0; j < {p}TN; ++j) bv[j] = Bs[kk * ({p}NS + 1) + tx + j * RX];",
                  f"      {unroll}\n      for (int i = 0; i < {p}TM; ++i)",
                  f"        for (int j = 0; j < {p}TN; ++j) acc[i][j] += av[i] * bv[j];",
                  "    }", f"    {d.barrier()}", "  }"]
        L += [f"  for (int i = 0; i < {p}TM; ++i) {{", "    const int m = m0 + ty + i * RY;",
              f"    for (int j = 0; j < {p}TN; ++j) {{", "      const int n = n0 + tx + j * RX;"]
        L += ["      " + e for e in epilogue]
        L += ["    }", "  }", "}", "}"]
        return L


def _prologue(d: Dialect, k: dict) -> list[str]:
    """Indices, and the chunk's dt (dts) and cumulative log-decay (ac) in threadgroup memory."""
    return [
        f"constexpr int TCH = {k['chunk']}; constexpr int NTH = {32 * k['warps']}; constexpr int KT = {k['k_tile']};",
        "constexpr int RX = 16; constexpr int RY = NTH / RX;",
        "constexpr int SPL = (TCH + 31) / 32;          // scan elements per lane",
        f"const int tid = {d.tid()};", "const int tx = tid % RX; const int ty = tid / RX;",
        f"const int blk = {d.bid('x')};",
        "const int hh = blk % NH; const int c = (blk / NH) % NC; const int b = blk / (NH * NC);",
        "const int grp = hh / (NH / NG);", "const int t0 = c * TCH;",
        "const float ah = A[hh];",
        d.shared("float dts[TCH]"), d.shared("float ac[TCH]"),
        "if (tid < 32) {                                // warp 0: inclusive scan of dt * A over the chunk",
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


def _states(kind: str, k: dict) -> str:
    d = Dialect(kind)
    g = _Gemm(d, "S_", "NST", "HP")
    L = _prologue(d, k) + g.consts() + [
        d.shared("float As[KT * (S_MS + 1)]"), d.shared("float Bs[KT * (S_NS + 1)]"), d.shared("float w[TCH]"),
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
    L += g.body([seg], ["if (m < NST && n < HP) S[sbase + (size_t)m * HP + n] = acc[i][j];"])
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


def _output(kind: str, k: dict) -> str:
    d = Dialect(kind)
    g1 = _Gemm(d, "G_", "TCH", "TCH", tm_cap=8, tn_cap=8)
    g2 = _Gemm(d, "Y_", "TCH", "HP", tm_cap=8, tn_cap=8)
    L = _prologue(d, k) + g1.consts() + g2.consts() + [
        "constexpr int AMS = G_MS > Y_MS ? G_MS : Y_MS;",
        "constexpr int BNS = G_NS > Y_NS ? G_NS : Y_NS;",
        "constexpr int GMR = ((TCH + G_MS - 1) / G_MS) * G_MS;   // every row / column a supertile writes",
        "constexpr int LDG = ((TCH + G_NS - 1) / G_NS) * G_NS + 1;",
        d.shared("float As[KT * (AMS + 1)]"), d.shared("float Bs[KT * (BNS + 1)]"),
        d.shared("float Gm[GMR * LDG]"), d.shared("float eac[TCH]"),
        f"for (int i = tid; i < TCH; i += NTH) eac[i] = {d.exp('ac[i]')};",
        d.barrier(),
        "const size_t row0 = (size_t)b * SEQ + t0;",
        "const size_t hbase = (size_t)blk * NST * HP;   // hin of this (batch, chunk, head): [n][p]",
        "const float dd = D[hh];",
    ]
    cb = {"K": "NST",
          "a": ("stage", lambda kk, m: f"(t0 + {m} < SEQ) ? C[((row0 + {m}) * NG + grp) * NST + {kk}] : 0.0f", True),
          "b": ("stage", lambda kk, n: f"(t0 + {n} < SEQ) ? B[((row0 + {n}) * NG + grp) * NST + {kk}] : 0.0f", True)}
    # the whole G_MS x G_NS tile is written (zeros outside the causal triangle and the chunk) and read unguarded
    L += g1.body([cb], [f"Gm[m * LDG + n] = (m < TCH && n <= m) ? acc[i][j] * {d.exp('ac[m] - ac[n]')} : 0.0f;"])
    L.append(d.barrier())
    intra = {"K": "TCH", "a": ("smem", lambda m, kk: f"Gm[({m}) * LDG + {kk}]", None),
             "b": ("stage", lambda kk, n: f"(t0 + {kk} < SEQ) ? dts[{kk}] * x[((row0 + {kk}) * NH + hh) * HP + {n}] : 0.0f", False)}
    inter = {"K": "NST",
             "a": ("stage", lambda kk, m: f"(t0 + {m} < SEQ) ? eac[{m}] * C[((row0 + {m}) * NG + grp) * NST + {kk}] : 0.0f", True),
             "b": ("stage", lambda kk, n: f"hin[hbase + (size_t)({kk}) * HP + {n}]", False)}
    L += g2.body([intra, inter], [
        "if (m < TCH && t0 + m < SEQ && n < HP) {",
        "  const size_t o = ((row0 + m) * NH + hh) * HP + n;",
        "  y[o] = acc[i][j] + dd * x[o];",
        "}"])
    return "\n".join(L)


def render_chunked(k: dict, kind: str) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError("ssd.chunked_kernels renders metal or cuda candidates")
    tid = "ssd.chunked_kernels"
    name = tag(tid, k, kind)
    nth = 32 * k["warps"]
    return f'''{header("ssd", tid, k, kind)}
_STATES = r"""
{_states(kind, k)}
"""
_CARRY = r"""
{_carry(kind)}
"""
_OUTPUT = r"""
{_output(kind, k)}
"""
_HEADER = ""
_KS = {kernel_ctor(kind, name + "_states", ["x", "dt", "A", "B"], ["S", "cd"], src_var="_STATES")}
_KC = {kernel_ctor(kind, name + "_carry", ["S", "cd"], ["hin"], src_var="_CARRY")}
_KO = {kernel_ctor(kind, name + "_output", INPUTS + ["hin"], ["y"], src_var="_OUTPUT")}
TCH = {k["chunk"]}
NTH = {nth}


def kernel(x, dt, A, B, C, D):
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    if H % G:
        raise ValueError(f"{tid}: heads {{H}} must be a multiple of the groups {{G}}")
    nc = (L + TCH - 1) // TCH
    tmpl = [("BATCH", b), ("SEQ", L), ("NH", H), ("HP", P), ("NG", G), ("NST", N), ("NC", nc)]
    blocks = b * nc * H
    S, cd = _KS(inputs=[x, dt, A, B], template=tmpl, grid=(blocks * NTH, 1, 1), threadgroup=(NTH, 1, 1),
                output_shapes=[(b, nc, H, N, P), (b, nc, H)], output_dtypes=[mx.float32, mx.float32])
    total = b * H * N * P
    hin = _KC(inputs=[S, cd], template=tmpl, grid=(((total + 255) // 256) * 256, 1, 1), threadgroup=(256, 1, 1),
              output_shapes=[(b, nc, H, N, P)], output_dtypes=[mx.float32])[0]
    return _KO(inputs=[x, dt, A, B, C, D, hin], template=tmpl, grid=(blocks * NTH, 1, 1), threadgroup=(NTH, 1, 1),
               output_shapes=[x.shape], output_dtypes=[mx.float32])[0]
'''
