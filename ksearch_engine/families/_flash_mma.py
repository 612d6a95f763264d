"""Flash attention prefill on tensor cores (CUDA: mma.sync m16n8k16 + ldmatrix.trans by inline PTX; fp16 in,
fp32 accumulation), causal or not (the task's `causal` flag, read on the device), GQA.

A threadgroup owns BQ = 16 * warps query rows of one head; each warp owns 16 of them and keeps its Q tile as MMA
A-fragments in registers for the whole pass. K/V tiles of BKV keys are staged through shared memory (rows padded
by 16 bytes: conflict-free fragment reads); the next tile's K and V are loaded into registers while the tensor
cores work on the current one. Per tile and warp: S = Q K^T (16 x BKV, fp32 fragments), online softmax in the
log2 domain on the fragments (row max across the 4 lanes of a quad, the row sum kept per lane until the end),
P re-packed from the S accumulators straight into A-fragments (no shared memory), O += P V with V's B-fragments
from `ldmatrix.trans`. Causal: the KV loop stops at the diagonal and only tiles that cross it are masked;
query blocks are scheduled longest first. The simulator runs the same source with exact warp-shuffle twins of
the PTX instructions (see _mma.py).

Knobs: warps (BQ = 16 * warps), block_kv.
"""
from __future__ import annotations

from ._mma import LDSM_HEADER, MMA_HEADER
from ._src import header, kernel_ctor, tag



# a threadgroup's place (batch, query head, its KV head, its query block: causal's longest first) and its lanes'
# MMA coordinates (g = lane / 4, q = lane % 4), as both tensor-core attention templates start
BLOCK_PROLOGUE = [
    "const bool CAUSAL = causal[0] > 0.5f;",
    "const int t = threadIdx.x; const int lane = t & 31; const int warp = t >> 5;",
    "const int g = lane >> 2; const int q = lane & 3;",
    "const int bh = blockIdx.x; const int b = bh / HQ; const int h = bh % HQ; const int hk = h / (HQ / HKV);",
    "const int nqb = (SEQ + BQ - 1) / BQ;",
    "const int q0 = (nqb - 1 - (int)blockIdx.y) * BQ;      // longest (causal) blocks first",
]

def flash_mma_valid(k: dict) -> bool:
    nth, bkv = 32 * k["warps"], k["block_kv"]
    # K and V staging registers at Dh=128: BKV*16/NTH 16-byte chunks each (<= 4)
    # (and at least one chunk each at Dh=64: BKV*8 >= NTH)
    return bkv % 16 == 0 and (bkv * 8) % nth == 0 and bkv * 16 // nth <= 4


def _source(k: dict) -> str:
    nw, bkv = k["warps"], k["block_kv"]
    return "\n".join([
        f"constexpr int NW = {nw}; constexpr int BKV = {bkv};",
        "constexpr int NTH = NW * 32; constexpr int BQ = NW * 16;",
        "constexpr int SD = DH + 8;                   // padded smem row (halves)",
        "constexpr int DC = DH / 8;                   // 16-byte chunks per row",
        "constexpr int LD = BKV * DC / NTH;           // K (and V) chunks each thread stages",
        "constexpr int NF = BKV / 8;                  // S fragments (8 keys each)",
        "constexpr int KD = DH / 16;                  // k-steps over the head dim",
        "constexpr int OF = DH / 8;                   // O fragments (8 columns each)",
        "constexpr float LOG2E = 1.4426950408889634f;",
        "struct alignas(16) Pk8 { __half v[8]; };",
        "__shared__ __align__(16) __half Ks[BKV * SD];",
        "__shared__ __align__(16) __half Vs[BKV * SD];",
        *BLOCK_PROLOGUE,
        "const int qw = q0 + warp * 16;                         // this warp's first row",
        "const __half* Qh = Q + (size_t)(b * HQ + h) * SEQ * DH;",
        "const __half* Kh = K + (size_t)(b * HKV + hk) * SEQ * DH;",
        "const __half* Vh = V + (size_t)(b * HKV + hk) * SEQ * DH;",
        "const float sc = rsqrtf((float)DH) * LOG2E;",
        "// Q fragments (rows qw + g, qw + g + 8), zero past the end",
        "unsigned qa[KD][4];",
        "{",
        "  const int ra = qw + g, rb = qw + g + 8;",
        "  for (int kd = 0; kd < KD; ++kd) {",
        "    const int c = kd * 16 + 2 * q;",
        "    qa[kd][0] = ra < SEQ ? ks_ld2(Qh + (size_t)ra * DH + c) : 0u;",
        "    qa[kd][1] = rb < SEQ ? ks_ld2(Qh + (size_t)rb * DH + c) : 0u;",
        "    qa[kd][2] = ra < SEQ ? ks_ld2(Qh + (size_t)ra * DH + c + 8) : 0u;",
        "    qa[kd][3] = rb < SEQ ? ks_ld2(Qh + (size_t)rb * DH + c + 8) : 0u;",
        "  }",
        "}",
        "float o[OF][4];",
        "for (int f = 0; f < OF; ++f) for (int i = 0; i < 4; ++i) o[f][i] = 0.0f;",
        "float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;",
        "const int kend = CAUSAL ? ((q0 + BQ < SEQ) ? q0 + BQ : SEQ) : SEQ;",
        "const int ntile = (kend + BKV - 1) / BKV;",
        "Pk8 rk[LD]; Pk8 rv[LD];",
        "#define KS_GLOAD(j0) \\",
        "  for (int i = 0; i < LD; ++i) { const int f = i * NTH + t; const int r = (j0) + f / DC; const int c = (f % DC) * 8; \\",
        "    if (r < SEQ) { rk[i] = *reinterpret_cast<const Pk8*>(Kh + (size_t)r * DH + c); \\",
        "                   rv[i] = *reinterpret_cast<const Pk8*>(Vh + (size_t)r * DH + c); } \\",
        "    else { for (int z = 0; z < 8; ++z) { rk[i].v[z] = __float2half(0.0f); rv[i].v[z] = __float2half(0.0f); } } }",
        "#define KS_SSTORE() \\",
        "  for (int i = 0; i < LD; ++i) { const int f = i * NTH + t; const int r = f / DC; const int c = (f % DC) * 8; \\",
        "    *reinterpret_cast<Pk8*>(&Ks[r * SD + c]) = rk[i]; *reinterpret_cast<Pk8*>(&Vs[r * SD + c]) = rv[i]; }",
        "KS_GLOAD(0)",
        "KS_SSTORE()",
        "__syncthreads();",
        "for (int tile = 0; tile < ntile; ++tile) {",
        "  const int j0 = tile * BKV;",
        "  if (tile + 1 < ntile) { KS_GLOAD(j0 + BKV) }      // next tile in flight during this one's math",
        "  if (!(CAUSAL && j0 > qw + 15)) {                     // a warp entirely above the diagonal skips",
        "    float s[NF][4];",
        "    for (int f = 0; f < NF; ++f) for (int i = 0; i < 4; ++i) s[f][i] = 0.0f;",
        "    for (int kd = 0; kd < KD; ++kd) {",
        "      for (int f = 0; f < NF; ++f) {",
        "        const __half* p = Ks + (f * 8 + g) * SD + kd * 16 + 2 * q;",
        "        unsigned kb[2]; kb[0] = ks_ld2(p); kb[1] = ks_ld2(p + 8);",
        "        ks_mma16816(s[f], qa[kd], kb);",
        "      }",
        "    }",
        "    const bool mask = (CAUSAL && j0 + BKV - 1 > qw) || j0 + BKV > SEQ;",
        "    float mx0 = -INFINITY, mx1 = -INFINITY;",
        "    for (int f = 0; f < NF; ++f) {",
        "      for (int i = 0; i < 4; ++i) {",
        "        float v = s[f][i] * sc;",
        "        if (mask) {",
        "          const int key = j0 + f * 8 + 2 * q + (i & 1); const int row = qw + g + 8 * (i >> 1);",
        "          if (key >= SEQ || (CAUSAL && key > row)) v = -INFINITY;",
        "        }",
        "        s[f][i] = v;",
        "      }",
        "      mx0 = fmaxf(mx0, fmaxf(s[f][0], s[f][1])); mx1 = fmaxf(mx1, fmaxf(s[f][2], s[f][3]));",
        "    }",
        "    for (int x = 1; x < 4; x *= 2) {",
        "      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));",
        "    }",
        "    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);",
        "    const float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);   // m = -inf only before any valid key",
        "    m0 = n0; m1 = n1;",
        "    l0 *= c0; l1 *= c1;",
        "    for (int f = 0; f < OF; ++f) { o[f][0] *= c0; o[f][1] *= c0; o[f][2] *= c1; o[f][3] *= c1; }",
        "    for (int kk = 0; kk < BKV / 16; ++kk) {",
        "      unsigned pa[4];",
        "      float p[2][4];",
        "      for (int hf = 0; hf < 2; ++hf) {",
        "        const int f = 2 * kk + hf;",
        "        p[hf][0] = exp2f(s[f][0] - n0); p[hf][1] = exp2f(s[f][1] - n0);",
        "        p[hf][2] = exp2f(s[f][2] - n1); p[hf][3] = exp2f(s[f][3] - n1);",
        "        l0 += p[hf][0] + p[hf][1]; l1 += p[hf][2] + p[hf][3];",
        "      }",
        "      pa[0] = ks_pack2(p[0][0], p[0][1]); pa[1] = ks_pack2(p[0][2], p[0][3]);",
        "      pa[2] = ks_pack2(p[1][0], p[1][1]); pa[3] = ks_pack2(p[1][2], p[1][3]);",
        "      const int mi = lane >> 3; const int rr = lane & 7;",
        "      const __half* vrow = Vs + (kk * 16 + (mi & 1) * 8 + rr) * SD + (mi >> 1) * 8;",
        "      for (int dp = 0; dp < DH / 16; ++dp) {",
        "        unsigned vb[4];",
        "        ks_ldsm_x4_t(vb, vrow + dp * 16);",
        "        ks_mma16816(o[2 * dp], pa, vb);",
        "        ks_mma16816(o[2 * dp + 1], pa, vb + 2);",
        "      }",
        "    }",
        "  }",
        "  __syncthreads();",
        "  if (tile + 1 < ntile) { KS_SSTORE() }",
        "  __syncthreads();",
        "}",
        "#undef KS_GLOAD",
        "#undef KS_SSTORE",
        "for (int x = 1; x < 4; x *= 2) { l0 += __shfl_xor_sync(0xffffffffu, l0, x); l1 += __shfl_xor_sync(0xffffffffu, l1, x); }",
        "const float i0 = 1.0f / l0, i1 = 1.0f / l1;",
        "__half* Oh = out + (size_t)(b * HQ + h) * SEQ * DH;",
        "const int ra = qw + g, rb = qw + g + 8;",
        "for (int f = 0; f < OF; ++f) {",
        "  const int c = f * 8 + 2 * q;",
        "  if (ra < SEQ) *reinterpret_cast<unsigned*>(Oh + (size_t)ra * DH + c) = ks_pack2(o[f][0] * i0, o[f][1] * i0);",
        "  if (rb < SEQ) *reinterpret_cast<unsigned*>(Oh + (size_t)rb * DH + c) = ks_pack2(o[f][2] * i1, o[f][3] * i1);",
        "}",
    ])


def render_flash_mma(k: dict, kind: str) -> str:
    if kind != "cuda":
        raise ValueError("attention.flash_mma renders cuda candidates (tensor cores through inline PTX)")
    tid = "attention.flash_mma"
    nth, bq = 32 * k["warps"], 16 * k["warps"]
    return f'''{header("attention", tid, k, kind)}
_SOURCE = r"""
{_source(k)}
"""
_HEADER = r"""
{MMA_HEADER}
{LDSM_HEADER}
"""
_K = {kernel_ctor(kind, tag(tid, k, kind), ["Q", "K", "V", "causal"], ["out"])}


def kernel(q, k, v, causal):
    Bt, Hq, L, Dh = q.shape
    Hkv = k.shape[1]
    if q.dtype != mx.float16 or Dh % 16 or Hq % Hkv or k.shape[2] != L:
        raise ValueError(f"{tid}: fp16 self-attention with Dh % 16 == 0 and Hq % Hkv == 0, got {{q.dtype}} q {{q.shape}} k {{k.shape}}")
    return _K(inputs=[q, k, v, causal],
              template=[("HQ", Hq), ("HKV", Hkv), ("DH", Dh), ("SEQ", L)],
              grid=(Bt * Hq * {nth}, (L + {bq} - 1) // {bq}, 1), threadgroup=({nth}, 1, 1),
              output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''
