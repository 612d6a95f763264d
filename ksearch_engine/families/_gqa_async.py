"""Split-KV GQA decode (contiguous or paged) with warp-private cp.async pipelines, in CUDA and Metal from one source.

Why (issue 15, batch 1, D128, KV 4096 on an H100): gqa_tiles / gqa_fused sit at 31% of HBM at GQA and 60-64% at
MHA, about as slow on an H200 as on an H100 at GQA: fixed costs and serial latency, not bandwidth, decide. Each
of their threadgroups waits for a whole tile behind a barrier, then computes it on CUDA cores (a 64-key tile at
G = 4: by count of its FMAs, shared loads and conversions, some 1000-1500 instructions a warp, two warps a
scheduler), and only then asks for more, so data arrival and arithmetic take turns; every split adds a 2 KB
partial and the second kernel's cost. Little's law: 3.35 TB/s x ~0.7 us ~ 2.3 MB in flight, ~18 KB an SM; at
GQA the whole 16.8 MB is only ~127 KB an SM, so the way to the floor (~5 us of transfer) is to ask for all of it
at once and have little left to compute when the last byte lands.

Work split: grid (batch * kv_heads, splits), NT = 32 * warps threads; a threadgroup owns one KV head (its G query
heads share every K/V byte) and CHUNK keys; the chunk is cut into tiles of TK keys and warp w takes tiles
w, w + W, w + 2W, ... (the threadgroup reads one contiguous stretch at a time).

* Data movement (CUDA): each warp has its own ring of `stages` buffers in (dynamic) shared memory, one tile of K
  and V each, filled with `cp.async.cg` 16-byte copies (a row's 16-byte chunks land XOR-swizzled by row & 7, so
  both the per-key reads and ldmatrix are free of bank conflicts). The prologue issues the first `stages` tiles;
  each tile waits only for its own group (`cp.async.wait_group stages-1`) and a __syncwarp, and the buffer it
  frees is refilled at once with the warp's tile `stages` on. No threadgroup barrier in the key loop: warps run
  apart, so the SM's demand on memory is smooth, and W * (stages - 1) tiles (16 KB each at TK = 32, D = 128)
  are in flight per threadgroup while one is being computed. Paged: each lane copies whole rows of a tile, so
  it needs the page of each of its rows; those are read one refill ahead (prologue: stage by stage, L1 hits
  after the first).
* compute='mma' (CUDA): scores S = Q K^T and O += P V on tensor cores (mma.sync m16n8k16, f16 in, f32 out): the
  G query heads are the M rows (padded to 16; Q's A fragments stay in registers for the whole pass), K's B
  fragments from `ldmatrix.x4`, V's from `ldmatrix.x4.trans`, P goes from the score accumulators straight into
  the A fragments of P V (no shared memory, no shuffles but two per row for the maximum). About 200
  instructions a 32-key tile instead of ~1500, so arithmetic hides under the copies even at G = 4 and leaves
  little tail after the last tile lands. G <= 16, D in {32, 64, 128}, fp16.
* compute='fma' (and every Metal render): CUDA cores, one key per lane for the scores (q from shared memory,
  broadcast), the tile maximum per head by one `redux.sync` (floats mapped to ordered ints; Metal: simd_max),
  p through a small per-warp buffer, and P V with a lane owning 8 columns of 32 / (D / 8) key groups.
* Softmax in the log2 domain (q scaled by log2(e) / sqrt(D), ex2.approx); per-lane running sums.
* End of a threadgroup: each warp leaves (m, l, o) in its own (now idle) ring, one barrier, and the threadgroup
  merges its warps by log-sum-exp weights with float4 reads: the output (one split) or its fp32 partial.
* merge='fused' (CUDA): the threadgroups of a KV head count themselves in a persistent int32 workspace
  (`sem_inout`, zero between calls); the last to arrive merges the head's splits, with the merge spread over
  the whole threadgroup (a warp per query head finds the weights, then each thread sums one float4 of the
  output over all splits, its loads all independent) instead of the serial loops of gqa_fused; it then
  zeroes the counter. merge='kernel' (and Metal): the two-kernel merge of gqa_tiles.
* Metal: no cp.async and at most 32 KB of threadgroup memory, so the compute reads K/V straight from device
  memory (no staging: `stages` does nothing there), with the same compute='fma' code.

The simulator runs the CUDA render with twins (_mma.py's for mma.sync and ldmatrix.trans; here ldmatrix and
cp.async): a cp.async twin queues each copy in the thread's own pipe object and performs it only when a
wait_group retires its group, so a tile read before its wait reads the 0xFF fill of fresh shared memory and
fails the check. Not visible there: a refill racing another lane's reads of the same buffer (a missing
__syncwarp before the refill), since the twins of ldmatrix finish their reads inside their own collectives.

Knobs: warps, block_keys (TK, keys per warp tile), stages (ring depth), target_blocks (threadgroups aimed at:
splits = target_blocks // (batch * kv_heads)), compute (mma / fma), merge (fused / kernel).
"""
from __future__ import annotations

from ._gqa_decode import _combine
from ._mma import LDSM_HEADER, MMA_HEADER
from ._src import Dialect, header, kernel_ctor, kv_signature, tag

ASYNC_DESCRIPTION = ("split-KV GQA decode with warp-private cp.async rings (no threadgroup barrier in the key loop, "
                     "tiles in flight while one is computed), scores and P.V on tensor cores (mma) or CUDA cores, "
                     "and a fused split merge spread over the last threadgroup of each KV head")

# The knob sets bench/headline.py (DEC) and bench/families.py (SWEEPS) time first, and tests/unit/test_decode_fast.py
# compiles with nvcc at the bench shapes. Why each (none timed yet; H100, B1, D128, KV 4096):
#  1 the design point: 4 warps x 2 stages of 32-key tiles (128 KB: one threadgroup an SM), 132 // (B * Hkv) splits
#    (GQA: 16 splits of 256 keys, every byte of a split asked for in the prologue; MHA: 4 of 1024, 8 tiles a warp);
#  2 8 warps of 16-key tiles: two warps a scheduler to hide the ldmatrix -> mma latency, finer arrival granularity;
#  3 a third stage (192 KB): more bytes in flight per SM for the streaming MHA case;
#  4 two threadgroups an SM (96 KB each, 264 // (B * Hkv) splits): 8 warps an SM from two independent splits;
#  5 = 1 with the two-kernel merge: what the fused merge saves (or costs) at GQA, where gqa_fused fused lost ~2 us to its own two-kernel merge;
#  6 = 1 on CUDA cores: what the tensor cores save.
BENCH_KNOBS = [
    dict(warps=4, block_keys=32, stages=2, target_blocks=132, compute="mma", merge="fused"),
    dict(warps=8, block_keys=16, stages=2, target_blocks=132, compute="mma", merge="fused"),
    dict(warps=4, block_keys=32, stages=3, target_blocks=132, compute="mma", merge="fused"),
    dict(warps=4, block_keys=16, stages=3, target_blocks=264, compute="mma", merge="fused"),
    dict(warps=4, block_keys=32, stages=2, target_blocks=132, compute="mma", merge="kernel"),
    dict(warps=4, block_keys=32, stages=2, target_blocks=132, compute="fma", merge="fused"),
]

SMEM_CUDA = 232448          # the most dynamic shared memory an H100/H200 block can have
SMEM_METAL = 32768

KD_HEADER = r"""
#ifdef KSIM_CUDA
// cp.async twin: a copy waits in this thread's pipe until a wait_group retires its group (zero fill when the
// source is not valid), so a read of a tile before its wait sees the 0xFF fill of fresh shared memory
#define KD_PIPE_CAP 1024
struct KdPipe {
  unsigned char* dst[KD_PIPE_CAP]; const unsigned char* src[KD_PIPE_CAP]; int grp[KD_PIPE_CAP];
  int n = 0; int open = 0;                       // copies pending; the group being filled (= groups committed)
};
__device__ inline void kd_cp16(KdPipe& p, void* dst, const void* src, bool valid) {
  assert(p.n < KD_PIPE_CAP);
  p.dst[p.n] = (unsigned char*)dst; p.src[p.n] = valid ? (const unsigned char*)src : nullptr; p.grp[p.n] = p.open;
  ++p.n;
}
__device__ inline void kd_commit(KdPipe& p) { ++p.open; }
template <int N> __device__ inline void kd_wait(KdPipe& p) {
  const int upto = p.open - N;                   // every committed group older than the newest N lands now
  int k = 0;
  for (int i = 0; i < p.n; ++i) {
    if (p.grp[i] < upto) {
      if (p.src[i]) memcpy(p.dst[i], p.src[i], 16); else memset(p.dst[i], 0, 16);
    } else {
      p.dst[k] = p.dst[i]; p.src[k] = p.src[i]; p.grp[k] = p.grp[i]; ++k;
    }
  }
  p.n = k;
}
// ldmatrix.x4 (no .trans) twin: lane L gives the row address of row L % 8 of matrix L / 8; register i receives
// (M_i[g][2q], M_i[g][2q+1])
__device__ inline void kd_ldsm_x4(unsigned* r, const __half* p) {
  const int lane = threadIdx.x & 31; const int g = lane >> 2; const int q = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const __half* a = __shfl_sync(0xffffffffu, p, 8 * i + g);
    r[i] = (unsigned)__half_as_ushort(a[2 * q]) | ((unsigned)__half_as_ushort(a[2 * q + 1]) << 16);
  }
}
__device__ inline float kd_exp2(float x) { return exp2f(x); }
#else
struct KdPipe {};
__device__ __forceinline__ void kd_cp16(KdPipe&, void* dst, const void* src, bool valid) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void kd_commit(KdPipe&) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void kd_wait(KdPipe&) {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
__device__ __forceinline__ void kd_ldsm_x4(unsigned* r, const __half* p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ float kd_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#endif
// the maximum over the warp of a float: one redux.sync on its bits mapped to an order-preserving int
__device__ inline float kd_warp_max(float v) {
  int i = __float_as_int(v);
  i = i >= 0 ? i : (i ^ 0x7fffffff);
  i = __reduce_max_sync(0xffffffffu, i);
  return __int_as_float(i >= 0 ? i : (i ^ 0x7fffffff));
}
"""


def async_valid(k: dict) -> bool:
    w, tk, st = k["warps"], k["block_keys"], k["stages"]
    if w not in (1, 2, 4, 8) or tk not in (16, 32, 64) or st not in (1, 2, 3, 4) or k["target_blocks"] < 1:
        return False
    if k["compute"] not in ("mma", "fma") or k["merge"] not in ("fused", "kernel"):
        return False
    # the rings at D = 128 (2 x TK x 256 bytes a stage and warp) must leave room in 227 KB
    return w * st * tk * 512 <= 200 * 1024


def _unroll(lines: list[str], cuda: bool) -> list[str]:
    """`#pragma unroll` before every loop over a register array (all but the key loop and the strided ones)."""
    if not cuda:
        return lines
    out = []
    for ln in lines:
        s = ln.lstrip()
        if s.startswith("for (") and "KEYLOOP" not in s and "+= NT" not in s and "+= W)" not in s \
                and "+= 32)" not in s and not (out and out[-1].lstrip().startswith("#pragma")):
            out.append(ln[:len(ln) - len(s)] + "#pragma unroll")
        out.append(ln.replace("  // KEYLOOP", ""))
    return out


def _source(kind: str, k: dict, paged: bool, fused: bool) -> str:
    d = Dialect(kind)
    cuda = not d.metal
    mma = cuda and k["compute"] == "mma"
    nt, tk, st = 32 * k["warps"], k["block_keys"], k["stages"]
    ni = d.neg_inf
    tg = "threadgroup " if d.metal else ""
    dev = "device const T*" if d.metal else "const T*"
    exp2 = "metal::exp2" if d.metal else "kd_exp2"
    fmax = "metal::max" if d.metal else "fmaxf"
    syncwarp = "simdgroup_barrier(mem_flags::mem_threadgroup);" if d.metal else "__syncwarp();"

    def row(j: str, pid: str) -> str:
        """Element offset of key row j of this (b, hk); paged through the page id `pid`."""
        if paged:
            return f"((size_t)({pid} * HKV + hk) * PAGE + (({j}) % PAGE)) * DH"
        return f"((size_t)(b * HKV + hk) * SEQ + ({j})) * DH"

    def page(j: str) -> str:
        return f"(({j}) < s1 ? (int)table[b * NBLK + ({j}) / PAGE] : 0)"

    L = [
        f"constexpr int NT = {nt};", "constexpr int W = NT / 32;", f"constexpr int TK = {tk};",
        f"constexpr int ST = {st};", "constexpr int G = HQ / HKV;", "constexpr int NCH = DH / 8;",
        "constexpr int SWM = NCH >= 8 ? 7 : NCH - 1;      // 16-byte chunk c of row r lives at chunk c ^ (r & SWM)",
        "constexpr int LPR = NCH < 32 ? NCH : 32;         // lanes per row (copies; values in the fma path)",
        "constexpr int RPI = 32 / LPR;                    // rows per warp instruction",
        "constexpr int CPT = TK / RPI;                    // rows a lane copies (and reads for P.V) per tile",
        "constexpr int TILE = TK * DH;                    // elements of a K (or V) tile",
        "constexpr int KPL = TK > 32 ? TK / 32 : 1;       // fma: keys per lane in the scores",
        "constexpr float LOG2E = 1.4426950408889634f;",
        "struct Pk8 { T v[8]; };" if d.metal else "struct alignas(16) Pk8 { T v[8]; };",
        f"const int t = {d.tid()};", "const int lane = t & 31;", "const int warp = t >> 5;",
        f"const int bh = {d.bid('x')};", f"const int split = {d.bid('y')};",
        "const int b = bh / HKV;", "const int hk = bh % HKV;",
        "const int s0 = split * CHUNK;", "const int s1 = (s0 + CHUNK < SEQ) ? s0 + CHUNK : SEQ;",
        "const int ntl = (s1 - s0 + TK - 1) / TK;         // tiles of this split",
        "const int nmine = warp < ntl ? (ntl - warp + W - 1) / W : 0;   // this warp's: warp, warp + W, ...",
        f"const float qscale = {d.rsqrt('(float)DH')} * LOG2E;",
        "const size_t qb = (size_t)(b * HQ + hk * G) * DH;",
    ]
    if cuda:
        L += [
            "extern __shared__ __align__(16) unsigned char kd_smem[];",
            "constexpr int RING = ST * 2 * TILE;              // elements of a warp's ring",
            "T* ring = reinterpret_cast<T*>(kd_smem) + (size_t)warp * RING;",
            "float* ml_s = reinterpret_cast<float*>(kd_smem + (size_t)W * RING * sizeof(T));   // W x G x (m, l)",
        ]
        if not mma:
            L += ["float* q_s = ml_s + W * G * 2;                  // G x DH, scaled",
                  "float* p_w = q_s + G * DH + warp * TK * G;      // this warp's p, TK x G"]
        L += ["KdPipe pipe;"]
    else:
        L += [d.shared("float q_s[G * DH]"), d.shared("float p_s[W * TK * G]"), d.shared("float ow_s[W * G * DH]"),
              d.shared("float ml_s[W * G * 2]"), "threadgroup float* p_w = p_s + warp * TK * G;"]

    # ---- CUDA: the copies of one tile into a ring buffer, and the page ids they need --------------------------
    def load_pids(arr: str, i: str) -> list[str]:
        return [f"for (int u = 0; u < CPT; ++u) {{",
                f"  const int j = s0 + ({i}) * TK + u * RPI + lane / LPR;",
                f"  {arr}[u] = {page('j')};",
                "}"]

    def issue(i: str, buf: str, pids: str) -> list[str]:
        return [f"if (({i}) < ntl) {{   // tile {i} into buffer {buf}",
                f"  const int jt = s0 + ({i}) * TK;",
                f"  T* kb = ring + ({buf}) * (2 * TILE);",
                "  const int c = lane % LPR;",
                "  for (int u = 0; u < CPT; ++u) {",
                "    const int r = u * RPI + lane / LPR; const int j = jt + r; const bool ok = j < s1;",
                f"    const size_t ra = ok ? {row('j', f'{pids}[u]')} : 0;",
                "    const int pc = (c ^ (r & SWM)) * 8;",
                "    kd_cp16(pipe, kb + r * DH + pc, K + ra + c * 8, ok);",
                "    kd_cp16(pipe, kb + TILE + r * DH + pc, V + ra + c * 8, ok);",
                "  }",
                "}",
                "kd_commit(pipe);"]

    if mma:
        L += [
            "// Q's A fragments (rows = query heads, padded to 16 with zeros), unscaled fp16, for the whole pass:",
            "// loaded first, so that they arrive with (not after) the first tiles",
            "const int fg = lane >> 2; const int fq = 2 * (lane & 3);",
            "unsigned qa[DH / 16][4];",
            "for (int kk = 0; kk < DH / 16; ++kk) {",
            "  qa[kk][0] = fg < G ? ks_ld2(Q + qb + (size_t)fg * DH + 16 * kk + fq) : 0u;",
            "  qa[kk][2] = fg < G ? ks_ld2(Q + qb + (size_t)fg * DH + 16 * kk + 8 + fq) : 0u;",
            "  qa[kk][1] = (G > 8 && fg + 8 < G) ? ks_ld2(Q + qb + (size_t)(fg + 8) * DH + 16 * kk + fq) : 0u;",
            "  qa[kk][3] = (G > 8 && fg + 8 < G) ? ks_ld2(Q + qb + (size_t)(fg + 8) * DH + 16 * kk + 8 + fq) : 0u;",
            "}",
        ]
    if cuda:
        L += ["// prologue: the warp's first ST tiles in flight before anything else"]
        if paged:
            L += ["int pn[CPT];"]
        for s in range(st):
            if paged:
                L += load_pids("pn", f"warp + {s} * W")
            L += issue(f"warp + {s} * W", str(s), "pn")
        if paged:
            L += load_pids("pn", "warp + ST * W")

    # ---- the state of the online softmax ------------------------------------------------------------------------
    if mma:
        L += [
            f"float m0 = {ni}; float l0 = 0.0f; float m8 = {ni}; float l8 = 0.0f;   // rows fg and fg + 8",
            "float o[DH / 8][4];",
            "for (int nd = 0; nd < DH / 8; ++nd) { o[nd][0] = 0.0f; o[nd][1] = 0.0f; o[nd][2] = 0.0f; o[nd][3] = 0.0f; }",
        ]
    else:
        L += [
            "for (int i = t; i < G * DH; i += NT) q_s[i] = static_cast<float>(Q[qb + i]) * qscale;",
            f"float m_run[G]; float l_run[G]; float acc[G * 8];",
            f"for (int g = 0; g < G; ++g) {{ m_run[g] = {ni}; l_run[g] = 0.0f; }}",
            "for (int i = 0; i < G * 8; ++i) acc[i] = 0.0f;",
            "const int cv = lane % LPR;   // P.V: this lane's 8 columns",
            "const int kg = lane / LPR;   // and its rows kg, kg + RPI, ...",
            d.barrier(),
        ]

    # ---- one tile ---------------------------------------------------------------------------------------------------
    def tile_mma() -> list[str]:
        return [
            "const T* kb = ring + sb * (2 * TILE); const T* vb = kb + TILE;",
            "float s[TK / 8][4];",
            "for (int nb = 0; nb < TK / 8; ++nb) { s[nb][0] = 0.0f; s[nb][1] = 0.0f; s[nb][2] = 0.0f; s[nb][3] = 0.0f; }",
            "for (int nb = 0; nb < TK / 8; ++nb) {      // S = Q K^T: 8 keys x 32 dims per ldmatrix.x4",
            "  for (int kp = 0; kp < DH / 32; ++kp) {",
            "    const int key = nb * 8 + (lane & 7); const int ch = 4 * kp + (lane >> 3);",
            "    unsigned bf[4];",
            "    kd_ldsm_x4(bf, kb + key * DH + ((ch ^ (key & SWM)) * 8));",
            "    ks_mma16816(s[nb], qa[2 * kp], bf);",
            "    ks_mma16816(s[nb], qa[2 * kp + 1], bf + 2);",
            "  }",
            "}",
            f"float mx0 = {ni}; float mx8 = {ni};",
            "for (int nb = 0; nb < TK / 8; ++nb) {",
            "  for (int e = 0; e < 2; ++e) {",
            "    const bool ok = jt + nb * 8 + fq + e < s1;",
            f"    s[nb][e] = ok ? s[nb][e] * qscale : {ni}; mx0 = fmaxf(mx0, s[nb][e]);",
            f"    if (G > 8) {{ s[nb][2 + e] = ok ? s[nb][2 + e] * qscale : {ni}; mx8 = fmaxf(mx8, s[nb][2 + e]); }}",
            "  }",
            "}",
            "mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));",
            "const float mn0 = fmaxf(m0, mx0); const float c0 = kd_exp2(m0 - mn0); m0 = mn0;",
            "float c8 = 1.0f;",
            "if (G > 8) {",
            "  mx8 = fmaxf(mx8, __shfl_xor_sync(0xffffffffu, mx8, 1)); mx8 = fmaxf(mx8, __shfl_xor_sync(0xffffffffu, mx8, 2));",
            "  const float mn8 = fmaxf(m8, mx8); c8 = kd_exp2(m8 - mn8); m8 = mn8;",
            "}",
            "float ps0 = 0.0f; float ps8 = 0.0f;",
            "for (int nb = 0; nb < TK / 8; ++nb) {",
            "  for (int e = 0; e < 2; ++e) {",
            "    s[nb][e] = kd_exp2(s[nb][e] - m0); ps0 += s[nb][e];",
            "    if (G > 8) { s[nb][2 + e] = kd_exp2(s[nb][2 + e] - m8); ps8 += s[nb][2 + e]; }",
            "  }",
            "}",
            "l0 = l0 * c0 + ps0; l8 = l8 * c8 + ps8;",
            "for (int nd = 0; nd < DH / 8; ++nd) { o[nd][0] *= c0; o[nd][1] *= c0; o[nd][2] *= c8; o[nd][3] *= c8; }",
            "for (int ks = 0; ks < TK / 16; ++ks) {      // O += P V: P from the score accumulators",
            "  unsigned pa[4];",
            "  pa[0] = ks_pack2(s[2 * ks][0], s[2 * ks][1]); pa[2] = ks_pack2(s[2 * ks + 1][0], s[2 * ks + 1][1]);",
            "  pa[1] = G > 8 ? ks_pack2(s[2 * ks][2], s[2 * ks][3]) : 0u;",
            "  pa[3] = G > 8 ? ks_pack2(s[2 * ks + 1][2], s[2 * ks + 1][3]) : 0u;",
            "  for (int ndp = 0; ndp < DH / 16; ++ndp) {",
            "    const int mi = lane >> 3;",
            "    const int key = 16 * ks + 8 * (mi & 1) + (lane & 7); const int ch = 2 * ndp + (mi >> 1);",
            "    unsigned vf[4];",
            "    ks_ldsm_x4_t(vf, vb + key * DH + ((ch ^ (key & SWM)) * 8));",
            "    ks_mma16816(o[2 * ndp], pa, vf);",
            "    ks_mma16816(o[2 * ndp + 1], pa, vf + 2);",
            "  }",
            "}",
        ]

    def tile_fma() -> list[str]:
        if cuda:
            kload = ["  const T* kr = kb + (r < TK ? r : 0) * DH; const int sw = r & SWM;",
                     "  for (int c = 0; c < NCH; ++c) {",
                     "    const Pk8 kv = *reinterpret_cast<const Pk8*>(kr + ((c ^ sw) * 8));"]
            vload = ["  const Pk8 vv = *reinterpret_cast<const Pk8*>(vb + r * DH + ((cv ^ (r & SWM)) * 8));"]
            head = ["const T* kb = ring + sb * (2 * TILE); const T* vb = kb + TILE;"]
        else:
            pk = [f"  const int pid = {page('jt + r')};"] if paged else []
            kload = [*pk,
                     f"  {dev} kr = K + (ok ? {row('jt + r', 'pid')} : 0);",
                     "  for (int c = 0; c < NCH; ++c) {",
                     "    Pk8 kv;",
                     "    for (int x = 0; x < 8; ++x) kv.v[x] = ok ? kr[c * 8 + x] : static_cast<T>(0.0f);"]
            pv = [f"  const int pid = {page('jt + r')};"] if paged else []
            vload = ["  const bool okv = jt + r < s1;", *pv,
                     f"  {dev} vp = V + (okv ? {row('jt + r', 'pid')} : 0) + cv * 8;",
                     "  Pk8 vv;",
                     "  for (int x = 0; x < 8; ++x) vv.v[x] = okv ? vp[x] : static_cast<T>(0.0f);"]
            head = []
        return [
            *head,
            "float sc[KPL][G];",
            "for (int kq = 0; kq < KPL; ++kq) {          // scores: lane = key",
            "  const int r = lane + 32 * kq; const bool ok = r < TK && jt + r < s1;",
            "  float a[G];",
            "  for (int g = 0; g < G; ++g) a[g] = 0.0f;",
            *kload,
            "    for (int x = 0; x < 8; ++x) {",
            "      const float kf = static_cast<float>(kv.v[x]);",
            "      for (int g = 0; g < G; ++g) a[g] += q_s[g * DH + c * 8 + x] * kf;",
            "    }",
            "  }",
            f"  for (int g = 0; g < G; ++g) sc[kq][g] = ok ? a[g] : {ni};",
            "}",
            "float cr[G];",
            "for (int g = 0; g < G; ++g) {",
            "  float mx = sc[0][g];",
            f"  for (int kq = 1; kq < KPL; ++kq) mx = {fmax}(mx, sc[kq][g]);",
            "  mx = " + ("simd_max(mx);" if d.metal else "kd_warp_max(mx);"),
            f"  const float mn = {fmax}(m_run[g], mx); cr[g] = {exp2}(m_run[g] - mn); m_run[g] = mn;",
            "  float ps = 0.0f;",
            f"  for (int kq = 0; kq < KPL; ++kq) {{ sc[kq][g] = {exp2}(sc[kq][g] - mn); ps += sc[kq][g]; }}",
            "  l_run[g] = l_run[g] * cr[g] + ps;",
            "}",
            "for (int kq = 0; kq < KPL; ++kq) {",
            "  const int r = lane + 32 * kq;",
            "  if (r < TK) { for (int g = 0; g < G; ++g) p_w[r * G + g] = sc[kq][g]; }",
            "}",
            syncwarp,
            "for (int g = 0; g < G; ++g) { for (int x = 0; x < 8; ++x) acc[g * 8 + x] *= cr[g]; }",
            "for (int u = 0; u < CPT; ++u) {             // P.V: lane = 8 columns of rows kg, kg + RPI, ...",
            "  const int r = u * RPI + kg;",
            *vload,
            "  for (int g = 0; g < G; ++g) {",
            "    const float p = p_w[r * G + g];",
            "    for (int x = 0; x < 8; ++x) acc[g * 8 + x] += p * static_cast<float>(vv.v[x]);",
            "  }",
            "}",
        ]

    body = tile_mma() if mma else tile_fma()
    L += ["for (int it = 0; it < nmine; ++it) {  // KEYLOOP",
          "  const int i = warp + it * W;           // the threadgroup's tile index",
          "  const int jt = s0 + i * TK;"]
    if cuda:
        L += ["  const int sb = it % ST;",
              "  kd_wait<ST - 1>(pipe);                // this tile's group has landed (this thread's copies)",
              "  __syncwarp();                          // ... and the other lanes' too"]
    L += ["  {", *["    " + s for s in body], "  }"]
    if cuda:
        L += ["  __syncwarp();                          // every lane is done with buffer sb",
              *["  " + s for s in issue("i + ST * W", "sb", "pn")]]
        if paged:
            L += ["  " + s for s in load_pids("pn", "i + (ST + 1) * W")]
    elif not mma:
        L += [f"  {syncwarp}"]
    L += ["}"]

    # ---- the warp's (m, l, o) into its own idle ring, then the threadgroup's merge of its warps -------------------
    if cuda:
        L += ["kd_wait<0>(pipe);", "__syncwarp();",
              "float* ow = reinterpret_cast<float*>(ring);   // G x DH floats of this warp's o"]
    else:
        L += ["threadgroup float* ow = ow_s + warp * G * DH;"]
    if mma:
        L += [
            "l0 += __shfl_xor_sync(0xffffffffu, l0, 1); l0 += __shfl_xor_sync(0xffffffffu, l0, 2);",
            "l8 += __shfl_xor_sync(0xffffffffu, l8, 1); l8 += __shfl_xor_sync(0xffffffffu, l8, 2);",
            "if (fg < G) {",
            "  for (int nd = 0; nd < DH / 8; ++nd) { ow[fg * DH + nd * 8 + fq] = o[nd][0]; ow[fg * DH + nd * 8 + fq + 1] = o[nd][1]; }",
            "  if (fq == 0) { ml_s[(warp * G + fg) * 2] = m0; ml_s[(warp * G + fg) * 2 + 1] = l0; }",
            "}",
            "if (G > 8 && fg + 8 < G) {",
            "  for (int nd = 0; nd < DH / 8; ++nd) {",
            "    ow[(fg + 8) * DH + nd * 8 + fq] = o[nd][2]; ow[(fg + 8) * DH + nd * 8 + fq + 1] = o[nd][3];",
            "  }",
            "  if (fq == 0) { ml_s[(warp * G + fg + 8) * 2] = m8; ml_s[(warp * G + fg + 8) * 2 + 1] = l8; }",
            "}",
        ]
    else:
        L += [
            "for (int g = 0; g < G; ++g) {",
            "  float l = l_run[g];",
            *["  " + s for s in d.warp_reduce("l", "sum", 32)],
            "  l_run[g] = l;",
            "  for (int x = 0; x < 8; ++x) {",
            "    float a = acc[g * 8 + x];",
            f"    for (int o = LPR; o < 32; o *= 2) a += {d.shfl_xor('a', 'o')};",
            "    acc[g * 8 + x] = a;",
            "  }",
            "}",
            "if (lane < LPR) { for (int g = 0; g < G; ++g) { for (int x = 0; x < 8; ++x) ow[g * DH + cv * 8 + x] = acc[g * 8 + x]; } }",
            "if (lane == 0) { for (int g = 0; g < G; ++g) { ml_s[(warp * G + g) * 2] = m_run[g]; ml_s[(warp * G + g) * 2 + 1] = l_run[g]; } }",
        ]
    if cuda:
        owof = "reinterpret_cast<const float*>(kd_smem + (size_t)w * RING * sizeof(T)) + g * DH + e"
    else:
        owof = "ow_s + (w * G + g) * DH + e"
    L += [
        d.barrier(),
        "for (int i = t; i < G * DH / 4; i += NT) {   // four columns of one query head a thread",
        "  const int g = i / (DH / 4); const int e = (i % (DH / 4)) * 4;",
        f"  float M = {ni};",
        f"  for (int w = 0; w < W; ++w) M = {fmax}(M, ml_s[(w * G + g) * 2]);",
        "  float l = 0.0f; float a0 = 0.0f; float a1 = 0.0f; float a2 = 0.0f; float a3 = 0.0f;",
        "  for (int w = 0; w < W; ++w) {",
        f"    const float c = {exp2}(ml_s[(w * G + g) * 2] - M);",
        f"    {tg}const float* ov = {owof};",
        "    l += c * ml_s[(w * G + g) * 2 + 1];",
        "    a0 += c * ov[0]; a1 += c * ov[1]; a2 += c * ov[2]; a3 += c * ov[3];",
        "  }",
        "  const int rw = b * HQ + hk * G + g;",
        "  if (SPLITS == 1) {",
        "    const float il = 1.0f / l;",
        "    out[(size_t)rw * DH + e] = static_cast<T>(a0 * il); out[(size_t)rw * DH + e + 1] = static_cast<T>(a1 * il);",
        "    out[(size_t)rw * DH + e + 2] = static_cast<T>(a2 * il); out[(size_t)rw * DH + e + 3] = static_cast<T>(a3 * il);",
        "  } else {",
        "    const size_t pi = (size_t)rw * SPLITS + split;",
    ]
    if cuda:
        L += ["    *reinterpret_cast<float4*>(opart + pi * DH + e) = make_float4(a0, a1, a2, a3);"]
    else:
        L += ["    opart[pi * DH + e] = a0; opart[pi * DH + e + 1] = a1; opart[pi * DH + e + 2] = a2; opart[pi * DH + e + 3] = a3;"]
    L += [
        "    if (e == 0) { mpart[pi] = M; lpart[pi] = l; }",
        "  }",
        "}",
    ]
    if fused:
        L += [
            "if (SPLITS > 1) {   // the last threadgroup of this (b, hk) to finish merges the head's SPLITS partials",
            "  int* sem = const_cast<int*>(reinterpret_cast<const int*>(sem_inout));",
            "  __shared__ int last_s;",
            "  __threadfence();                 // this thread's partials are visible GPU-wide before the count",
            "  __syncthreads();",
            "  if (t == 0) last_s = (atomicAdd(sem + bh, 1) == SPLITS - 1);",
            "  __syncthreads();",
            "  if (last_s) {",
            "    __threadfence();               // the others' partials are read after their counts",
            "    float* wt = reinterpret_cast<float*>(kd_smem);   // G x SPLITS weights (the rings are idle)",
            "    for (int g = warp; g < G; g += W) {   // a warp per query head: M, then the weights 2^(m - M) / L",
            "      const size_t pr = (size_t)(b * HQ + hk * G + g) * SPLITS;",
            f"      float M = {ni};",
            "      for (int s = lane; s < SPLITS; s += 32) M = fmaxf(M, __ldcg(mpart + pr + s));",
            "      M = kd_warp_max(M);",
            "      float l = 0.0f;",
            "      for (int s = lane; s < SPLITS; s += 32) {",
            "        const float c = kd_exp2(__ldcg(mpart + pr + s) - M);",
            "        wt[g * SPLITS + s] = c; l += c * __ldcg(lpart + pr + s);",
            "      }",
            *["      " + s for s in d.warp_reduce("l", "sum", 32)],
            "      const float il = 1.0f / l;",
            "      for (int s = lane; s < SPLITS; s += 32) wt[g * SPLITS + s] *= il;",
            "    }",
            "    __syncthreads();",
            "    for (int i = t; i < G * DH / 4; i += NT) {   // one float4 of the output a thread, all splits at once",
            "      const int g = i / (DH / 4); const int e = (i % (DH / 4)) * 4;",
            "      const int rw = b * HQ + hk * G + g;",
            "      const float4* op = reinterpret_cast<const float4*>(opart + (size_t)rw * SPLITS * DH + e);",
            "      float a0 = 0.0f; float a1 = 0.0f; float a2 = 0.0f; float a3 = 0.0f;",
            "      #pragma unroll 8",
            "      for (int s = 0; s < SPLITS; ++s) {",
            "        const float c = wt[g * SPLITS + s];",
            "        const float4 v = __ldcg(op + (size_t)s * (DH / 4));",
            "        a0 += c * v.x; a1 += c * v.y; a2 += c * v.z; a3 += c * v.w;",
            "      }",
            "      out[(size_t)rw * DH + e] = static_cast<T>(a0); out[(size_t)rw * DH + e + 1] = static_cast<T>(a1);",
            "      out[(size_t)rw * DH + e + 2] = static_cast<T>(a2); out[(size_t)rw * DH + e + 3] = static_cast<T>(a3);",
            "    }",
            "    if (t == 0) sem[bh] = 0;        // zero again for the next call",
            "  }",
            "}",
        ]
    return "\n".join(_unroll(L, cuda))


def smem_bytes(k: dict, kind: str, G: int, Dh: int) -> int:
    """Shared memory of a threadgroup: CUDA's dynamic rings + (m, l) + (fma) q and p; Metal's static arrays."""
    w, tk, st = k["warps"], k["block_keys"], k["stages"]
    if kind == "metal":
        return 4 * (G * Dh + w * tk * G + w * G * Dh + w * G * 2)
    fma = k["compute"] == "fma"
    return w * st * 2 * tk * Dh * 2 + 4 * w * G * 2 + (4 * (G * Dh + w * tk * G) if fma else 0)


def render_async(family: str, tid: str, k: dict, kind: str, paged: bool) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError(f"template {tid} renders metal or cuda candidates")
    name = tag(tid, k, kind)
    cuda = kind == "cuda"
    mma = cuda and k["compute"] == "mma"
    fused = cuda and k["merge"] == "fused"
    ins = ["Q", "K", "V"] + (["table"] if paged else [])
    outs = ["out", "opart", "mpart", "lpart"]
    nt, tk, target = 32 * k["warps"], k["block_keys"], k["target_blocks"]
    sig, dims, call_in, extra_t = kv_signature(paged)
    hdr = (MMA_HEADER + LDSM_HEADER + KD_HEADER) if cuda else ""
    fused_src = _source(kind, k, paged, True) if fused else ""
    if cuda:
        k1 = "None"
        kf = "None"
    else:
        k1 = kernel_ctor(kind, name, ins, outs)
        kf = "None"
    return f'''{header(family, tid, k, kind)}
_SOURCE = r"""
{_source(kind, k, paged, False)}
"""
_SOURCE_FUSED = r"""
{fused_src}
"""
_COMBINE = r"""
{_combine(kind)}
"""
_HEADER = r"""
{hdr}
"""
NAME, NT, TK, TARGET_BLOCKS, CUDA, MMA, FUSED = {name!r}, {nt}, {tk}, {target}, {cuda}, {mma}, {fused}
KNOBS = {dict(k)!r}
_K1 = {k1}
_KF = {kf}
_K2 = {kernel_ctor(kind, name + "_combine", ["opart", "mpart", "lpart"], ["out"], src_var="_COMBINE")}
_KC = {{}}
_SEM = {{}}


def _cuda_kernel(fused, smem):
    """The CUDA kernel object for this much dynamic shared memory (it depends on G and Dh), built once."""
    kc = _KC.get((fused, smem))
    if kc is None:
        kc = mx.fast.cuda_kernel(name=f"{{NAME}}{{'_fused' if fused else ''}}_{{smem}}",
                                 input_names={ins!r} + (["sem_inout"] if fused else []),
                                 output_names={outs!r}, source=_SOURCE_FUSED if fused else _SOURCE,
                                 header=_HEADER, shared_memory=smem)
        _KC[(fused, smem)] = kc
    return kc


def _sem(n):
    """The persistent arrival counters of the fused merge: zero between calls (the merging threadgroup resets its
    own), one per (batch, KV head); allocated and zeroed once per size."""
    s = _SEM.get(n)
    if s is None:
        s = mx.zeros((n,), dtype=mx.int32)
        mx.eval(s)
        _SEM[n] = s
    return s


def plan(Bt, Hkv, S, cap):
    """(splits, keys per split): TARGET_BLOCKS // (Bt * Hkv) splits (at least 1, at most cap), whole tiles each."""
    tiles = -(-S // TK)
    want = max(1, min(tiles, cap, TARGET_BLOCKS // (Bt * Hkv)))
    chunk = -(-tiles // want) * TK
    return -(-S // chunk), chunk


def smem_bytes(G, Dh):
    w, tk, st = KNOBS["warps"], KNOBS["block_keys"], KNOBS["stages"]
    if not CUDA:
        return 4 * (G * Dh + w * tk * G + w * G * Dh + w * G * 2)
    return w * st * 2 * tk * Dh * 2 + 4 * w * G * 2 + (0 if MMA else 4 * (G * Dh + w * tk * G))


def kernel({sig}):
{dims}    G = Hq // Hkv
    W = NT // 32
    if Hq % Hkv or Dh % 16 or Dh > 256 or (Dh // 8) & (Dh // 8 - 1) or (MMA and (Dh % 32 or Dh > 128 or G > 16)):
        raise ValueError(f"{tid}: head dim {{Dh}} (a power of two, 16..256; mma: 32..128) or G={{G}} (mma: <= 16) "
                         f"not supported, or Hq % Hkv != 0")
    if MMA and q.dtype != mx.float16:
        raise ValueError(f"{tid}: compute='mma' takes fp16, not {{q.dtype}}")
    smem = smem_bytes(G, Dh)
    if smem > {SMEM_CUDA if cuda else SMEM_METAL}:
        raise ValueError(f"{tid}: {{smem}} bytes of threadgroup memory for G={{G}}, Dh={{Dh}}")
    ring = KNOBS["stages"] * 2 * TK * Dh * 2     # bytes of one warp's ring: its (fused) merge weights live there
    splits, chunk = plan(Bt, Hkv, S, max(1, (W * ring) // (4 * G)) if FUSED else 1 << 30)
    rows = Bt * Hq
    one = splits == 1
    tmpl = [("T", q.dtype), ("HQ", Hq), ("HKV", Hkv), ("DH", Dh), ("SEQ", S), {extra_t}("SPLITS", splits), ("CHUNK", chunk)]
    shapes = [q.shape, (1,) if one else (rows, splits, Dh), (1,) if one else (rows, splits), (1,) if one else (rows, splits)]
    dtypes = [q.dtype, mx.float32, mx.float32, mx.float32]
    grid, tg = (Bt * Hkv * NT, splits, 1), (NT, 1, 1)
    if FUSED and not one:
        return _cuda_kernel(True, smem)(inputs={call_in} + [_sem(Bt * Hkv)], template=tmpl, grid=grid,
                                        threadgroup=tg, output_shapes=shapes, output_dtypes=dtypes)[0]
    k1 = _cuda_kernel(False, smem) if CUDA else _K1
    outs = k1(inputs={call_in}, template=tmpl, grid=grid, threadgroup=tg, output_shapes=shapes, output_dtypes=dtypes)
    if one:
        return outs[0]
    return _K2(inputs=outs[1:], template=[("T", q.dtype), ("ROWS", rows), ("DH", Dh), ("SPLITS", splits)],
               grid=(((rows * Dh + 127) // 128) * 128, 1, 1), threadgroup=(128, 1, 1),
               output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''
