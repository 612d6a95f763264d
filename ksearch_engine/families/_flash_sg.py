"""Flash attention prefill on Apple's matrix units: the Metal twin of attention.flash_mma2, on simdgroup_matrix 8x8
(`simdgroup_multiply_accumulate`), fp16 or bf16 in (the template type T), fp32 scores and output accumulators,
causal or not (the task's `causal` flag), GQA, any L.

A threadgroup owns BQ = 8 * warps query rows of one head; each simdgroup owns 8 of them and keeps its Q rows as
DH / 8 simdgroup_matrix<T> fragments for the whole pass (staged once through threadgroup memory, zero past the
end). Per KV tile of BKV keys (K and V staged in threadgroup memory, rows padded by 8 elements, zero past the
end): S (8 x BKV) = Q K^T with K's 8x8 blocks loaded transposed; the online softmax runs on each lane's two
elements of S (`thread_elements()`, MLX's fragment layout: row (q & 4) + (lane / 2) % 4, columns (q & 2) * 2 +
(lane % 2) * 2 + {0, 1}, q = lane / 4, so a row's max and sum are shuffles over lane bits 0 and 3), in the log2
domain with the scale folded into the exponent, the mask only on diagonal / tail tiles; P goes back into
simdgroup_matrix<T> fragments through the same elements, and O (8 x DH, fp32 fragments) += P V.
Threadgroup memory: max(BQ, 2 BKV) rows of DH + 8 elements (Q's staging area is the K/V area) <= 32 KB at DH=128.

The simulator models simdgroup_matrix exactly enough for this (ksim.h: every lane computes the whole 8x8 tile,
thread_elements() is the lane's two elements in MLX's layout and edits through it are exchanged before a tile is
used), so the fragment bookkeeping of the softmax is checked.

Knobs: warps (simdgroups; BQ = 8 * warps), block_kv (keys per tile).
"""
from __future__ import annotations

from ._src import header, kernel_ctor, tag

DH_MAX = 128


def tg_bytes(k: dict, dh: int = DH_MAX, elem: int = 2) -> int:
    rows = max(8 * k["warps"], 2 * k["block_kv"])
    return rows * (dh + 8) * elem


def flash_sg_valid(k: dict) -> bool:
    return (k["warps"] in (1, 2, 4, 8) and k["block_kv"] in (8, 16, 32, 64)
            and tg_bytes(k) <= 32768)


def _source(k: dict) -> str:
    nw, bkv = k["warps"], k["block_kv"]
    return "\n".join([
        f"constexpr int NW = {nw}; constexpr int BKV = {bkv};",
        "constexpr int NTH = NW * 32; constexpr int BQ = NW * 8;",
        "constexpr int SD = DH + 8;                        // padded threadgroup row (elements)",
        "constexpr int KVR = (BQ > 2 * BKV) ? BQ : 2 * BKV;  // rows of the staging area (Q first, then K | V)",
        "constexpr int NB = BKV / 8;                       // 8-key blocks of a tile",
        "constexpr int ND = DH / 8;                        // 8-column blocks of the head dim",
        "threadgroup T kv_s[KVR * SD];",
        "const bool CAUSAL = causal[0] > 0.5f;",
        "const int t = (int)thread_position_in_threadgroup.x;",
        "const int sg = (int)simdgroup_index_in_threadgroup; const int lane = (int)thread_index_in_simdgroup;",
        "const int fm = ((lane / 4) & 4) + (lane / 2) % 4;       // this lane's row of an 8x8 fragment",
        "const int fn = ((lane / 4) & 2) * 2 + (lane % 2) * 2;   // and its two columns fn, fn + 1",
        "const int bh = (int)threadgroup_position_in_grid.x;",
        "const int b = bh / HQ; const int h = bh % HQ; const int hk = h / (HQ / HKV);",
        "const int nqb = (SEQ + BQ - 1) / BQ;",
        "const int q0 = (nqb - 1 - (int)threadgroup_position_in_grid.y) * BQ;   // longest (causal) blocks first",
        "const int qs = q0 + sg * 8;                             // this simdgroup's first row",
        "const int row = qs + fm;                                // this lane's row",
        "const size_t qoff = (size_t)(b * HQ + h) * SEQ * DH;",
        "const size_t kvoff = (size_t)(b * HKV + hk) * SEQ * DH;",
        "const float sc = metal::rsqrt((float)DH) * 1.4426950408889634f;   // scale * log2(e), in the exponent",
        "for (int f = t; f < BQ * DH; f += NTH) {",
        "  const int r = f / DH, c = f % DH; const int i = q0 + r;",
        "  kv_s[r * SD + c] = i < SEQ ? Q[qoff + (size_t)i * DH + c] : T(0);",
        "}",
        "threadgroup_barrier(mem_flags::mem_threadgroup);",
        "simdgroup_matrix<T, 8, 8> qf[ND];",
        "for (int d = 0; d < ND; ++d) simdgroup_load(qf[d], kv_s, SD, ulong2((ulong)(d * 8), (ulong)(sg * 8)));",
        "simdgroup_matrix<float, 8, 8> o[ND];",
        "for (int d = 0; d < ND; ++d) o[d] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);",
        "float mrow = -INFINITY, lrow = 0.0f;                    // row `row`: max of the raw scores, partial sum",
        "const int kend = CAUSAL ? ((q0 + BQ < SEQ) ? q0 + BQ : SEQ) : SEQ;",
        "threadgroup const T* Ks = kv_s; threadgroup const T* Vs = kv_s + BKV * SD;",
        "for (int j0 = 0; j0 < kend; j0 += BKV) {",
        "  threadgroup_barrier(mem_flags::mem_threadgroup);     // everyone is done with Q's staging / the last tile",
        "  for (int f = t; f < BKV * DH; f += NTH) {",
        "    const int r = f / DH, c = f % DH; const int j = j0 + r; const bool ok = j < SEQ;",
        "    const size_t a = kvoff + (size_t)(ok ? j : 0) * DH + c;",
        "    kv_s[r * SD + c] = ok ? K[a] : T(0);",
        "    kv_s[(BKV + r) * SD + c] = ok ? V[a] : T(0);",
        "  }",
        "  threadgroup_barrier(mem_flags::mem_threadgroup);",
        "  if (CAUSAL && j0 > qs + 7) continue;                 // the whole simdgroup is above the diagonal",
        "  simdgroup_matrix<float, 8, 8> s[NB];",
        "  for (int nb = 0; nb < NB; ++nb) {",
        "    s[nb] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);",
        "    for (int d = 0; d < ND; ++d) {",
        "      simdgroup_matrix<T, 8, 8> kt;                      // K^T block: head-dim rows d*8.., key columns nb*8..",
        "      simdgroup_load(kt, Ks, SD, ulong2((ulong)(d * 8), (ulong)(nb * 8)), true);",
        "      simdgroup_multiply_accumulate(s[nb], qf[d], kt, s[nb]);",
        "    }",
        "  }",
        "  const bool mask = (CAUSAL && j0 + BKV - 1 > qs) || j0 + BKV > SEQ;   // diagonal or tail tile only",
        "  float mx = mrow;",
        "  for (int nb = 0; nb < NB; ++nb) {",
        "    float v0 = s[nb].thread_elements()[0], v1 = s[nb].thread_elements()[1];",
        "    if (mask) {",
        "      const int key = j0 + nb * 8 + fn;",
        "      if (key >= SEQ || (CAUSAL && key > row)) v0 = -INFINITY;",
        "      if (key + 1 >= SEQ || (CAUSAL && key + 1 > row)) v1 = -INFINITY;",
        "      s[nb].thread_elements()[0] = v0; s[nb].thread_elements()[1] = v1;",
        "    }",
        "    mx = metal::max(mx, metal::max(v0, v1));",
        "  }",
        "  mx = metal::max(mx, simd_shuffle_xor(mx, 1)); mx = metal::max(mx, simd_shuffle_xor(mx, 8));",
        "  // finite from the first tile on: key 0 is valid for every row, causal or not",
        "  const float c = metal::exp2((mrow - mx) * sc);",
        "  mrow = mx;",
        "  const float n = mx * sc;",
        "  float l = 0.0f;",
        "  simdgroup_matrix<T, 8, 8> p[NB];",
        "  for (int nb = 0; nb < NB; ++nb) {",
        "    const float p0 = metal::exp2(metal::fma(s[nb].thread_elements()[0], sc, -n));",
        "    const float p1 = metal::exp2(metal::fma(s[nb].thread_elements()[1], sc, -n));",
        "    l += p0 + p1;",
        "    p[nb].thread_elements()[0] = T(p0); p[nb].thread_elements()[1] = T(p1);",
        "  }",
        "  lrow = lrow * c + l;",
        "  for (int d = 0; d < ND; ++d) {",
        "    o[d].thread_elements()[0] *= c; o[d].thread_elements()[1] *= c;",
        "    for (int nb = 0; nb < NB; ++nb) {",
        "      simdgroup_matrix<T, 8, 8> vm;                      // V block: key rows nb*8.., columns d*8..",
        "      simdgroup_load(vm, Vs, SD, ulong2((ulong)(d * 8), (ulong)(nb * 8)));",
        "      simdgroup_multiply_accumulate(o[d], p[nb], vm, o[d]);",
        "    }",
        "  }",
        "}",
        "lrow += simd_shuffle_xor(lrow, 1); lrow += simd_shuffle_xor(lrow, 8);",
        "const float inv = 1.0f / lrow;",
        "if (row < SEQ) {",
        "  for (int d = 0; d < ND; ++d) {",
        "    const size_t a = qoff + (size_t)row * DH + d * 8 + fn;",
        "    out[a] = T(o[d].thread_elements()[0] * inv); out[a + 1] = T(o[d].thread_elements()[1] * inv);",
        "  }",
        "}",
    ])


def render_flash_sg(k: dict, kind: str) -> str:
    if kind != "metal":
        raise ValueError("attention.flash_sg renders metal candidates (simdgroup_matrix)")
    tid = "attention.flash_sg"
    nth, bq = 32 * k["warps"], 8 * k["warps"]
    return f'''{header("attention", tid, k, kind)}
_SOURCE = r"""
{_source(k)}
"""
_HEADER = ""
_K = {kernel_ctor(kind, tag(tid, k, kind), ["Q", "K", "V", "causal"], ["out"])}


def kernel(q, k, v, causal):
    Bt, Hq, L, Dh = q.shape
    Hkv = k.shape[1]
    if q.dtype not in (mx.float16, mx.bfloat16) or Dh % 8 or Dh > {DH_MAX} or Hq % Hkv or k.shape[2] != L:
        raise ValueError(f"{tid}: fp16/bf16 self-attention with Dh % 8 == 0, Dh <= {DH_MAX} and Hq % Hkv == 0, "
                         f"got {{q.dtype}} q {{q.shape}} k {{k.shape}}")
    return _K(inputs=[q, k, v, causal],
              template=[("T", q.dtype), ("HQ", Hq), ("HKV", Hkv), ("DH", Dh), ("SEQ", L)],
              grid=(Bt * Hq * {nth}, (L + {bq} - 1) // {bq}, 1), threadgroup=({nth}, 1, 1),
              output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''
