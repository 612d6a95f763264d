"""CUDA's warp matrix API (`nvcuda::wmma`, <mma.h>) in both ports.

* CUDA-backend port: the code stays as written; its header gets `#include <mma.h>` (`cuda_header_lines`) and the
  file's `using namespace nvcuda...;` / `namespace wmma = ...;` lines (translator._namespace_aliases). MLX's
  cuda_kernel compiles with NVRTC on the `nvidia-cuda-runtime` wheel's include folder, which has mma.h but not
  the crt/mma.h it includes (that is the `nvidia-cuda-crt` wheel, which mlx-cuda does not pull in): there the
  header defines the same API on `mma.sync` PTX (m16n8k16 f16/bf16, m16n8k8 tf32; shapes with M a multiple of 16).
  Tried on an H200 (mlx 0.32.4): both branches matched numpy on the tests' kernels. In the CPU simulator the
  calls run on ksim_wmma.h's warp-collective emulation.
* Metal port: `metal_wmma_support` is a header that defines `nvcuda::wmma` on simdgroup matrices. A warp (32
  lanes) is one simdgroup; an MxN fragment is (M/8)x(N/8) tiles of 8x8, and each lane's `x[]` holds its two
  elements of every tile in the order of `thread_elements()` (tile-major), so elementwise loops over
  `x[0..num_elements)` work unchanged. Loads and stores of half and float fragments are simdgroup_load /
  simdgroup_store with the stride (col_major: transposed); bfloat fragments are read and written lane by lane
  at the same positions (the lane index comes from simd_prefix_exclusive_sum, as Metal gives thread attributes
  to the kernel only). mma_sync multiplies on simdgroup_float8x8: half and bfloat16 inputs widen to float
  exactly, products are summed in float (what tensor cores do for float accumulators), and a half accumulator
  is rounded to half once per mma_sync. No simdgroup_matrix<bfloat> (Metal 3.1+) is needed.
* `fragment` is a Metal keyword: the port spells the type `fragment_` (rewrite.py's metal-keyword rule).
* Not ported to Metal: double (8x8x4) and 8-bit integer fragments (no such simdgroup matrices), sub-byte
  precisions, shapes whose sides are not multiples of 8; `satf` is ignored there (reported).
"""
from __future__ import annotations

import re

from .rewrite import Issue

# `wmma::...`, `nvcuda::...`, or fragments named without the namespace (after `using namespace nvcuda::wmma;`);
# a bare `mma_sync(` alone is not wmma (inline-PTX GEMMs often name their own helper so)
_USES = re.compile(r"\bwmma::|\bnvcuda::|\bfragment_?\s*<\s*(?:\w+\s*::\s*)*(?:matrix_a|matrix_b|accumulator)\b")
_FRAGMENT = re.compile(r"\bfragment\s*<\s*(?:(?:::)?(?:nvcuda::)?wmma::)?(\w+)\s*,\s*([^,<>]+?)\s*,\s*([^,<>]+?)\s*,"
                       r"\s*([^,<>]+?)\s*,\s*((?:[\w:]+\s*)+?)\s*(?:,\s*[\w:]+\s*)?>")
_METAL_TYPES = {"half", "__half", "float", "__nv_bfloat16", "nv_bfloat16", "bfloat16", "precision::tf32",
                "wmma::precision::tf32", "nvcuda::wmma::precision::tf32", "tf32"}


def uses_wmma(text: str) -> bool:
    return bool(_USES.search(text or ""))


def cuda_header_lines(source: str, texts: list[str]) -> list[str]:
    """Text the CUDA-backend port's header needs for wmma code, before the preamble (the file's namespace lines
    come with it: translator._namespace_aliases): `#include <mma.h>` where the toolkit's headers are complete.
    MLX's cuda_kernel compiles with NVRTC on the include folder of the `nvidia-cuda-runtime` wheel, which has mma.h
    but not the crt/mma.h it includes (that is the `nvidia-cuda-crt` wheel, which mlx-cuda does not require):
    there the header defines the same API itself on `mma.sync` PTX (CUDA_WMMA_PTX)."""
    if not any(uses_wmma(t) for t in texts):
        return []
    return [CUDA_WMMA_INCLUDE]


CUDA_WMMA_INCLUDE = """// ksearch: nvcuda::wmma. <mma.h> needs the toolkit's crt/mma.h; NVRTC on a pip-installed CUDA runtime has
// mma.h without it: then the same API on mma.sync PTX (translate/wmma.py). KSIM_CUDA: ksearch's CPU simulator,
// which brings its own nvcuda::wmma.
#if defined(__has_include)
#if __has_include(<crt/mma.h>)
#define KS_WMMA_TOOLKIT 1
#endif
#endif
#if defined(KS_WMMA_TOOLKIT) || defined(KSIM_CUDA)
#include <mma.h>
#else
""" + r"""namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision { struct tf32 {}; }
inline __device__ float __float_to_tf32(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;
  return __uint_as_float(u & 0xffffe000u);
}
namespace ks {
template <class A, class B> struct same { static constexpr bool value = false; };
template <class A> struct same<A, A> { static constexpr bool value = true; };
__device__ inline int lane() { unsigned l; asm volatile("mov.u32 %0, %%laneid;" : "=r"(l)); return (int)l; }
template <class T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };
template <class T> struct kstep { static constexpr int value = 16; };        // K of one mma.sync: m16n8k16
template <> struct kstep<precision::tf32> { static constexpr int value = 8; };  // m16n8k8
template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };
// the fragment is blocks of mma.sync operands, each lane holding its registers' elements in PTX order:
// A 16 x KS, B KS x 8, C/D 16 x 8 (g = lane / 4, t = lane % 4)
template <class Use> struct blk;
template <> struct blk<matrix_a> { static constexpr int rows = 16; };
template <> struct blk<matrix_b> { static constexpr int cols = 8; };
template <> struct blk<accumulator> { static constexpr int rows = 16, cols = 8; };
template <class Use, int KS> __device__ inline void pos(int e, int& r, int& c);
template <> __device__ inline void pos<matrix_a, 16>(int e, int& r, int& c) {
  int l = lane(); int g = l / 4, t = l % 4; r = g + 8 * ((e >> 1) & 1); c = 2 * t + (e & 1) + 8 * (e >> 2); }
template <> __device__ inline void pos<matrix_a, 8>(int e, int& r, int& c) {
  int l = lane(); int g = l / 4, t = l % 4; r = g + 8 * (e & 1); c = t + 4 * (e >> 1); }
template <> __device__ inline void pos<matrix_b, 16>(int e, int& r, int& c) {
  int l = lane(); int g = l / 4, t = l % 4; r = 2 * t + (e & 1) + 8 * (e >> 1); c = g; }
template <> __device__ inline void pos<matrix_b, 8>(int e, int& r, int& c) {
  int l = lane(); int g = l / 4, t = l % 4; r = t + 4 * e; c = g; }
template <> __device__ inline void pos<accumulator, 16>(int e, int& r, int& c) {
  int l = lane(); int g = l / 4, t = l % 4; r = g + 8 * (e >> 1); c = 2 * t + (e & 1); }
template <> __device__ inline void pos<accumulator, 8>(int e, int& r, int& c) { pos<accumulator, 16>(e, r, c); }
}  // namespace ks

template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {
 public:
  typedef typename ks::storage<T>::type element_type;
  typedef element_type storage_element_type;
  static constexpr int KS = ks::kstep<T>::value;
  static constexpr int rows = ks::dims<Use, M, N, K>::rows, cols = ks::dims<Use, M, N, K>::cols;
  // block shape: A 16 x KS, B KS x 8, C 16 x 8
  static constexpr int brows = ks::same<Use, matrix_b>::value ? KS : 16;
  static constexpr int bcols = ks::same<Use, matrix_a>::value ? KS : 8;
  static constexpr int bper = brows * bcols / 32;
  static constexpr int num_elements = rows * cols / 32;
  static constexpr int num_storage_elements = num_elements;
  static_assert(rows % brows == 0 && cols % bcols == 0,
                "wmma shape without <mma.h>: M must be a multiple of 16 (install nvidia-cuda-crt for 8x32x16)");
  alignas(8) element_type x[num_elements];
  // element e of this lane: its row and column in the fragment
  __device__ void at(int e, int& r, int& c) const {
    int b = e / bper, br = b / (cols / bcols), bc = b % (cols / bcols);
    ks::pos<Use, KS>(e % bper, r, c);
    r += br * brows;
    c += bc * bcols;
  }
};

template <class Use, int M, int N, int K, class T, class L, class V>
__device__ inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
  for (int e = 0; e < f.num_elements; e++) f.x[e] = static_cast<typename fragment<Use, M, N, K, T, L>::element_type>(v);
}
template <class F, class P> __device__ inline void ks_load(F& f, const P* p, unsigned ldm, bool col) {
  __syncwarp();
  for (int e = 0; e < F::num_elements; e++) {
    int r, c;
    f.at(e, r, c);
    f.x[e] = col ? p[r + (size_t)c * ldm] : p[(size_t)r * ldm + c];
  }
}
template <class Use, int M, int N, int K, class T, class L, class P>
__device__ inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const P* p, unsigned ldm) {
  ks_load(f, p, ldm, ks::same<L, col_major>::value);
}
template <class Use, int M, int N, int K, class T, class L, class P>
__device__ inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const P* p, unsigned ldm, layout_t layout) {
  ks_load(f, p, ldm, layout == mem_col_major);
}
template <int M, int N, int K, class T, class P>
__device__ inline void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  __syncwarp();
  for (int e = 0; e < f.num_elements; e++) {
    int r, c;
    f.at(e, r, c);
    (layout == mem_col_major ? p[r + (size_t)c * ldm] : p[(size_t)r * ldm + c]) = f.x[e];
  }
}
namespace ks {
__device__ inline unsigned u32(const void* p) { return *reinterpret_cast<const unsigned*>(p); }
// one mma.sync on a 16x8 block: d = a * b + c (c and d: 4 floats, or 2 half2 registers)
__device__ inline void mma16(float* d, const __half* a, const __half* b, const float* c) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(u32(a)), "r"(u32(a + 2)), "r"(u32(a + 4)), "r"(u32(a + 6)), "r"(u32(b)), "r"(u32(b + 2)),
                 "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ inline void mma16(float* d, const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(u32(a)), "r"(u32(a + 2)), "r"(u32(a + 4)), "r"(u32(a + 6)), "r"(u32(b)), "r"(u32(b + 2)),
                 "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ inline void mma16(__half* d, const __half* a, const __half* b, const __half* c) {
  unsigned d0, d1;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%8,%9};"
               : "=r"(d0), "=r"(d1)
               : "r"(u32(a)), "r"(u32(a + 2)), "r"(u32(a + 4)), "r"(u32(a + 6)), "r"(u32(b)), "r"(u32(b + 2)),
                 "r"(u32(c)), "r"(u32(c + 2)));
  *reinterpret_cast<unsigned*>(d) = d0;
  *reinterpret_cast<unsigned*>(d + 2) = d1;
}
__device__ inline void mma16(float* d, const float* a, const float* b, const float* c) {   // tf32, m16n8k8
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
                 "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])),
                 "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
}  // namespace ks
template <int M, int N, int K, class TD, class TA, class LA, class TB, class LB, class TC>
__device__ inline void mma_sync(fragment<accumulator, M, N, K, TD>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                                const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
                                bool satf = false) {
  typedef fragment<matrix_a, M, N, K, TA, LA> FA;
  typedef fragment<matrix_b, M, N, K, TB, LB> FB;
  typedef fragment<accumulator, M, N, K, TD> FD;
  constexpr int KS = FA::KS;
  for (int i = 0; i < M / 16; i++)
    for (int j = 0; j < N / 8; j++) {
      int cb = i * (N / 8) + j;
      alignas(8) typename FD::element_type acc[4];
      for (int e = 0; e < 4; e++) acc[e] = static_cast<typename FD::element_type>(c.x[cb * 4 + e]);
      for (int k = 0; k < K / KS; k++)
        ks::mma16(acc, a.x + (i * (K / KS) + k) * FA::bper, b.x + (k * (N / 8) + j) * FB::bper, acc);
      for (int e = 0; e < 4; e++) d.x[cb * 4 + e] = acc[e];
    }
}
}  // namespace wmma
}  // namespace nvcuda
#endif
"""


_ALIAS = re.compile(r"\btypedef\s+[^;{}]*\bfragment\s*<[^;{}]*>\s*(\w+)\s*;|\busing\s+(\w+)\s*=\s*[^;{}]*\bfragment\s*<")


def fragment_aliases(source: str) -> set[str]:
    """Names the file gives fragment types (`typedef wmma::fragment<...> Acc;`, `using Acc = ...;`)."""
    return {a or b for a, b in _ALIAS.findall(source or "")}


def metal_issues(text: str, line0: int = 0) -> list[Issue]:
    """What the Metal port's wmma cannot do, one issue per fragment declaration (0-based lines of `text`)."""
    out: list[Issue] = []
    seen = set()
    for m in _FRAGMENT.finditer(text or ""):
        use, mm, nn, kk, typ = (g.strip() for g in m.groups())
        typ = " ".join(typ.split())
        line = line0 + text.count("\n", 0, m.start())
        key = (mm, nn, kk, typ)
        if key in seen:
            continue
        seen.add(key)
        dims = []
        for d in (mm, nn, kk):
            try:
                dims.append(int(d))
            except ValueError:
                dims.append(None)
        if typ not in _METAL_TYPES and typ.split("::")[-1] not in {"half", "float", "tf32"}:
            what = ("double" if typ == "double" else
                    "8-bit integer" if typ in ("signed char", "unsigned char", "char", "int8_t", "uint8_t", "int") else
                    "sub-byte" if typ.split("::")[-1] in ("u4", "s4", "b1") else typ)
            if typ in ("int", "double") and use == "accumulator":
                continue    # reported on the matrix_a/matrix_b fragment that goes with it
            out.append(Issue(construct=m.group(0), line=line, severity="error",
                             message=f"wmma fragment of {what} elements: Metal's simdgroup matrices are half, float "
                                     "(and bfloat); port this GEMM with float fragments, or by hand"))
        elif any(d is not None and d % 8 for d in dims):
            out.append(Issue(construct=m.group(0), line=line, severity="error",
                             message=f"wmma shape {mm}x{nn}x{kk}: the Metal port builds fragments from 8x8 "
                                     "simdgroup matrices, so every side must be a multiple of 8"))
    for m in re.finditer(r"\bmma_sync\s*\(([^;]*),\s*true\s*\)\s*;", text or ""):
        out.append(Issue(construct=m.group(0).strip(), line=line0 + text.count("\n", 0, m.start()), severity="warning",
                         message="mma_sync(..., satf=true): the Metal port does not saturate (results past the "
                                 "accumulator's range stay inf)"))
    return out


_METAL_HEAD = """// ksearch: CUDA's nvcuda::wmma on Metal simdgroup matrices (translate/wmma.py): a warp is a simdgroup; an
// MxN fragment is (M/8)x(N/8) 8x8 tiles, x[] = this lane's thread_elements() of each tile, tile-major
#include <metal_simdgroup_matrix>
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major = 0, mem_col_major = 1 };
namespace precision { struct tf32 {}; }
template <typename T> struct ks_storage { typedef T type; };
template <> struct ks_storage<precision::tf32> { typedef float type; };
template <typename L> struct ks_col { static constant constexpr const bool value = false; };
template <> struct ks_col<col_major> { static constant constexpr const bool value = true; };
template <typename Use, int M, int N, int K> struct ks_dims;
template <int M, int N, int K> struct ks_dims<matrix_a, M, N, K> {
  static constant constexpr const int rows = M;
  static constant constexpr const int cols = K; };
template <int M, int N, int K> struct ks_dims<matrix_b, M, N, K> {
  static constant constexpr const int rows = K;
  static constant constexpr const int cols = N; };
template <int M, int N, int K> struct ks_dims<accumulator, M, N, K> {
  static constant constexpr const int rows = M;
  static constant constexpr const int cols = N; };
// `fragment` is a Metal keyword: the port names the type fragment_
template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment_ {
  typedef typename ks_storage<T>::type element_type;
  typedef element_type storage_element_type;
  static constant constexpr const int rows = ks_dims<Use, M, N, K>::rows;
  static constant constexpr const int cols = ks_dims<Use, M, N, K>::cols;
  static constant constexpr const int num_elements = rows * cols / 32;
  static constant constexpr const int num_storage_elements = rows * cols / 32;
  element_type x[num_elements];
};
// one 8x8 tile <-> this lane's two elements of it: half and float through simdgroup_load / simdgroup_store
template <typename E> struct ks_tile_io {
  template <typename P> static void load(thread E* x, P p, ulong ld, bool tr) {
    simdgroup_matrix<E, 8, 8> m;
    simdgroup_load(m, p, ld, ulong2(0, 0), tr);
    x[0] = m.thread_elements()[0];
    x[1] = m.thread_elements()[1];
  }
  template <typename P> static void store(thread const E* x, P p, ulong ld, bool tr) {
    simdgroup_matrix<E, 8, 8> m;
    m.thread_elements()[0] = x[0];
    m.thread_elements()[1] = x[1];
    simdgroup_store(m, p, ld, ulong2(0, 0), tr);
  }
};
"""

_METAL_BFLOAT = """// bfloat tiles lane by lane, at the positions thread_elements() has (no simdgroup_matrix<bfloat> needed)
template <> struct ks_tile_io<bfloat> {
  static uint lane() { return simd_prefix_exclusive_sum(1u); }   // wmma runs on whole simdgroups
  template <typename P> static void load(thread bfloat* x, P p, ulong ld, bool tr) {
    uint l = lane();
    ulong r = ulong(((l / 4u) & 4u) + (l / 2u) % 4u), c = ulong(((l / 4u) & 2u) * 2u + (l % 2u) * 2u);
    x[0] = tr ? p[c * ld + r] : p[r * ld + c];
    x[1] = tr ? p[(c + 1) * ld + r] : p[r * ld + c + 1];
  }
  template <typename P> static void store(thread const bfloat* x, P p, ulong ld, bool tr) {
    uint l = lane();
    ulong r = ulong(((l / 4u) & 4u) + (l / 2u) % 4u), c = ulong(((l / 4u) & 2u) * 2u + (l % 2u) * 2u);
    if (tr) { p[c * ld + r] = x[0]; p[(c + 1) * ld + r] = x[1]; }
    else { p[r * ld + c] = x[0]; p[r * ld + c + 1] = x[1]; }
  }
};
"""

_METAL_TAIL = """template <typename F, typename P> inline void ks_load(thread F& f, P p, uint ldm, bool col) {
  for (int ti = 0; ti < F::rows / 8; ti++)
    for (int tj = 0; tj < F::cols / 8; tj++) {
      ulong off = col ? ulong(ti * 8) + ulong(tj * 8) * ulong(ldm) : ulong(ti * 8) * ulong(ldm) + ulong(tj * 8);
      ks_tile_io<typename F::element_type>::load(f.x + 2 * (ti * (F::cols / 8) + tj), p + off, ulong(ldm), col);
    }
}
template <typename F, typename P> inline void ks_store(P p, thread const F& f, uint ldm, bool col) {
  for (int ti = 0; ti < F::rows / 8; ti++)
    for (int tj = 0; tj < F::cols / 8; tj++) {
      ulong off = col ? ulong(ti * 8) + ulong(tj * 8) * ulong(ldm) : ulong(ti * 8) * ulong(ldm) + ulong(tj * 8);
      ks_tile_io<typename F::element_type>::store(f.x + 2 * (ti * (F::cols / 8) + tj), p + off, ulong(ldm), col);
    }
}
template <typename Use, int M, int N, int K, typename T, typename L, typename V>
inline void fill_fragment(thread fragment_<Use, M, N, K, T, L>& f, V v) {
  for (int e = 0; e < fragment_<Use, M, N, K, T, L>::num_elements; e++)
    f.x[e] = static_cast<typename fragment_<Use, M, N, K, T, L>::element_type>(v);
}
// matrix_a / matrix_b: the layout is the fragment's; accumulator: an argument
template <typename Use, int M, int N, int K, typename T, typename L, typename P>
inline void load_matrix_sync(thread fragment_<Use, M, N, K, T, L>& f, P p, uint ldm) {
  ks_load(f, p, ldm, ks_col<L>::value);
}
template <typename Use, int M, int N, int K, typename T, typename L, typename P>
inline void load_matrix_sync(thread fragment_<Use, M, N, K, T, L>& f, P p, uint ldm, layout_t layout) {
  ks_load(f, p, ldm, layout == mem_col_major);
}
template <int M, int N, int K, typename T, typename P>
inline void store_matrix_sync(P p, thread const fragment_<accumulator, M, N, K, T>& f, uint ldm, layout_t layout) {
  ks_store(p, f, ldm, layout == mem_col_major);
}
// D = A * B + C on simdgroup_float8x8 tiles (half and bfloat16 widen exactly); d may be c
template <int M, int N, int K, typename TD, typename TA, typename LA, typename TB, typename LB, typename TC>
inline void mma_sync(thread fragment_<accumulator, M, N, K, TD>& d, thread const fragment_<matrix_a, M, N, K, TA, LA>& a,
                     thread const fragment_<matrix_b, M, N, K, TB, LB>& b,
                     thread const fragment_<accumulator, M, N, K, TC>& c, bool satf = false) {
  typedef typename fragment_<accumulator, M, N, K, TD>::element_type ED;
  for (int i = 0; i < M / 8; i++)
    for (int j = 0; j < N / 8; j++) {
      int t = i * (N / 8) + j;
      simdgroup_float8x8 acc;
      acc.thread_elements()[0] = float(c.x[2 * t]);
      acc.thread_elements()[1] = float(c.x[2 * t + 1]);
      for (int k = 0; k < K / 8; k++) {
        simdgroup_float8x8 ta, tb;
        int ia = i * (K / 8) + k, ib = k * (N / 8) + j;
        ta.thread_elements()[0] = float(a.x[2 * ia]);
        ta.thread_elements()[1] = float(a.x[2 * ia + 1]);
        tb.thread_elements()[0] = float(b.x[2 * ib]);
        tb.thread_elements()[1] = float(b.x[2 * ib + 1]);
        simdgroup_multiply_accumulate(acc, ta, tb, acc);
      }
      d.x[2 * t] = static_cast<ED>(acc.thread_elements()[0]);
      d.x[2 * t + 1] = static_cast<ED>(acc.thread_elements()[1]);
    }
}
// tf32: round to nearest (ties away), keeping 10 mantissa bits
inline float __float_to_tf32(float f) {
  uint u = as_type<uint>(f);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;
  return as_type<float>(u & 0xffffe000u);
}
}  // namespace wmma
}  // namespace nvcuda
using namespace nvcuda;
"""


def metal_wmma_support(text: str) -> str:
    """The Metal header text that defines nvcuda::wmma for `text` (a rewritten Metal header + body), or ''."""
    if not uses_wmma(text):
        return ""
    # the file's own `using namespace nvcuda::wmma;` / `namespace wmma = ...;` lines follow in the preamble
    return _METAL_HEAD + (_METAL_BFLOAT if re.search(r"\bbfloat\b", text) else "") + _METAL_TAIL
