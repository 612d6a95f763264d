"""Flash attention prefill on Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a), fp16 or bf16 in, fp32 accumulation,
causal or not (the task's `causal` flag, read on the device), GQA, head dim 64 or 128, any L.

Layout of the work: a CTA of `warpgroups` warpgroups (128 threads each); warpgroup w owns 64 query rows (BQ = 64 x
warpgroups). Every thread takes part in the copies: Q once, then K/V tiles of `block_kv` keys by `cp.async.cg` (16
bytes a thread, zero-filled past the end), `stages` tiles ahead of the one being used (K ring stages + 1 deep, V ring
stages + 2: V of tile j is read one iteration later, see below), one __syncthreads a tile.

Shared memory is in the canonical "128-byte swizzle" layout of the wgmma descriptors (PTX ISA, "Shared Memory Matrix
Layout"): a tile of R rows x Dh 16-bit columns is stored as Dh/64 regions of R rows x 128 bytes; inside a region row r's
16-byte chunk c sits at chunk position c ^ (r % 8) (address bits 4-6 ^= bits 7-9; the base is aligned to 1 KB).
* S = Q K^T: wgmma m64n{block_kv}k16, B = K from shared memory, K-major (the head dim is contiguous): descriptor
  stride byte offset (8-row groups) 1024, the leading byte offset unused; the k-step kd starts at region kd / 4, byte
  32 (kd % 4) of the 128-byte row. A = Q: from shared memory the same way (q_in="smem"), or Q's A fragments loaded
  once from global memory into 32 registers (q_in="regs").
* O += P V: wgmma m64n{pv_n}k16 with A = P from registers (the S accumulator's layout is the A fragment's layout: P is
  packed to fp16/bf16 in place, no shared memory) and B = V from shared memory in the same layout as K, read as
  MN-major (transpose bit): 8-key groups 1024 bytes apart (SBO), 64-column regions block_kv x 128 bytes apart (LBO).
  pv_n = 64 issues one instruction per 64-column region (there LBO is not used).
* Pipelining inside a warpgroup (FlashAttention-3's intra-warpgroup overlap): iteration j issues S_j = Q K_j^T, then
  O += P_{j-1} V_{j-1}, waits for S_j only (wgmma.wait_group 1), runs the online softmax of S_j on the CUDA cores while
  the tensor cores do P_{j-1} V_{j-1}, then waits for that, rescales O and packs P_j. Hence V_j is read at iteration j+1.
* The softmax: raw-score row maxima, the scale folded into one FFMA + ex2.approx (exp2 with scale * log2 e), O rescaled
  only when a row of the warp got a new maximum, the mask only on diagonal/tail tiles; causal: a CTA stops at its
  diagonal and (not staggered) a warpgroup skips the tiles above its own rows.
* fence.proxy.async after each thread's cp.async lands (generic-proxy writes, read by wgmma through the async proxy),
  wgmma.fence before each batch of wgmma (registers written by ordinary instructions since the last one).

The simulator (KSIM_CUDA) runs twins: a wgmma twin computes each lane's accumulator elements from the canonical layout
formulas above (descriptor fields -> addresses, the swizzle on the address bits) and, for A from registers, the
warp's own A fragments through shuffles (in wgmma warp i of the warpgroup holds rows 16i..16i+15 of A and of D, in
mma.sync m16n8k16's fragment layout); fence/commit/wait are nothing there.

Knobs: warpgroups (1-3; 3 needs a 168-register cap, set by a __launch_bounds__ on the kernel through the header),
block_kv (keys a tile: 64, 96 or 128, the N of S's wgmma), stages (tiles prefetched ahead), pv_n (N of P V's wgmma:
128 = one instruction for the whole head dim), q_in ("regs": Q's A fragments loaded once into registers and S by
register-A wgmma, which halves S's shared-memory traffic and frees Q's 16 KB a warpgroup; "smem": both operands through
descriptors), stagger (warpgroup 1 half an iteration behind warpgroup 0, see _MAIN; needs one more K and V tile).
The Metal twin of this template is attention.flash_sg (simdgroup_matrix).

Measured (bench/wgmma_check.py, NVIDIA H100 80GB HBM3, GPU time, B1 H32 L4096 D128 fp16, bench/results/wgmma_h100):
the default (2 warpgroups, 64-key tiles 2 ahead, Q in registers, staggered) 0.643 ms = 428 TFLOP/s, 0.65x of cuDNN's
SDPA (0.420 ms) in the same run, causal 0.352 ms = 0.75x (SDPA 0.264), GQA 32/8 0.636 ms = 0.66x; flash_mma2 0.822 /
0.435 ms there. 96-key tiles: 0.627 / 0.365; not staggered: 0.718 / 0.396; 3 warpgroups lockstep: 0.687 / 0.353.
What is left to cuDNN: the loads are cp.async issued by the compute warps with a CTA barrier a tile (no TMA, no
producer warp, no setmaxnreg), and the exp2 of the softmax competes with the wgmma issue on the same warps.
"""
from __future__ import annotations

from ._flash_mma2 import ASYNC_HEADER, attention_module
from ._mma import LDSM_HEADER, MMA_HEADER

DH_MAX = 128
SMEM_LIMIT = 227 * 1024
REG_FILE = 65536


def _regs_needed(k: dict) -> int:
    """A rough per-thread register count at Dh=128: S accumulator (block_kv/2 floats), O accumulator (64), P
    fragments (block_kv/4 b32), Q fragments (32 b32, q_in="regs"), ~40 for addresses, row state and temporaries."""
    return k["block_kv"] // 2 + 64 + k["block_kv"] // 4 + (32 if k["q_in"] == "regs" else 0) + 40


def rings(k: dict) -> tuple[int, int]:
    """(K tiles, V tiles) in shared memory. V_j is read one iteration after K_j (P V runs under the next softmax);
    staggered, warpgroup 1's wgmma on tile j run into iteration j + 1: one more of each."""
    extra = 1 if k["stagger"] else 0
    return k["stages"] + 1 + extra, k["stages"] + 2 + extra


def reg_cap(k: dict) -> int:
    """Registers a thread may use: 255, or less where the CTA's threads would not fit the 64K register file."""
    return min(255, (REG_FILE // (128 * k["warpgroups"])) // 8 * 8)


def smem_bytes(k: dict) -> int:
    """Dynamic shared memory: 1 KB of alignment slack, Q (BQ rows), K ring (stages + 1), V ring (stages + 2) at
    Dh = 128 (the kernel object is built once, before Dh is known)."""
    bq, bkv = 64 * k["warpgroups"], k["block_kv"]
    kst, vst = rings(k)
    return 1024 + (bq * DH_MAX * 2 if k["q_in"] == "smem" else 0) + (kst + vst) * bkv * DH_MAX * 2


def why_invalid(k: dict) -> str | None:
    """None for a usable knob set, else the reason it cannot work."""
    wg, bkv, pf, pvn = k["warpgroups"], k["block_kv"], k["stages"], k["pv_n"]
    if wg not in (1, 2, 3):
        return f"warpgroups={wg}: 1, 2 or 3 warpgroups of 64 query rows"
    if bkv not in (64, 96, 128):
        return f"block_kv={bkv}: the S wgmma's N is 64, 96 or 128 here"
    if pf not in (1, 2, 3):
        return f"stages={pf}: 1 to 3 tiles prefetched"
    if pvn not in (64, 128):
        return f"pv_n={pvn}: the P V wgmma's N is 64 or 128"
    if k["q_in"] not in ("smem", "regs"):
        return f"q_in={k['q_in']!r}: Q is read from shared memory ('smem') or kept in registers ('regs')"
    if k["stagger"] not in (False, True):
        return f"stagger={k['stagger']!r}: True or False"
    if k["stagger"] and wg != 2:
        return "stagger pairs two warpgroups (warpgroups=2)"
    if _regs_needed(k) > reg_cap(k):
        return (f"about {_regs_needed(k)} registers a thread (S {bkv // 2} + O 64 + P {bkv // 4} + 40) over the "
                f"{reg_cap(k)} that {wg} x 128 threads can have")
    if smem_bytes(k) > SMEM_LIMIT:
        return f"{smem_bytes(k)} bytes of shared memory, over the 227 KB a CTA can have"
    return None


def flash_wgmma_valid(k: dict) -> bool:
    return why_invalid(k) is None


# ---- the wgmma helpers: GPU (inline PTX) and simulator twins ------------------------------------------------------

def _wg_asm(n: int, bf: bool, rs: bool) -> str:
    """One wgmma.mma_async specialization on descriptors: ks_wgss_d<N, BF> (A and B from shared memory, both
    K-major; scale-d = acc) or ks_wgrs_d<N, BF> (A from 4 b32 registers, B from shared memory MN-major: the transpose
    bit; accumulates)."""
    ty = "bf16" if bf else "f16"
    nd = n // 2
    dl = ",".join(f"%{i}" for i in range(nd))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
    tf = "true" if bf else "false"
    if rs == "k":
        a = ",".join(f"%{nd + i}" for i in range(4))
        return (f"template <> __device__ __forceinline__ void ks_wgrsk_d<{n}, {tf}>"
                f"(float* d, const unsigned* a, unsigned long long db, int acc) {{\n"
                f"  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 5}, 0;\\n"
                f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} "
                f"{{{dl}}}, {{{a}}}, %{nd + 4}, p, 1, 1, 0;\\n}}\\n\"\n"
                f"    : {outs}\n"
                f"    : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(db), \"r\"(acc) : \"memory\");\n}}\n")
    if rs:
        a = ",".join(f"%{nd + i}" for i in range(4))
        return (f"template <> __device__ __forceinline__ void ks_wgrs_d<{n}, {tf}>"
                f"(float* d, const unsigned* a, unsigned long long db) {{\n"
                f"  asm volatile(\"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} "
                f"{{{dl}}}, {{{a}}}, %{nd + 4}, 1, 1, 1, 1;\\n\"\n"
                f"    : {outs}\n"
                f"    : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(db) : \"memory\");\n}}\n")
    return (f"template <> __device__ __forceinline__ void ks_wgss_d<{n}, {tf}>"
            f"(float* d, unsigned long long da, unsigned long long db, int acc) {{\n"
            f"  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 2}, 0;\\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} "
            f"{{{dl}}}, %{nd}, %{nd + 1}, p, 1, 1, 0, 0;\\n}}\\n\"\n"
            f"    : {outs}\n"
            f"    : \"l\"(da), \"l\"(db), \"r\"(acc) : \"memory\");\n}}\n")


_SPECS = "".join(_wg_asm(n, bf, rs) for rs in (False, True, "k") for bf in (False, True)
                 for n in ((64, 128) if rs is True else (64, 96, 128)))   # P V: N = 64 or 128; S: N = block_kv

WGMMA_HEADER = r"""
#ifdef KSIM_CUDA
// ---- simulator twins ----
typedef const unsigned char* ks_sa;                 // a shared-memory "address": the pointer itself
__device__ inline ks_sa ks_saddr(const void* p) { return (ks_sa)p; }
__device__ inline unsigned char* ks_align1k(void* p) {
  return (unsigned char*)(((unsigned long long)p + 1023ull) & ~1023ull);
}
template <int N> __device__ inline void ks_cp_wait() {}
__device__ inline void ks_fence_async() {}
__device__ inline void ks_wg_fence() {}
__device__ inline void ks_wg_commit() {}
template <int N> __device__ inline void ks_wg_wait() {}
template <bool BF> __device__ inline float ks_b16f(unsigned u) {   // one 16-bit pattern -> float
  return BF ? __uint_as_float((u & 0xffffu) << 16) : __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
}
__device__ inline unsigned ks_sw128(unsigned long long addr) {    // the 128-byte swizzle on the address bits
  return (unsigned)(addr ^ (((addr >> 7) & 7ull) << 4)) & 0xffffffffu;
}
template <bool BF> __device__ inline float ks_smem16(ks_sa start, unsigned off) {
  const unsigned long long a = (unsigned long long)start + off;
  const unsigned long long p = a ^ (((a >> 7) & 7ull) << 4);
  return ks_b16f<BF>(*(const unsigned short*)p);
}
// K-major operand, 128B swizzle: row r (M or N), column k of the 16-wide k-step; 8-row groups SBO = 1024 apart
template <bool BF> __device__ inline float ks_kmaj(ks_sa start, int r, int k) {
  return ks_smem16<BF>(start, (unsigned)((r >> 3) * 1024 + (r & 7) * 128 + k * 2));
}
// MN-major operand (B with the transpose bit), 128B swizzle: k-row k, column n; 64-column atoms LBO apart, 8-row
// groups SBO = 1024 apart
template <bool BF> __device__ inline float ks_mnmaj(ks_sa start, unsigned lbo, int k, int n) {
  return ks_smem16<BF>(start, (unsigned)((n >> 6) * lbo + (n & 63) * 2 + (k & 7) * 128 + (k >> 3) * 1024));
}
// D (64 x N, this lane's N/2 floats) = [D +] A (64 x 16, smem) * B (N x 16, smem)^T
template <int N, bool BF> __device__ inline void ks_wgss(float* d, ks_sa a, ks_sa b, int acc) {
  const int tw = threadIdx.x & 127; const int w = tw >> 5; const int g = (tw & 31) >> 2; const int q = tw & 3;
  for (int i = 0; i < N / 8; ++i)
    for (int e = 0; e < 4; ++e) {
      const int r = 16 * w + g + 8 * (e >> 1); const int n = 8 * i + 2 * q + (e & 1);
      float x = 0.0f;
      for (int k = 0; k < 16; ++k) x += ks_kmaj<BF>(a, r, k) * ks_kmaj<BF>(b, n, k);
      d[4 * i + e] = (acc ? d[4 * i + e] : 0.0f) + x;
    }
}
// D (64 x N) += A (64 x 16: this warp's 16 rows in 4 b32, mma.sync's A fragment) * B (16 x N, smem, MN-major)
template <int N, bool BF> __device__ inline void ks_wgrs(float* d, const unsigned* a, ks_sa b, unsigned lbo) {
  const int lane = threadIdx.x & 31; const int g = lane >> 2; const int q = lane & 3;
  float acc[N / 2];
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  for (int kp = 0; kp < 8; ++kp) {                          // k = 2 kp, 2 kp + 1
    const int src = kp & 3; const int hi = kp >> 2;
    const unsigned ar = __shfl_sync(0xffffffffu, a[2 * hi], g * 4 + src);       // A[g][k..k+1]
    const unsigned ar8 = __shfl_sync(0xffffffffu, a[1 + 2 * hi], g * 4 + src);  // A[g+8][k..k+1]
    const int k = 2 * kp;
    for (int i = 0; i < N / 8; ++i)
      for (int e = 0; e < 4; ++e) {
        const int n = 8 * i + 2 * q + (e & 1); const unsigned av = (e >> 1) ? ar8 : ar;
        acc[4 * i + e] += ks_b16f<BF>(av) * ks_mnmaj<BF>(b, lbo, k, n) + ks_b16f<BF>(av >> 16) * ks_mnmaj<BF>(b, lbo, k + 1, n);
      }
  }
  for (int i = 0; i < N / 2; ++i) d[i] += acc[i];
}
// D (64 x N) = [D +] A (64 x 16: this warp's rows in 4 b32) * B (N x 16, smem, K-major)^T
template <int N, bool BF> __device__ inline void ks_wgrsk(float* d, const unsigned* a, ks_sa b, int acc) {
  const int lane = threadIdx.x & 31; const int g = lane >> 2; const int q = lane & 3;
  float x[N / 2];
  for (int i = 0; i < N / 2; ++i) x[i] = 0.0f;
  for (int kp = 0; kp < 8; ++kp) {
    const int src = kp & 3; const int hi = kp >> 2;
    const unsigned ar = __shfl_sync(0xffffffffu, a[2 * hi], g * 4 + src);
    const unsigned ar8 = __shfl_sync(0xffffffffu, a[1 + 2 * hi], g * 4 + src);
    const int k = 2 * kp;
    for (int i = 0; i < N / 8; ++i)
      for (int e = 0; e < 4; ++e) {
        const int n = 8 * i + 2 * q + (e & 1); const unsigned av = (e >> 1) ? ar8 : ar;
        x[4 * i + e] += ks_b16f<BF>(av) * ks_kmaj<BF>(b, n, k) + ks_b16f<BF>(av >> 16) * ks_kmaj<BF>(b, n, k + 1);
      }
  }
  for (int i = 0; i < N / 2; ++i) d[i] = (acc ? d[i] : 0.0f) + x[i];
}
#else
// ---- the GPU side: sm_90a ----
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "attention.flash_wgmma needs a Hopper GPU (sm_90a: wgmma); on this GPU use attention.flash_mma2 (mma.sync)"
#endif
typedef unsigned ks_sa;                              // a shared-memory address (32 bits)
__device__ __forceinline__ ks_sa ks_saddr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned char* ks_align1k(void* p) {   // the swizzle atoms need 1 KB-aligned addresses
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  return (unsigned char*)p + ((1024u - (s & 1023u)) & 1023u);
}
template <int N> __device__ __forceinline__ void ks_cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }
__device__ __forceinline__ void ks_fence_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void ks_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void ks_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void ks_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// matrix descriptor: start address >> 4 (bits 0-13), leading byte offset >> 4 (16-29), stride byte offset >> 4
// (32-45) = 1024 (8 rows of 128 bytes), layout 1 = 128-byte swizzle (bits 62-63), base offset 0
__device__ __forceinline__ unsigned long long ks_desc(ks_sa addr, unsigned lbo, unsigned sbo = 1024u) {
  return (unsigned long long)(((addr & 0x3ffffu) >> 4) | ((lbo >> 4) << 16)) | ((unsigned long long)(sbo >> 4) << 32)
         | (1ull << 62);
}
template <int N, bool BF> __device__ void ks_wgss_d(float* d, unsigned long long da, unsigned long long db, int acc);
template <int N, bool BF> __device__ void ks_wgrs_d(float* d, const unsigned* a, unsigned long long db);
template <int N, bool BF> __device__ void ks_wgrsk_d(float* d, const unsigned* a, unsigned long long db, int acc);
""" + _SPECS + r"""
// D (64 x N) = [D +] A (64 x 16) * B (N x 16)^T, both K-major in shared memory (128B swizzle, SBO 1024, LBO unused)
template <int N, bool BF> __device__ __forceinline__ void ks_wgss(float* d, ks_sa a, ks_sa b, int acc) {
  ks_wgss_d<N, BF>(d, ks_desc(a, 16u), ks_desc(b, 16u), acc);
}
// D (64 x N) += A (4 b32 registers a thread) * B (16 x N), B MN-major in shared memory (64-column atoms lbo apart)
template <int N, bool BF> __device__ __forceinline__ void ks_wgrs(float* d, const unsigned* a, ks_sa b, unsigned lbo) {
  ks_wgrs_d<N, BF>(d, a, ks_desc(b, lbo));
}
// D (64 x N) = [D +] A (4 b32 registers a thread) * B (N x 16)^T, B K-major in shared memory
template <int N, bool BF> __device__ __forceinline__ void ks_wgrsk(float* d, const unsigned* a, ks_sa b, int acc) {
  ks_wgrsk_d<N, BF>(d, a, ks_desc(b, 16u), acc);
}
#endif
"""

# the 3-warpgroup CTA (384 threads) must stay under 170 registers a thread: MLX writes the kernel's signature, so the
# cap comes from the header, which precedes it (the kernel is the only __global__ after the header)
LAUNCH_BOUNDS_HEADER = r"""
#ifndef KSIM_CUDA
#undef __global__
#define __global__ __attribute__((global)) __launch_bounds__({nth}, 1)
#endif
"""


def _TOP(j: str) -> list[str]:
    """The top of tile j's iteration: its copies landed and are visible to wgmma, everyone is done with the buffers
    the prefetch of tile j + PF overwrites (K_{j-1}: S_{j-1} waited; V_{j-2}: P V of tile j-2 waited)."""
    return [
        "ks_cp_wait<PF - 1>();                                  // this thread's copies of tile %s (and Q) landed" % j,
        "ks_fence_async();                                      // ... visible to the async proxy (wgmma)",
        "__syncthreads();                                       // everyone's; everyone is done with the old buffers",
    ]


def _PREFETCH(j: str) -> list[str]:
    """Tile j + PF's copies, issued once the tensor cores have this tile's work (their issue is off the path)."""
    return [
        f"if ({j} + PF < ntile) KS_TILE(({j} + PF) * BKV, ({j} + PF) % KST, ({j} + PF) % VST)",
        "ks_cp_commit();                                        // one group an iteration (maybe empty)",
    ]


def _S_ISSUE(j: str, qregs: bool) -> list[str]:
    call = ("ks_wgrsk<BKV, KS_BF>(s, qf[kd], " if qregs else
            "ks_wgss<BKV, KS_BF>(s, qa + (kd >> 2) * BQ * 128 + (kd & 3) * 32, ")
    return [
        f"{{ const ks_sa kb = sa + KO + ({j} % KST) * TILE_B;     // S_{j} = Q K_{j}^T",
        "#pragma unroll",
        "  for (int kd = 0; kd < DH / 16; ++kd)",
        f"    {call}kb + (kd >> 2) * REG_B + (kd & 3) * 32, kd > 0); }}",
        "ks_wg_commit();",
    ]


def _G(j: str, qregs: bool) -> list[str]:
    """Tile j's tensor-core work: S_j, then P V of tile j - 1 (it runs under S_j's softmax)."""
    return ["ks_wg_fence();", *_S_ISSUE(j, qregs),
            f"KS_PV({j} - 1)                                         // O += P V of tile {j} - 1",
            "ks_wg_commit();"]


def _SOFTMAX(j: str, wait: int) -> list[str]:
    """Online softmax of S_j in registers (mask on diagonal/tail tiles only), O's rescale (once P V of the previous
    tile is in; on the first tile the factor is 0 and O is 0), P_j packed into the A fragments. `wait`: the wgmma
    groups that may stay in flight while it runs (1: the P V issued after S_j)."""
    L = [
        "{",
        f"  ks_wg_wait<{wait}>();                                   // S_{j} is in",
        f"  const int j0 = {j} * BKV;",
        "  if ((CAUSAL && j0 + BKV - 1 > rw0) || j0 + BKV > SEQ) {   // diagonal or tail tile only",
        "    for (int i = 0; i < NS; ++i) for (int e = 0; e < 4; ++e) {",
        "      const int key = j0 + 8 * i + 2 * q + (e & 1); const int row = (e >> 1) ? rb : ra;",
        "      if (key >= SEQ || (CAUSAL && key > row)) s[4 * i + e] = -INFINITY;",
        "    }",
        "  }",
        "  float mx0 = m0, mx1 = m1;                            // raw-score maxima (the scale is positive)",
        "  for (int i = 0; i < NS; ++i) {",
        "    mx0 = fmaxf(mx0, fmaxf(s[4 * i], s[4 * i + 1])); mx1 = fmaxf(mx1, fmaxf(s[4 * i + 2], s[4 * i + 3]));",
        "  }",
        "  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));",
        "  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));",
        "  // finite from the first tile on: key 0 is valid for every row, causal or not",
        "  const float c0 = ks_exp2((m0 - mx0) * sc), c1 = ks_exp2((m1 - mx1) * sc);",
        "  m0 = mx0; m1 = mx1;",
        "  const float n0 = mx0 * sc, n1 = mx1 * sc;",
        "  float t0 = 0.0f, t1 = 0.0f;",
        "  for (int i = 0; i < NS; ++i) {",
        "    s[4 * i] = ks_exp2(fmaf(s[4 * i], sc, -n0)); s[4 * i + 1] = ks_exp2(fmaf(s[4 * i + 1], sc, -n0));",
        "    s[4 * i + 2] = ks_exp2(fmaf(s[4 * i + 2], sc, -n1)); s[4 * i + 3] = ks_exp2(fmaf(s[4 * i + 3], sc, -n1));",
        "    t0 += s[4 * i] + s[4 * i + 1]; t1 += s[4 * i + 2] + s[4 * i + 3];",
        "  }",
        "  l0 = l0 * c0 + t0; l1 = l1 * c1 + t1;",
    ]
    L += [
        *(["  ks_wg_wait<0>();                                   // P V of the previous tile is in: O, P may be touched"]
          if wait else []),
        "  if (__any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f)) {   // a row of the warp got a new max",
        "    for (int i = 0; i < NO; ++i) { o[4 * i] *= c0; o[4 * i + 1] *= c0; o[4 * i + 2] *= c1; o[4 * i + 3] *= c1; }",
        "  }",
        "  for (int kk = 0; kk < BKV / 16; ++kk) {              // the S accumulator is P's A-fragment layout",
        "    pa[kk][0] = ks_pack2f(s[8 * kk], s[8 * kk + 1]); pa[kk][1] = ks_pack2f(s[8 * kk + 2], s[8 * kk + 3]);",
        "    pa[kk][2] = ks_pack2f(s[8 * kk + 4], s[8 * kk + 5]); pa[kk][3] = ks_pack2f(s[8 * kk + 6], s[8 * kk + 7]);",
        "  }",
        "}",
    ]
    return L


def _MAIN(qregs: bool, stagger: bool) -> list[str]:
    """The tile loop. Iteration j: the barrier of tile j, tile j's wgmma (S_j, then P V of tile j-1), the prefetch of
    tile j + PF, the softmax of S_j (P V of tile j-1 runs under it: wgmma.wait_group 1).

    stagger: warpgroup 1 meets the barrier of tile j + 1 right after issuing tile j's wgmma, before its softmax of
    S_j; warpgroup 0 meets it after its softmax, before tile j + 1's wgmma (a barrier counts arrivals, not code
    locations). So warpgroup 1 runs half an iteration behind: each warpgroup's softmax runs while the other's wgmma keep
    the tensor cores busy (FlashAttention-3's ping-pong, with the per-tile barrier kept). The wgmma code is the same for
    both warpgroups (no branch around a wgmma, so ptxas keeps them asynchronous); both take every tile of the CTA."""
    nt = "ntile" if stagger else "nt_w"
    if not stagger:
        return [
            *_TOP("0"),
            "ks_wg_fence();",
            *_S_ISSUE("0", qregs),
            *_PREFETCH("0"),
            *_SOFTMAX("0", 0),
            "for (int j = 1; j < nt_w; ++j) {                      // steady state: no branch around a wgmma",
            *["  " + x for x in _TOP("j") + _G("j", qregs) + _PREFETCH("j") + _SOFTMAX("j", 1)],
            "}",
            "ks_wg_fence();                                         // the warpgroup's last tile: P V",
            "KS_PV(nt_w - 1)",
            "ks_wg_commit();",
            "ks_wg_wait<0>();",
            "for (int j = nt_w; j < ntile; ++j) {                  // causal: the CTA's other rows go on; keep its barriers",
            *["  " + x for x in _TOP("j") + _PREFETCH("j")],
            "}",
        ]
    return [
        *_TOP("0"),
        "ks_wg_fence();",
        *_S_ISSUE("0", True if qregs else False),
        *_PREFETCH("0"),
        "if (wg == 1) {                                         // warpgroup 1: tile 1's barrier before softmax 0",
        *["  " + x for x in _TOP("1")],
        "}",
        *_SOFTMAX("0", 0),
        f"for (int j = 1; j < {nt}; ++j) {{                     // no branch around a wgmma",
        "  if (wg == 0) {",
        *["    " + x for x in _TOP("j")],
        "  }",
        *["  " + x for x in _G("j", qregs) + _PREFETCH("j")],
        "  if (wg == 1) {",
        *["    " + x for x in _TOP("j + 1")],
        "  }",
        *["  " + x for x in _SOFTMAX("j", 1)],
        "}",
        "if (wg == 0) {                                         // the barrier warpgroup 1 met ahead (same count)",
        *["  " + x for x in _TOP(nt)],
        "}",
        "ks_wg_fence();                                         // the last tile: P V",
        f"KS_PV({nt} - 1)",
        "ks_wg_commit();",
        "ks_wg_wait<0>();",
    ]


def _source(k: dict) -> str:
    wg, bkv, pf, pvn = k["warpgroups"], k["block_kv"], k["stages"], k["pv_n"]
    qregs, stag = k["q_in"] == "regs", k["stagger"]
    kst, vst = rings(k)
    L = [
        f"constexpr int NWG = {wg}; constexpr int BKV = {bkv}; constexpr int PF = {pf};   // PF: tiles prefetched ahead",
        "constexpr int NTH = NWG * 128; constexpr int BQ = NWG * 64;",
        f"constexpr int KST = {kst}; constexpr int VST = {vst};   // K ring, V ring (V_j is read at iteration j + 1"
        + ("; staggered: warpgroup 1's wgmma on tile j run into iteration j + 1)" if stag else ")"),
        "constexpr int DC = DH / 8;                    // 16-byte chunks per row",
        "constexpr int TILE_B = BKV * DH * 2;          // bytes of one K or V tile",
        "constexpr int REG_B = BKV * 128;              // one 64-column region of a tile: V's leading byte offset",
        "constexpr int QO = 0; constexpr int KO = " + ("0;" if qregs else "BQ * DH * 2;")
        + " constexpr int VO = KO + KST * TILE_B;" + ("   // Q lives in registers" if qregs else ""),
        f"constexpr int PVN = {pvn} < DH ? {pvn} : DH;   // N of the P V wgmma",
        "constexpr int NS = BKV / 8;                   // S chunks of 8 keys (4 floats a thread each)",
        "constexpr int NO = DH / 8;                    // O chunks of 8 columns",
        "static_assert(DH == 64 || DH == 128, \"head dim 64 or 128\");",
        "extern __shared__ __align__(16) __half ks_smem[];",
        "unsigned char* sm = ks_align1k(ks_smem);      // 1 KB aligned: the swizzle is on the address bits",
        "const ks_sa sa = ks_saddr(sm);",
        "const bool CAUSAL = causal[0] > 0.5f;",
        "const int t = threadIdx.x; const int lane = t & 31; const int wg = t >> 7; const int w = (t >> 5) & 3;",
        "const int g = lane >> 2; const int q = lane & 3;",
        "const int bh = blockIdx.x; const int b = bh / HQ; const int h = bh % HQ; const int hk = h / (HQ / HKV);",
        "const int nqb = (SEQ + BQ - 1) / BQ;",
        "const int q0 = (nqb - 1 - (int)blockIdx.y) * BQ;      // longest (causal) blocks first",
        "const int rw0 = q0 + wg * 64;                          // this warpgroup's first row",
        "const int ra = rw0 + 16 * w + g, rb = ra + 8;          // this thread's two rows",
        "const __half* Qh = reinterpret_cast<const __half*>(Q) + (size_t)(b * HQ + h) * SEQ * DH;",
        "const __half* Kh = reinterpret_cast<const __half*>(K) + (size_t)(b * HKV + hk) * SEQ * DH;",
        "const __half* Vh = reinterpret_cast<const __half*>(V) + (size_t)(b * HKV + hk) * SEQ * DH;",
        "const float sc = rsqrtf((float)DH) * 1.4426950408889634f;   // scale * log2(e), folded into the exponent",
        "// tiles of R rows: 64-column regions of R x 128 bytes, chunk c of row r at chunk position c ^ (r % 8)",
        "#define KS_SW(R, r, c8) ((((c8) >> 3) * (R) + (r)) * 128 + ((((c8) & 7) ^ ((r) & 7)) << 4))",
        "#define KS_TILE(j0, kb, vb) \\",
        "  { for (int f = t; f < BKV * DC; f += NTH) { const int r = f / DC; const int c8 = f % DC; \\",
        "      const int jr = (j0) + r; const bool ok = jr < SEQ; const size_t go = (size_t)(ok ? jr : 0) * DH + c8 * 8; \\",
        "      const int so = KS_SW(BKV, r, c8); \\",
        "      ks_cp16(reinterpret_cast<__half*>(sm + KO + (kb) * TILE_B + so), Kh + go, ok); \\",
        "      ks_cp16(reinterpret_cast<__half*>(sm + VO + (vb) * TILE_B + so), Vh + go, ok); } }",
        "const int kend = CAUSAL ? ((q0 + BQ < SEQ) ? q0 + BQ : SEQ) : SEQ;",
        "const int ntile = (kend + BKV - 1) / BKV;              // the CTA's tiles (loads, barriers)",
        "const int kend_w = CAUSAL ? ((rw0 + 64 < SEQ) ? rw0 + 64 : SEQ) : SEQ;",
        "const int nt_w = (kend_w + BKV - 1) / BKV;             // this warpgroup's tiles (causal: to its diagonal), >= 1",
        *([] if qregs else [
            "for (int f = t; f < BQ * DC; f += NTH) {",
            "  const int r = f / DC; const int c8 = f % DC; const int i = q0 + r; const bool ok = i < SEQ;",
            "  ks_cp16(reinterpret_cast<__half*>(sm + QO + KS_SW(BQ, r, c8)), Qh + (size_t)(ok ? i : 0) * DH + c8 * 8, ok);",
            "}"]),
        "for (int p = 0; p < PF; ++p) {                         // group p: tile p (and Q with tile 0)",
        "  if (p < ntile) KS_TILE(p * BKV, p, p)",
        "  ks_cp_commit();",
        "}",
        "float o[DH / 2];",
        "for (int i = 0; i < DH / 2; ++i) o[i] = 0.0f;",
        "float s[BKV / 2];",
        "unsigned pa[BKV / 16][4];",
        "float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;",
        *(["unsigned qf[DH / 16][4];                               // Q's A fragments: rows ra, rb",
            "for (int kd = 0; kd < DH / 16; ++kd) {",
            "  const int c = 16 * kd + 2 * q;",
            "  qf[kd][0] = ra < SEQ ? ks_ld2(Qh + (size_t)ra * DH + c) : 0u;",
            "  qf[kd][1] = rb < SEQ ? ks_ld2(Qh + (size_t)rb * DH + c) : 0u;",
            "  qf[kd][2] = ra < SEQ ? ks_ld2(Qh + (size_t)ra * DH + c + 8) : 0u;",
            "  qf[kd][3] = rb < SEQ ? ks_ld2(Qh + (size_t)rb * DH + c + 8) : 0u;",
            "}"] if qregs else
          ["const ks_sa qa = sa + QO + wg * 64 * 128;              // this warpgroup's 64 rows of Q"]),
        "#define KS_PV(jj) \\",
        "  { const ks_sa vb = sa + VO + ((jj) % VST) * TILE_B; \\",
        "    _Pragma(\"unroll\") for (int kk = 0; kk < BKV / 16; ++kk) \\",
        "      _Pragma(\"unroll\") for (int nh = 0; nh < DH / PVN; ++nh) \\",
        "        ks_wgrs<PVN, KS_BF>(o + nh * (PVN / 2), pa[kk], vb + kk * 2048 + nh * REG_B, PVN == 128 ? REG_B : 1024); }",
        *_MAIN(qregs, stag),
        "#undef KS_PV",
        "#undef KS_TILE",
        "#undef KS_SW",
        "l0 += __shfl_xor_sync(0xffffffffu, l0, 1); l1 += __shfl_xor_sync(0xffffffffu, l1, 1);",
        "l0 += __shfl_xor_sync(0xffffffffu, l0, 2); l1 += __shfl_xor_sync(0xffffffffu, l1, 2);",
        "const float i0 = 1.0f / l0, i1 = 1.0f / l1;",
        "__half* Oh = reinterpret_cast<__half*>(out) + (size_t)(b * HQ + h) * SEQ * DH;",
        "for (int i = 0; i < NO; ++i) {",
        "  const int c = 8 * i + 2 * q;",
        "  if (ra < SEQ) *reinterpret_cast<unsigned*>(Oh + (size_t)ra * DH + c) = ks_pack2f(o[4 * i] * i0, o[4 * i + 1] * i0);",
        "  if (rb < SEQ) *reinterpret_cast<unsigned*>(Oh + (size_t)rb * DH + c) = ks_pack2f(o[4 * i + 2] * i1, o[4 * i + 3] * i1);",
        "}",
    ]
    out = []
    for line in L:      # register arrays must be indexed by constants: unroll every loop but the tile loop and copies
        st = line.lstrip()
        if (st.startswith("for (") and not st.endswith("\\") and "++j)" not in st and "f = t;" not in st
                and "p = 0; p < PF" not in st and not (out and out[-1].strip() == "#pragma unroll")):
            out.append(line[:len(line) - len(st)] + "#pragma unroll")
        out.append(line)
    return "\n".join(out)


def _typed(k: dict, bf: bool) -> str:
    src = _source(k).replace("KS_BF", "true" if bf else "false")
    if bf:
        src = src.replace("ks_pack2f(", "ks_pack2bf(")
        assert "ks_pack2f(" not in src
    return src


def kernel_header(k: dict) -> str:
    hdr = f"{MMA_HEADER}\n{LDSM_HEADER}\n{ASYNC_HEADER}\n{WGMMA_HEADER}"
    if k["warpgroups"] * 128 * 255 > REG_FILE:
        hdr += LAUNCH_BOUNDS_HEADER.replace("{nth}", str(k["warpgroups"] * 128))
    return hdr


def render_flash_wgmma(k: dict, kind: str) -> str:
    if kind != "cuda":
        raise ValueError("attention.flash_wgmma renders cuda candidates (Hopper wgmma through inline PTX)")
    why = why_invalid(k)
    if why:
        raise ValueError(f"attention.flash_wgmma: {why}")
    return attention_module(kind, "attention.flash_wgmma", k, _typed(k, False), _typed(k, True), kernel_header(k),
                            smem_bytes(k), 128 * k["warpgroups"], 64 * k["warpgroups"], "Dh in (64, 128)",
                            "Dh 64 or 128")
