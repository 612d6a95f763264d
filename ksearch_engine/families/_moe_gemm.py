"""Grouped GEMM for MoE experts on tensor cores (CUDA, mma.sync m16n8k16, fp32 accumulation).

The (token, slot) pairs are sorted by expert on the device (argsort + per-expert counts, MLX ops, no host sync);
a threadgroup owns a BM x BN tile of one expert's output rows: its rows are consecutive in the sorted order and
gathered from x through the sort permutation inside the kernel (no gathered copy of x), its columns are BN rows
of that expert's weight (E, O, D as stored: exactly the "col" B operand the MMA wants). A tile index is mapped to
(expert, row block) by scanning the per-expert tile offsets; surplus threadgroups of the static grid (an upper
bound on the tile count) return at once. Tiles are ordered in groups of group_m row blocks per column block so
the weights and the gathered rows stay in L2. K steps of BK: the next step's global loads go to registers while
the tensor cores work on the current shared-memory buffer (two buffers, one barrier per step). Results are
written straight to their (token, slot) row: no unsort pass.

Knobs: block_m, block_n, block_k, warps_m, warps_n, group_m.
"""
from __future__ import annotations

from ._mma import MMA_HEADER
from ._src import header, kernel_ctor, tag


def gemm_valid(k: dict) -> bool:
    bm, bn, bk, wm, wn = k["block_m"], k["block_n"], k["block_k"], k["warps_m"], k["warps_n"]
    if wm * wn not in (4, 8) or bm % (16 * wm) or bn % (8 * wn) or bk % 16:
        return False
    mf, nf = bm // wm // 16, bn // wn // 8
    nth = 32 * wm * wn
    smem = 2 * (bm + bn) * (bk + 8) * 2
    return (mf * nf * 4 <= 128 and smem <= 48 * 1024 and (bm * bk // 8) % nth == 0 and (bn * bk // 8) % nth == 0)


def _source(k: dict) -> str:
    bm, bn, bk, wm, wn, gm = (k["block_m"], k["block_n"], k["block_k"], k["warps_m"], k["warps_n"], k["group_m"])
    return "\n".join([
        f"constexpr int BM = {bm}; constexpr int BN = {bn}; constexpr int BK = {bk};",
        f"constexpr int WM = {wm}; constexpr int WN = {wn}; constexpr int GM = {gm};",
        "constexpr int NTH = WM * WN * 32;",
        "constexpr int MF = BM / WM / 16; constexpr int NF = BN / WN / 8;",
        "constexpr int SK = BK + 8;                    // padded smem row (halves): conflict-free b32 fragment reads",
        "constexpr int KC = BK / 8;                    // 16-byte chunks per tile row",
        "constexpr int AL = BM * KC / NTH; constexpr int BL = BN * KC / NTH;",
        "constexpr int NTN = (NO + BN - 1) / BN;",
        "struct alignas(16) Pk8 { __half v[8]; };",
        "__shared__ __align__(16) __half As[2 * BM * SK];",
        "__shared__ __align__(16) __half Bs[2 * BN * SK];",
        "const int t = threadIdx.x; const int lane = t & 31; const int warp = t >> 5;",
        "const int wm = warp / WN; const int wn = warp % WN;",
        "const int g = lane >> 2; const int q = lane & 3;",
        "// grouped tile order: GM row blocks share each column block while it is in L2",
        "const int L = blockIdx.x;",
        "const int mt = (L / (GM * NTN)) * GM + (L % GM);",
        "const int n0 = ((L / GM) % NTN) * BN;",
        "const int ntiles = toff[NE];",
        "if (mt >= ntiles) return;                    // the static grid is an upper bound",
        "int e = 0;",
        "while (toff[e + 1] <= mt) ++e;",
        "const int r0 = offs[e] + (mt - toff[e]) * BM;",
        "const int r1 = offs[e + 1];",
        "// this thread's global sources (fixed over K): A rows gathered through the sort order, B rows of expert e",
        "const __half* asrc[AL]; int acol[AL]; bool aok[AL];",
        "for (int i = 0; i < AL; ++i) {",
        "  const int f = i * NTH + t; const int row = f / KC; acol[i] = (f % KC) * 8;",
        "  const int gr = r0 + row; aok[i] = gr < r1;",
        "  asrc[i] = x + (size_t)(aok[i] ? order[gr] / KS : 0) * ND;",
        "}",
        "const __half* bsrc[BL]; int bcol[BL]; bool bok[BL];",
        "for (int i = 0; i < BL; ++i) {",
        "  const int f = i * NTH + t; const int row = f / KC; bcol[i] = (f % KC) * 8;",
        "  const int gn = n0 + row; bok[i] = gn < NO;",
        "  bsrc[i] = w + ((size_t)e * NO + (bok[i] ? gn : 0)) * ND;",
        "}",
        "Pk8 ra[AL]; Pk8 rb[BL];",
        "float acc[MF * NF * 4];",
        "for (int i = 0; i < MF * NF * 4; ++i) acc[i] = 0.0f;",
        "constexpr int KT = (ND + BK - 1) / BK;",
        "#define KS_LOAD(k0) \\",
        "  for (int i = 0; i < AL; ++i) { if (aok[i] && (k0) + acol[i] < ND) ra[i] = *reinterpret_cast<const Pk8*>(asrc[i] + (k0) + acol[i]); \\",
        "    else { for (int z = 0; z < 8; ++z) ra[i].v[z] = __float2half(0.0f); } } \\",
        "  for (int i = 0; i < BL; ++i) { if (bok[i] && (k0) + bcol[i] < ND) rb[i] = *reinterpret_cast<const Pk8*>(bsrc[i] + (k0) + bcol[i]); \\",
        "    else { for (int z = 0; z < 8; ++z) rb[i].v[z] = __float2half(0.0f); } }",
        "#define KS_STORE(buf) \\",
        "  for (int i = 0; i < AL; ++i) { const int f = i * NTH + t; \\",
        "    *reinterpret_cast<Pk8*>(&As[(buf) * BM * SK + (f / KC) * SK + acol[i]]) = ra[i]; } \\",
        "  for (int i = 0; i < BL; ++i) { const int f = i * NTH + t; \\",
        "    *reinterpret_cast<Pk8*>(&Bs[(buf) * BN * SK + (f / KC) * SK + bcol[i]]) = rb[i]; }",
        "KS_LOAD(0)",
        "KS_STORE(0)",
        "__syncthreads();",
        "for (int kt = 0; kt < KT; ++kt) {",
        "  const int buf = kt & 1;",
        "  if (kt + 1 < KT) { KS_LOAD((kt + 1) * BK) }",
        "  const __half* as = As + buf * BM * SK + (wm * MF * 16) * SK;",
        "  const __half* bs = Bs + buf * BN * SK + (wn * NF * 8) * SK;",
        "  for (int kk = 0; kk < BK; kk += 16) {",
        "    unsigned af[MF][4]; unsigned bf[NF][2];",
        "    for (int m = 0; m < MF; ++m) {",
        "      const __half* p = as + (m * 16 + g) * SK + kk + 2 * q;",
        "      af[m][0] = ks_ld2(p); af[m][1] = ks_ld2(p + 8 * SK);",
        "      af[m][2] = ks_ld2(p + 8); af[m][3] = ks_ld2(p + 8 * SK + 8);",
        "    }",
        "    for (int n = 0; n < NF; ++n) {",
        "      const __half* p = bs + (n * 8 + g) * SK + kk + 2 * q;",
        "      bf[n][0] = ks_ld2(p); bf[n][1] = ks_ld2(p + 8);",
        "    }",
        "    for (int m = 0; m < MF; ++m)",
        "      for (int n = 0; n < NF; ++n) ks_mma16816(&acc[(m * NF + n) * 4], af[m], bf[n]);",
        "  }",
        "  if (kt + 1 < KT) { KS_STORE(buf ^ 1) }",
        "  __syncthreads();",
        "}",
        "#undef KS_LOAD",
        "#undef KS_STORE",
        "// epilogue: each accumulator row goes to its (token, slot) row of y",
        "for (int m = 0; m < MF; ++m) {",
        "  for (int h = 0; h < 2; ++h) {",
        "    const int gr = r0 + wm * MF * 16 + m * 16 + g + 8 * h;",
        "    if (gr >= r1) continue;",
        "    __half* yr = y + (size_t)order[gr] * NO;",
        "    for (int n = 0; n < NF; ++n) {",
        "      const int col = n0 + wn * NF * 8 + n * 8 + 2 * q;",
        "      const float* c = &acc[(m * NF + n) * 4 + 2 * h];",
        "      if (col < NO) yr[col] = __float2half(c[0]);",
        "      if (col + 1 < NO) yr[col + 1] = __float2half(c[1]);",
        "    }",
        "  }",
        "}",
    ])


def render_grouped(k: dict, kind: str) -> str:
    if kind != "cuda":
        raise ValueError("moe.grouped_mma renders cuda candidates (tensor cores through inline PTX)")
    tid = "moe.grouped_mma"
    bm, bn, gm = k["block_m"], k["block_n"], k["group_m"]
    nth = 32 * k["warps_m"] * k["warps_n"]
    return f'''{header("moe", tid, k, kind)}
_SOURCE = r"""
{_source(k)}
"""
_HEADER = r"""
{MMA_HEADER}
"""
_K = {kernel_ctor(kind, tag(tid, k, kind), ["x", "w", "order", "offs", "toff"], ["y"])}
BM, BN, GM, NTH = {bm}, {bn}, {gm}, {nth}


def kernel(x, w, route):
    T, D = x.shape
    E, O, _ = w.shape
    K = route.shape[1]
    N = T * K
    if D % 8 or x.dtype != mx.float16 or w.dtype != mx.float16:
        raise ValueError(f"{tid}: fp16 inputs with D % 8 == 0, got {{x.dtype}} D={{D}}")
    idx = (route % E).reshape(-1).astype(mx.int32)
    order = mx.argsort(idx).astype(mx.int32)                       # pairs sorted by expert
    counts = (idx[:, None] == mx.arange(E, dtype=mx.int32)[None, :]).astype(mx.int32).sum(axis=0)
    zero = mx.zeros((1,), mx.int32)
    offs = mx.concatenate([zero, mx.cumsum(counts)]).astype(mx.int32)
    toff = mx.concatenate([zero, mx.cumsum((counts + BM - 1) // BM)]).astype(mx.int32)
    mtiles = -(-N // BM) + E                                       # upper bound on the row blocks
    mtiles = -(-mtiles // GM) * GM
    ntn = -(-O // BN)
    y = _K(inputs=[x, w, order, offs, toff],
           template=[("ND", D), ("NO", O), ("KS", K), ("NE", E)],
           grid=(mtiles * ntn * NTH, 1, 1), threadgroup=(NTH, 1, 1),
           output_shapes=[(N, O)], output_dtypes=[x.dtype])[0]
    return y.reshape(T, K, O)
'''
