// ksim_wmma.h - CUDA's warp matrix API (nvcuda::wmma, <mma.h>) on the CPU simulator.
//
// Included by ksim_cuda.h (kernel files, cuda_kernel bodies) and ksim_host.h (captured programs).
//
// Model: a fragment is distributed over the 32 lanes of a warp, as on the GPU. Each lane's fragment object
// holds only that lane's elements, `x[num_elements]` with num_elements = rows * cols / 32: element e of lane l
// is the tile's element number e * 32 + l in row-major order (CUDA leaves the mapping unspecified; code that
// only does elementwise work on x[] cannot tell). So `frag.x[i]` is a plain per-lane array, as in CUDA.
//   * fill_fragment: each lane fills its own elements (no collective, as on the GPU).
//   * load_matrix_sync / store_matrix_sync: a warp collective (every lane arrives, as the lockstep of
//     ksim.h's shuffles) that also checks that all lanes pass the same pointer, ldm and layout (CUDA requires
//     it), then each lane reads or writes its own elements.
//   * mma_sync: a collective in which each lane deposits pointers to its A and B fragments; each lane then
//     computes its own elements of D reading the other lanes' A/B elements through those pointers (lanes
//     are fibers of one address space), and a second collective keeps any lane from changing its A/B
//     before all have read them. Products are summed in float (double for double, int for 8-bit integers).
// wmma needs the whole warp: a collective that fewer than 32 lanes reach (lanes that returned, a block
// whose size is not a multiple of 32, divergent branches) stops the run with the call's line.
// Shapes: 16x16x16, 32x8x16, 8x32x16 (half, __nv_bfloat16, signed/unsigned char), 16x16x8 (precision::tf32:
// the elements are floats; products use the values as stored, call __float_to_tf32 to round), 8x8x4 (double).
#pragma once

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
struct u4 {};
struct s4 {};
struct b1 {};
}  // namespace precision
namespace experimental {
namespace precision = ::nvcuda::wmma::precision;
}

namespace ksim_detail {
template <class T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };
template <class T> struct unmodelled : std::false_type {};
template <> struct unmodelled<precision::u4> : std::true_type {};
template <> struct unmodelled<precision::s4> : std::true_type {};
template <> struct unmodelled<precision::b1> : std::true_type {};
// what products are summed in
template <class T> struct acc { typedef float type; };
template <> struct acc<double> { typedef double type; };
template <> struct acc<int> { typedef long long type; };
template <> struct acc<signed char> { typedef long long type; };
template <> struct acc<unsigned char> { typedef long long type; };
template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };
constexpr bool known_shape(int m, int n, int k) {
  return (m == 16 && n == 16 && k == 16) || (m == 32 && n == 8 && k == 16) || (m == 8 && n == 32 && k == 16) ||
         (m == 16 && n == 16 && k == 8) || (m == 8 && n == 8 && k == 4);
}
}  // namespace ksim_detail

template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {
  static_assert(!ksim_detail::unmodelled<T>::value,
                "wmma sub-byte fragments (precision::u4, s4, b1) are not modelled by the CPU simulator");
  static_assert(ksim_detail::known_shape(M, N, K),
                "wmma shape not modelled: the simulator runs 16x16x16, 32x8x16, 8x32x16, 16x16x8 (tf32) and 8x8x4");

 public:
  typedef typename ksim_detail::storage<T>::type element_type;
  typedef element_type storage_element_type;
  static constexpr int rows = ksim_detail::dims<Use, M, N, K>::rows;
  static constexpr int cols = ksim_detail::dims<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols / 32;
  static constexpr int num_storage_elements = num_elements;
  element_type x[num_elements];
};

namespace ksim_detail {
// the collective every wmma call starts with; the whole warp must take part
KSIM_AI unsigned arrive(const void* val, size_t sz, const char* what, uintptr_t site) {
  unsigned slot = ksim::warp_arrive(val, sz, 0);
  unsigned part = ksim::slot_mask(slot);
  ksim::Warp& w = ksim::g.warps[ksim::cur->warp];
  if (w.nlanes != ksim::WARP || part != 0xffffffffu) {
    unsigned long off = (unsigned long)ksim::code_offset(site);
    char where[64] = "";
    if (off) snprintf(where, sizeof where, " [site=0x%lx]", off);
    ksim::fail(9,
               "wmma::%s in warp %u of block (%u,%u,%u) reached by %d of 32 lanes (lane mask 0x%08x%s): "
               "wmma operations are warp-collective; every lane of a full warp must call them together "
               "(blocks of a multiple of 32 threads, no lane returning or branching away first)%s",
               what, ksim::cur->warp, ksim::g.block.x, ksim::g.block.y, ksim::g.block.z, __builtin_popcount(part),
               part, w.nlanes != ksim::WARP ? ", the block's last warp is partial" : "", where);
  }
  return slot;
}
// load/store: the pointer, ldm and layout must be the same in every lane (CUDA requires it; lanes that disagree,
// e.g. a 2-D block whose warps span rows that pick different tiles, give undefined results on a GPU)
struct Args { const void* p; unsigned ldm; int col; };
KSIM_AI void uniform_args(const void* p, unsigned ldm, bool col, const char* what, uintptr_t site) {
  Args mine = {p, ldm, col ? 1 : 0};
  unsigned slot = arrive(&mine, sizeof mine, what, site);
  Args first = ksim::lane_val<Args>(slot, 0, mine);
  for (unsigned l = 1; l < 32; l++) {
    Args o = ksim::lane_val<Args>(slot, l, mine);
    if (o.p != first.p || o.ldm != first.ldm || o.col != first.col) {
      unsigned long off = (unsigned long)ksim::code_offset(site);
      char where[64] = "";
      if (off) snprintf(where, sizeof where, " [site=0x%lx]", off);
      long d = (long)((const char*)o.p - (const char*)first.p);
      ksim::fail(9,
                 "wmma::%s in warp %u of block (%u,%u,%u): lanes pass different arguments (lane 0: ldm %u, lane %u: "
                 "ldm %u, pointer %+ld bytes from lane 0's%s): the pointer, ldm and layout of a wmma call must be the "
                 "same for the whole warp (with a 2-D block, a warp spans threadIdx.y rows: index tiles by the warp, "
                 "not by threadIdx.y)%s",
                 what, ksim::cur->warp, ksim::g.block.x, ksim::g.block.y, ksim::g.block.z, first.ldm, l, o.ldm, d,
                 o.col != first.col ? ", another layout" : "", where);
    }
  }
}
template <class F> inline int elem_row(int e) { return (e * 32 + (int)ksim::cur->lane) / F::cols; }
template <class F> inline int elem_col(int e) { return (e * 32 + (int)ksim::cur->lane) % F::cols; }

template <class F, class U> inline void load(F& f, const U* p, unsigned ldm, bool col, uintptr_t site) {
  uniform_args(p, ldm, col, "load_matrix_sync", site);
  typedef typename F::element_type E;
  for (int e = 0; e < F::num_elements; e++) {
    size_t r = (size_t)elem_row<F>(e), c = (size_t)elem_col<F>(e);
    f.x[e] = static_cast<E>(col ? p[r + c * ldm] : p[r * ldm + c]);
  }
}
template <class F, class U> inline void store(U* p, const F& f, unsigned ldm, bool col, uintptr_t site) {
  uniform_args(p, ldm, col, "store_matrix_sync", site);
  for (int e = 0; e < F::num_elements; e++) {
    size_t r = (size_t)elem_row<F>(e), c = (size_t)elem_col<F>(e);
    (col ? p[r + c * ldm] : p[r * ldm + c]) = static_cast<U>(f.x[e]);
  }
}
}  // namespace ksim_detail

template <class Use, int M, int N, int K, class T, class L, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
  typedef typename fragment<Use, M, N, K, T, L>::element_type E;
  for (int e = 0; e < fragment<Use, M, N, K, T, L>::num_elements; e++) f.x[e] = static_cast<E>(v);
}

// matrix_a / matrix_b: the layout is the fragment's
template <class Use, int M, int N, int K, class T, class L, class U>
KSIM_AI void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const U* p, unsigned ldm) {
  static_assert(!std::is_same<Use, accumulator>::value,
                "load_matrix_sync of an accumulator takes the memory layout: (frag, ptr, ldm, wmma::mem_row_major)");
  static_assert(!std::is_same<L, void>::value, "a matrix_a/matrix_b fragment needs a layout (row_major or col_major)");
  ksim_detail::load(f, p, ldm, std::is_same<L, col_major>::value, KSIM_SITE);
}
// accumulator: the layout is an argument
template <class Use, int M, int N, int K, class T, class L, class U>
KSIM_AI void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const U* p, unsigned ldm, layout_t layout) {
  ksim_detail::load(f, p, ldm, layout == mem_col_major, KSIM_SITE);
}
template <int M, int N, int K, class T, class U>
KSIM_AI void store_matrix_sync(U* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  ksim_detail::store(p, f, ldm, layout == mem_col_major, KSIM_SITE);
}

namespace ksim_detail {
template <class FD, class FA, class FB, class FC>
inline void mma(FD& d, const FA& a, const FB& b, const FC& c, bool satf, uintptr_t site) {
  struct Ptrs { const FA* a; const FB* b; };
  Ptrs mine = {&a, &b};
  unsigned slot = arrive(&mine, sizeof mine, "mma_sync", site);
  const FA* as[32];
  const FB* bs[32];
  for (unsigned l = 0; l < 32; l++) {
    Ptrs p = ksim::lane_val<Ptrs>(slot, l, mine);
    as[l] = p.a;
    bs[l] = p.b;
  }
  constexpr int K = FA::cols, N = FB::cols;
  typedef typename acc<typename FA::element_type>::type S;
  typename FD::element_type out[FD::num_elements];
  for (int e = 0; e < FD::num_elements; e++) {
    int r = elem_row<FD>(e), col = elem_col<FD>(e);
    S s = static_cast<S>(c.x[e]);
    for (int k = 0; k < K; k++) {
      int ai = r * K + k, bi = k * N + col;
      s += static_cast<S>(as[ai % 32]->x[ai / 32]) * static_cast<S>(bs[bi % 32]->x[bi / 32]);
    }
    if (satf && std::is_floating_point<S>::value) {   // saturate to finite values of the accumulator type
      double lim = std::is_same<typename FD::element_type, float>::value ? (double)FLT_MAX
                   : std::is_same<typename FD::element_type, double>::value ? DBL_MAX : 65504.0;
      double v = (double)s;
      s = static_cast<S>(v != v ? 0.0 : v > lim ? lim : v < -lim ? -lim : v);
    }
    out[e] = static_cast<typename FD::element_type>(s);
  }
  ksim::warp_sync();  // every lane has read the A/B elements before any lane goes on and changes its own
  for (int e = 0; e < FD::num_elements; e++) d.x[e] = out[e];
}
}  // namespace ksim_detail

template <int M, int N, int K, class TD, class TA, class LA, class TB, class LB, class TC>
KSIM_AI void mma_sync(fragment<accumulator, M, N, K, TD>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                      const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
                      bool satf = false) {
  ksim_detail::mma(d, a, b, c, satf, KSIM_SITE);
}

// tf32: round to nearest, ties away from zero, keeping 10 mantissa bits (cvt.rna.tf32.f32)
inline float __float_to_tf32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;
  u &= 0xffffe000u;
  memcpy(&f, &u, 4);
  return f;
}
}  // namespace wmma
}  // namespace nvcuda
