"""Flash attention prefill on tensor cores, second generation (FlashAttention-2 style data movement; fp16 or bf16
in (mma.sync .f16 / .bf16, chosen by the input dtype), fp32 accumulation), causal or not (the task's `causal` flag, read on the device), GQA, any L.

Differences from attention.flash_mma (_flash_mma.py):
* all global -> shared traffic is `cp.async.cg` (16 bytes a thread, zero-filled past the end of the sequence),
  K and V double-buffered: tile j+1 is in flight while the tensor cores work on tile j, with ONE __syncthreads per
  tile (wait for this thread's group, barrier, then issue the next tile into the buffer everyone left a tile ago);
* Q is copied once into shared memory and read with `ldmatrix.x4` (A fragments); K's B fragments come from
  `ldmatrix.x4` (non-transposed: four 8x8 matrices = the b0/b1 pairs of two 8-key fragments), V's from
  `ldmatrix.x4.trans` as before;
* each warp owns `rows` = 16 or 32 query rows (one or two m16 blocks: with 32, every K/V fragment read from shared
  memory feeds two MMAs). With 16 rows Q's fragments stay in registers for the whole pass; with 32 they are
  re-read from shared memory each tile (the registers go to the 2 x 64 O accumulators at Dh=128);
* the softmax scale is folded into the exponent: p = ex2(s * scale*log2e - m * scale*log2e), one FFMA + ex2.approx;
  the row max runs on the raw scores (the scale is positive);
* the mask is applied only on tiles that cross the diagonal (causal) or the end of the sequence; O is rescaled only
  when a row of the warp got a new maximum (a warp vote; the factor is exactly 1 otherwise);
* shared memory is dynamic (BQ + 4 BKV padded rows of Dh <= 128 halves, or 4 BKV with 16 rows a warp and
  2 BKV >= BQ: Q is staged in K/V buffer 1, which tile 1's prefetch overwrites only after Q is in registers),
  so BKV = 64/128 fit.

The simulator runs the same source with exact warp-shuffle twins of ldmatrix and mma.sync (_mma.py), a plain
16-byte copy for cp.async (zero fill included) and nothing for commit/wait (the barrier still separates tiles).

Knobs: warps (4/8), rows per warp (16/32; BQ = warps * rows), block_kv (keys per tile).
"""
from __future__ import annotations

from ._flash_mma import BLOCK_PROLOGUE
from ._mma import LDSM_HEADER, MMA_HEADER
from ._src import header, kernel_ctor, tag

DH_MAX = 128

ASYNC_HEADER = r"""
#ifdef KSIM_CUDA
// cp.async twin: the copy happens at once (zero fill when the source is past the end); commit/wait are nothing,
// the __syncthreads that follows them in the template is what orders the tile for the other warps
__device__ inline void ks_cp16(__half* dst, const __half* src, bool valid) {
  for (int i = 0; i < 8; ++i) dst[i] = valid ? src[i] : __float2half(0.0f);
}
__device__ inline void ks_cp_commit() {}
__device__ inline void ks_cp_wait0() {}
// ldmatrix.x4 (no .trans) twin: lane L gives the row address of row L % 8 of matrix L / 8; register i receives
// (M_i[g][2q], M_i[g][2q+1])
__device__ inline void ks_ldsm_x4(unsigned* r, const __half* p) {
  const int lane = threadIdx.x & 31; const int g = lane >> 2; const int q = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const __half* a = __shfl_sync(0xffffffffu, p, 8 * i + g);
    r[i] = (unsigned)__half_as_ushort(a[2 * q]) | ((unsigned)__half_as_ushort(a[2 * q + 1]) << 16);
  }
}
// base + offset forms (the GPU side adds the offset to a 32-bit shared address: fewer registers than pointers)
__device__ inline void ks_ldsm_x4o(unsigned* r, const __half* base, int off) { ks_ldsm_x4(r, base + off); }
__device__ inline void ks_ldsm_x4_to(unsigned* r, const __half* base, int off) { ks_ldsm_x4_t(r, base + off); }
__device__ inline float ks_exp2(float x) { return exp2f(x); }
__device__ inline unsigned ks_pack2f(float lo, float hi) { return ks_pack2(lo, hi); }
// bf16: the same m16n8k16 fragment bookkeeping as ks_mma16816 (_mma.py), bf16 halves of each b32
__device__ inline float ks_blo(unsigned u) { return __uint_as_float(u << 16); }
__device__ inline float ks_bhi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }
__device__ inline void ks_mma16816_bf(float* c, const unsigned* a, const unsigned* b) {
  const int lane = threadIdx.x & 31; const int g = lane >> 2; const int q = lane & 3;
  float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f, r3 = 0.0f;
  for (int kp = 0; kp < 8; ++kp) {
    const int src = kp & 3; const int hi = kp >> 2;
    const unsigned ar = __shfl_sync(0xffffffffu, a[2 * hi], g * 4 + src);
    const unsigned ar8 = __shfl_sync(0xffffffffu, a[1 + 2 * hi], g * 4 + src);
    const unsigned b0 = __shfl_sync(0xffffffffu, b[hi], (2 * q) * 4 + src);
    const unsigned b1 = __shfl_sync(0xffffffffu, b[hi], (2 * q + 1) * 4 + src);
    r0 += ks_blo(ar) * ks_blo(b0) + ks_bhi(ar) * ks_bhi(b0);
    r1 += ks_blo(ar) * ks_blo(b1) + ks_bhi(ar) * ks_bhi(b1);
    r2 += ks_blo(ar8) * ks_blo(b0) + ks_bhi(ar8) * ks_bhi(b0);
    r3 += ks_blo(ar8) * ks_blo(b1) + ks_bhi(ar8) * ks_bhi(b1);
  }
  c[0] += r0; c[1] += r1; c[2] += r2; c[3] += r3;
}
__device__ inline unsigned ks_pack2bf(float lo, float hi) {
  return (unsigned)__bfloat16_as_ushort(__float2bfloat16(lo)) | ((unsigned)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16);
}
#else
__device__ __forceinline__ void ks_cp16(__half* dst, const __half* src, bool valid) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void ks_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void ks_cp_wait0() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void ks_ldsm_x4(unsigned* r, const __half* p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ks_ldsm_x4o(unsigned* r, const __half* base, int off) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(base) + 2u * (unsigned)off;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ks_ldsm_x4_to(unsigned* r, const __half* base, int off) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(base) + 2u * (unsigned)off;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ float ks_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ unsigned ks_pack2f(float lo, float hi) {   // one cvt.rn.f16x2.f32
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ void ks_mma16816_bf(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ unsigned ks_pack2bf(float lo, float hi) {  // cvt's first source goes to the upper half
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif
"""


def flash_mma2_valid(k: dict) -> bool:
    nw, rows, bkv = k["warps"], k["rows"], k["block_kv"]
    rm = rows // 16
    if rows not in (16, 32) or nw not in (2, 4, 8) or bkv not in (16, 32, 64, 128):
        return False
    # score fragments rm * bkv / 2 floats a thread (+ rm * 64 O accumulators at Dh=128): keep under ~255 registers
    if rm * bkv > 128:
        return False
    return smem_bytes(k) <= 227 * 1024


def q_aliased(k: dict) -> bool:
    """Q staged in K/V buffer 1 (free until tile 1 is prefetched): with 16 rows a warp Q is read once, into
    registers, before the first tile's barrier; it needs 2 * block_kv >= BQ rows there."""
    return k["rows"] == 16 and 2 * k["block_kv"] >= k["warps"] * k["rows"]


def smem_bytes(k: dict) -> int:
    bq = 0 if q_aliased(k) else k["warps"] * k["rows"]
    return (bq + 4 * k["block_kv"]) * (DH_MAX + 8) * 2


def _source(k: dict) -> str:
    nw, rows, bkv = k["warps"], k["rows"], k["block_kv"]
    rm = rows // 16
    qreg = rm == 1
    L = [
        f"constexpr int NW = {nw}; constexpr int RM = {rm}; constexpr int BKV = {bkv};",
        "constexpr int NTH = NW * 32; constexpr int BQ = NW * RM * 16;",
        "constexpr int SD = DH + 8;                   // padded smem row (halves): conflict-free ldmatrix / cp.async",
        "constexpr int DC = DH / 8;                   // 16-byte chunks per row",
        "constexpr int NF = BKV / 8;                  // S fragments (8 keys each) per m16 block",
        "constexpr int KD = DH / 16;                  // k-steps over the head dim",
        "constexpr int OF = DH / 8;                   // O fragments (8 columns each) per m16 block",
        "extern __shared__ __align__(16) __half ks_smem[];",
        f"constexpr int QO = {'2 * BKV * SD' if q_aliased(k) else '0'};   // Q's BQ rows: "
        + ("in K/V buffer 1 (read into registers before tile 1 is prefetched there)" if q_aliased(k) else "their own"),
        f"constexpr int KVO = {'0' if q_aliased(k) else 'BQ * SD'};   // K/V: [buffer][K | V][BKV rows]",
        "__half* Qs = ks_smem + QO;",
        "__half* KVs = ks_smem + KVO;",
        *BLOCK_PROLOGUE,
        "const int ql = warp * RM * 16;                         // this warp's first row inside the block",
        "const int qw = q0 + ql;",
        "// fp16 or bf16: the data only moves as 16-bit patterns (cp.async, ldmatrix); the MMA and the packing interpret it",
        "const __half* Qh = reinterpret_cast<const __half*>(Q) + (size_t)(b * HQ + h) * SEQ * DH;",
        "const __half* Kh = reinterpret_cast<const __half*>(K) + (size_t)(b * HKV + hk) * SEQ * DH;",
        "const __half* Vh = reinterpret_cast<const __half*>(V) + (size_t)(b * HKV + hk) * SEQ * DH;",
        "const float sc = rsqrtf((float)DH) * 1.4426950408889634f;   // scale * log2(e), folded into the exponent",
        "// ldmatrix row addresses of this lane: A (Q) and B (K) fragments",
        "const int arow = ((lane >> 3) & 1) * 8 + (lane & 7), acol = (lane >> 4) * 8;",
        "const int krow = (lane >> 4) * 8 + (lane & 7), kcol = ((lane >> 3) & 1) * 8;",
        "const int vrow = ((lane >> 3) & 1) * 8 + (lane & 7), vcol = (lane >> 4) * 8;",
        "const int kend = CAUSAL ? ((q0 + BQ < SEQ) ? q0 + BQ : SEQ) : SEQ;",
        "const int ntile = (kend + BKV - 1) / BKV;",
        "#define KS_TILE(j0, buf) \\",
        "  { __half* Kd = KVs + (buf) * 2 * BKV * SD; __half* Vd = Kd + BKV * SD; \\",
        "    for (int f = t; f < BKV * DC; f += NTH) { const int r = f / DC; const int c = (f % DC) * 8; \\",
        "      const int j = (j0) + r; const bool ok = j < SEQ; const size_t go = (size_t)(ok ? j : 0) * DH + c; \\",
        "      ks_cp16(Kd + r * SD + c, Kh + go, ok); ks_cp16(Vd + r * SD + c, Vh + go, ok); } }",
        "for (int f = t; f < BQ * DC; f += NTH) {",
        "  const int r = f / DC; const int c = (f % DC) * 8; const int i = q0 + r; const bool ok = i < SEQ;",
        "  ks_cp16(Qs + r * SD + c, Qh + (size_t)(ok ? i : 0) * DH + c, ok);",
        "}",
        "KS_TILE(0, 0)",
        "ks_cp_commit();",
    ]
    if qreg:
        L += [
            "unsigned qa[KD][4];",
            "ks_cp_wait0();",
            "__syncthreads();",
            "for (int kd = 0; kd < KD; ++kd) ks_ldsm_x4o(qa[kd], ks_smem, QO + (ql + arow) * SD + kd * 16 + acol);",
        ]
    L += [
        "float o[RM][OF][4];",
        "for (int m = 0; m < RM; ++m) for (int f = 0; f < OF; ++f) for (int i = 0; i < 4; ++i) o[m][f][i] = 0.0f;",
        "float mr[RM][2], lr[RM][2];",
        "for (int m = 0; m < RM; ++m) { mr[m][0] = -INFINITY; mr[m][1] = -INFINITY; lr[m][0] = 0.0f; lr[m][1] = 0.0f; }",
        "for (int tile = 0; tile < ntile; ++tile) {",
        "  const int j0 = tile * BKV;",
        "  ks_cp_wait0();                                  // this thread's copies of tile `tile` have landed",
        "  __syncthreads();                                // everyone's have; everyone is done with tile - 1",
        "  if (tile + 1 < ntile) { KS_TILE(j0 + BKV, (tile + 1) & 1) ks_cp_commit(); }   // overlaps the math below",
        "  if (!(CAUSAL && j0 > qw + RM * 16 - 1)) {       // a warp entirely above the diagonal skips the tile",
        "    const int kb0 = KVO + (tile & 1) * 2 * BKV * SD; const int vb0 = kb0 + BKV * SD;   // offsets in ks_smem",
        "    float s[RM][NF][4];",
        "    for (int m = 0; m < RM; ++m) for (int f = 0; f < NF; ++f) for (int i = 0; i < 4; ++i) s[m][f][i] = 0.0f;",
        "    for (int kd = 0; kd < KD; ++kd) {",
    ]
    if qreg:
        L += ["      const unsigned* a0 = qa[kd];"]
    else:
        L += ["      unsigned qf[RM][4];",
              "      for (int m = 0; m < RM; ++m) ks_ldsm_x4o(qf[m], ks_smem, QO + (ql + m * 16 + arow) * SD + kd * 16 + acol);"]
    L += [
        "      for (int fp = 0; fp < NF / 2; ++fp) {",
        "        unsigned kb[4];",
        "        ks_ldsm_x4o(kb, ks_smem, kb0 + (fp * 16 + krow) * SD + kd * 16 + kcol);",
        "        for (int m = 0; m < RM; ++m) {",
        "          const unsigned* am = " + ("a0;" if qreg else "qf[m];"),
        "          ks_mma16816(s[m][2 * fp], am, kb);",
        "          ks_mma16816(s[m][2 * fp + 1], am, kb + 2);",
        "        }",
        "      }",
        "    }",
        "    const bool mask = (CAUSAL && j0 + BKV - 1 > qw) || j0 + BKV > SEQ;   // diagonal or tail tile only",
        "    if (mask) {",
        "      for (int m = 0; m < RM; ++m) for (int f = 0; f < NF; ++f) for (int i = 0; i < 4; ++i) {",
        "        const int key = j0 + f * 8 + 2 * q + (i & 1); const int row = qw + m * 16 + g + 8 * (i >> 1);",
        "        if (key >= SEQ || (CAUSAL && key > row)) s[m][f][i] = -INFINITY;",
        "      }",
        "    }",
        "    for (int m = 0; m < RM; ++m) {",
        "      float mx0 = mr[m][0], mx1 = mr[m][1];         // raw-score maxima (the scale is positive)",
        "      for (int f = 0; f < NF; ++f) {",
        "        mx0 = fmaxf(mx0, fmaxf(s[m][f][0], s[m][f][1])); mx1 = fmaxf(mx1, fmaxf(s[m][f][2], s[m][f][3]));",
        "      }",
        "      for (int x = 1; x < 4; x *= 2) {",
        "        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));",
        "        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));",
        "      }",
        "      // finite after the first tile: key 0 is valid for every row, causal or not",
        "      const float c0 = ks_exp2((mr[m][0] - mx0) * sc), c1 = ks_exp2((mr[m][1] - mx1) * sc);",
        "      mr[m][0] = mx0; mr[m][1] = mx1;",
        "      const float n0 = mx0 * sc, n1 = mx1 * sc;",
        "      float l0 = 0.0f, l1 = 0.0f;",
        "      for (int f = 0; f < NF; ++f) {",
        "        s[m][f][0] = ks_exp2(fmaf(s[m][f][0], sc, -n0)); s[m][f][1] = ks_exp2(fmaf(s[m][f][1], sc, -n0));",
        "        s[m][f][2] = ks_exp2(fmaf(s[m][f][2], sc, -n1)); s[m][f][3] = ks_exp2(fmaf(s[m][f][3], sc, -n1));",
        "        l0 += s[m][f][0] + s[m][f][1]; l1 += s[m][f][2] + s[m][f][3];",
        "      }",
        "      lr[m][0] = lr[m][0] * c0 + l0; lr[m][1] = lr[m][1] * c1 + l1;",
        "      // the O rescale (OF * 4 FMULs) only when some row of the warp has a new max (exp2(0) == 1 exactly)",
        "      if (__any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f)) {",
        "        for (int f = 0; f < OF; ++f) { o[m][f][0] *= c0; o[m][f][1] *= c0; o[m][f][2] *= c1; o[m][f][3] *= c1; }",
        "      }",
        "    }",
        "    for (int kk = 0; kk < BKV / 16; ++kk) {",
        "      unsigned pa[RM][4];",
        "      for (int m = 0; m < RM; ++m) {",
        "        pa[m][0] = ks_pack2f(s[m][2 * kk][0], s[m][2 * kk][1]); pa[m][1] = ks_pack2f(s[m][2 * kk][2], s[m][2 * kk][3]);",
        "        pa[m][2] = ks_pack2f(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);",
        "        pa[m][3] = ks_pack2f(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);",
        "      }",
        "      const int vr0 = vb0 + (kk * 16 + vrow) * SD + vcol;",
        "      for (int dp = 0; dp < DH / 16; ++dp) {",
        "        unsigned vb[4];",
        "        ks_ldsm_x4_to(vb, ks_smem, vr0 + dp * 16);",
        "        for (int m = 0; m < RM; ++m) {",
        "          ks_mma16816(o[m][2 * dp], pa[m], vb);",
        "          ks_mma16816(o[m][2 * dp + 1], pa[m], vb + 2);",
        "        }",
        "      }",
        "    }",
        "  }",
        "}",
        "#undef KS_TILE",
        "__half* Oh = reinterpret_cast<__half*>(out) + (size_t)(b * HQ + h) * SEQ * DH;",
        "for (int m = 0; m < RM; ++m) {",
        "  float l0 = lr[m][0], l1 = lr[m][1];",
        "  for (int x = 1; x < 4; x *= 2) { l0 += __shfl_xor_sync(0xffffffffu, l0, x); l1 += __shfl_xor_sync(0xffffffffu, l1, x); }",
        "  const float i0 = 1.0f / l0, i1 = 1.0f / l1;",
        "  const int ra = qw + m * 16 + g, rb = ra + 8;",
        "  for (int f = 0; f < OF; ++f) {",
        "    const int c = f * 8 + 2 * q;",
        "    if (ra < SEQ) *reinterpret_cast<unsigned*>(Oh + (size_t)ra * DH + c) = ks_pack2f(o[m][f][0] * i0, o[m][f][1] * i0);",
        "    if (rb < SEQ) *reinterpret_cast<unsigned*>(Oh + (size_t)rb * DH + c) = ks_pack2f(o[m][f][2] * i1, o[m][f][3] * i1);",
        "  }",
        "}",
    ]
    out = []
    for line in L:      # register arrays must be indexed by constants: unroll every loop but the tile loop
        st = line.lstrip()
        if st.startswith("for (") and "tile" not in st and "f = t;" not in st:
            out.append(line[:len(line) - len(st)] + "#pragma unroll")
        out.append(line)
    return "\n".join(out)


def _source_bf16(k: dict) -> str:
    src = _source(k).replace("ks_mma16816(", "ks_mma16816_bf(").replace("ks_pack2f(", "ks_pack2bf(")
    assert "ks_mma16816(" not in src and "ks_pack2f(" not in src
    return src


def attention_module(kind: str, tid: str, k: dict, src_f16: str, src_bf16: str, hdr: str, smem: int, nth: int,
                     bq: int, dh_ok: str, dh_what: str) -> str:
    """The candidate module of a tensor-core attention template: its fp16 and bf16 kernel objects and `kernel(q, k,
    v, causal)`, `nth` threads a threadgroup over `bq` query rows; `dh_ok` is the head-dimension test (Python on
    Dh), `dh_what` says it in words for the refusal."""
    return f'''{header("attention", tid, k, kind)}
_SOURCE = r"""
{src_f16}
"""
_SOURCE_BF16 = r"""
{src_bf16}
"""
_HEADER = r"""
{hdr}
"""
_K = {kernel_ctor(kind, tag(tid, k, kind), ["Q", "K", "V", "causal"], ["out"], shared_memory=smem)}
_K_BF16 = {kernel_ctor(kind, tag(tid, k, kind) + "_bf16", ["Q", "K", "V", "causal"], ["out"], src_var="_SOURCE_BF16",
                       shared_memory=smem)}


def kernel(q, k, v, causal):
    Bt, Hq, L, Dh = q.shape
    Hkv = k.shape[1]
    if q.dtype not in (mx.float16, mx.bfloat16) or not ({dh_ok}) or Hq % Hkv or k.shape[2] != L:
        raise ValueError(f"{tid}: fp16/bf16 self-attention with {dh_what} and Hq % Hkv == 0, "
                         f"got {{q.dtype}} q {{q.shape}} k {{k.shape}}")
    kern = _K if q.dtype == mx.float16 else _K_BF16
    return kern(inputs=[q, k, v, causal],
              template=[("HQ", Hq), ("HKV", Hkv), ("DH", Dh), ("SEQ", L)],
              grid=(Bt * Hq * {nth}, (L + {bq} - 1) // {bq}, 1), threadgroup=({nth}, 1, 1),
              output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''


def render_flash_mma2(k: dict, kind: str) -> str:
    if kind != "cuda":
        raise ValueError("attention.flash_mma2 renders cuda candidates (tensor cores through inline PTX)")
    return attention_module(kind, "attention.flash_mma2", k, _source(k), _source_bf16(k),
                            f"{MMA_HEADER}\n{LDSM_HEADER}\n{ASYNC_HEADER}", smem_bytes(k), 32 * k["warps"],
                            k["warps"] * k["rows"], f"Dh % 16 == 0 and Dh <= {DH_MAX}",
                            f"Dh % 16 == 0, Dh <= {DH_MAX}")
