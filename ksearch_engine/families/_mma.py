"""Tensor-core helpers for CUDA candidates: `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32` by inline PTX,
with an exact plain-CUDA twin for the CPU simulator.

The simulator defines KSIM_CUDA (and __CUDA_ARCH__ 900, so that is no guard): there the same fragment layout is
reproduced with warp shuffles (each lane fetches the A and B halves its four accumulators need from the lanes
that hold them), so the simulator checks the fragment bookkeeping of a template, not only its arithmetic.

Fragment layout (PTX ISA, m16n8k16, f16): g = lane / 4, q = lane % 4;
A (16x16, row-major) 4 x b32: a0 = A[g][2q..2q+1], a1 = A[g+8][2q..], a2 = A[g][2q+8..], a3 = A[g+8][2q+8..];
B (16x8, "col": stored as B^T rows) 2 x b32: b0 = B[2q..2q+1][g], b1 = B[2q+8..2q+9][g];
C (16x8 f32) c0, c1 = C[g][2q], C[g][2q+1]; c2, c3 = C[g+8][2q], C[g+8][2q+1].
"""
from __future__ import annotations

MMA_HEADER = r"""
#ifdef KSIM_CUDA
__device__ inline unsigned ks_ld2(const __half* p) {        // two consecutive halves as one b32 (low = p[0])
  return (unsigned)__half_as_ushort(p[0]) | ((unsigned)__half_as_ushort(p[1]) << 16);
}
__device__ inline float ks_lo(unsigned u) { return __half2float(__ushort_as_half((unsigned short)(u & 0xffffu))); }
__device__ inline float ks_hi(unsigned u) { return __half2float(__ushort_as_half((unsigned short)(u >> 16))); }
__device__ inline void ks_mma16816(float* c, const unsigned* a, const unsigned* b) {
  const int lane = threadIdx.x & 31; const int g = lane >> 2; const int q = lane & 3;
  float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f, r3 = 0.0f;
  for (int kp = 0; kp < 8; ++kp) {                          // k = 2 kp, 2 kp + 1
    const int src = kp & 3; const int hi = kp >> 2;
    const unsigned ar = __shfl_sync(0xffffffffu, a[2 * hi], g * 4 + src);      // A[g][k..k+1]
    const unsigned ar8 = __shfl_sync(0xffffffffu, a[1 + 2 * hi], g * 4 + src); // A[g+8][k..k+1]
    const unsigned b0 = __shfl_sync(0xffffffffu, b[hi], (2 * q) * 4 + src);    // B[k..k+1][2q]
    const unsigned b1 = __shfl_sync(0xffffffffu, b[hi], (2 * q + 1) * 4 + src);// B[k..k+1][2q+1]
    r0 += ks_lo(ar) * ks_lo(b0) + ks_hi(ar) * ks_hi(b0);
    r1 += ks_lo(ar) * ks_lo(b1) + ks_hi(ar) * ks_hi(b1);
    r2 += ks_lo(ar8) * ks_lo(b0) + ks_hi(ar8) * ks_hi(b0);
    r3 += ks_lo(ar8) * ks_lo(b1) + ks_hi(ar8) * ks_hi(b1);
  }
  c[0] += r0; c[1] += r1; c[2] += r2; c[3] += r3;
}
#else
__device__ __forceinline__ unsigned ks_ld2(const __half* p) { return *reinterpret_cast<const unsigned*>(p); }
__device__ __forceinline__ void ks_mma16816(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
__device__ inline unsigned ks_pack2(float lo, float hi) {     // two floats -> one b32 of halves (low = lo)
  return (unsigned)__half_as_ushort(__float2half(lo)) | ((unsigned)__half_as_ushort(__float2half(hi)) << 16);
}
"""

LDSM_HEADER = r"""
#ifdef KSIM_CUDA
// ldmatrix.x4.trans twin: lane L gives the row address of row L % 8 of matrix L / 8; register i receives
// matrix i transposed: (M_i[2q][g], M_i[2q+1][g])
__device__ inline void ks_ldsm_x4_t(unsigned* r, const __half* p) {
  const int lane = threadIdx.x & 31; const int g = lane >> 2; const int q = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const __half* a = __shfl_sync(0xffffffffu, p, 8 * i + 2 * q);
    const __half* b = __shfl_sync(0xffffffffu, p, 8 * i + 2 * q + 1);
    r[i] = (unsigned)__half_as_ushort(a[g]) | ((unsigned)__half_as_ushort(b[g]) << 16);
  }
}
#else
__device__ __forceinline__ void ks_ldsm_x4_t(unsigned* r, const __half* p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
#endif
"""

# m16n8k8 with tf32 inputs (fp32 bit patterns whose low 13 mantissa bits are ignored), fp32 accumulation, and the
# 3xTF32 split x = hi + lo (hi = tf32(x), lo = tf32(x - hi)): hi*hi + hi*lo + lo*hi carries about fp32 precision.
# Fragment layout (PTX ISA, m16n8k8 .tf32): g = lane / 4, q = lane % 4;
# A (16x8, row) 4 x b32: a0 = A[g][q], a1 = A[g+8][q], a2 = A[g][q+4], a3 = A[g+8][q+4];
# B (8x8, col) 2 x b32: b0 = B[q][g], b1 = B[q+4][g];  C (16x8 f32) as for m16n8k16.
TF32_HEADER = r"""
#ifdef KSIM_CUDA
__device__ inline unsigned ks_tf32(float x) {               // cvt.rna.tf32.f32: nearest, ties away from zero
  return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}
__device__ inline void ks_mma1688(float* c, const unsigned* a, const unsigned* b) {
  const int lane = threadIdx.x & 31; const int g = lane >> 2; const int q = lane & 3;
  float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f, r3 = 0.0f;
  for (int k = 0; k < 8; ++k) {
    const int src = k & 3; const int hi = k >> 2;
    const float ar = __uint_as_float(__shfl_sync(0xffffffffu, a[2 * hi], g * 4 + src));      // A[g][k]
    const float ar8 = __uint_as_float(__shfl_sync(0xffffffffu, a[2 * hi + 1], g * 4 + src)); // A[g+8][k]
    const float b0 = __uint_as_float(__shfl_sync(0xffffffffu, b[hi], (2 * q) * 4 + src));   // B[k][2q]
    const float b1 = __uint_as_float(__shfl_sync(0xffffffffu, b[hi], (2 * q + 1) * 4 + src)); // B[k][2q+1]
    r0 += ar * b0; r1 += ar * b1; r2 += ar8 * b0; r3 += ar8 * b1;
  }
  c[0] += r0; c[1] += r1; c[2] += r2; c[3] += r3;
}
#else
__device__ __forceinline__ unsigned ks_tf32(float x) {
  unsigned u;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
  return u;
}
__device__ __forceinline__ void ks_mma1688(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
__device__ inline void ks_split(unsigned& hi, unsigned& lo, float x) {   // x = hi + lo, both tf32
  hi = ks_tf32(x);
  lo = ks_tf32(x - __uint_as_float(hi));
}
"""
