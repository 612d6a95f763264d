"""Metal text the translator adds to a port's header when the CUDA code needs it.

* `thread attributes`: Metal gives a kernel's thread indices (thread_position_in_threadgroup, ...) to the kernel
  function only. A `__device__` helper that reads threadIdx/blockIdx/... (directly, through cooperative groups, or
  through a width-limited shuffle) gets the attributes it uses as extra trailing parameters of the same names, and
  every call passes them on (rewrite.py); the kernel's own body names them, so MLX declares them.
* `ks_shfl_*_w`: CUDA shuffles confined to sub-groups of `width` lanes, on Metal's 32-lane SIMD-groups, with
  CUDA's rules for lanes whose source is outside their sub-group (they read their own value).
* `cooperative_groups`: the part of CUDA's cooperative groups that lives inside one block (thread_block,
  thread_block_tile<N> for N <= 32, tiled_partition, sync, reduce and its operators), built from the thread
  attributes: `this_thread_block()` becomes a thread_block constructed from them.
"""
from __future__ import annotations

# Metal attribute -> its type, in the order helpers take them
THREAD_ATTRIBUTES = {
    "thread_position_in_threadgroup": "uint3",
    "threadgroup_position_in_grid": "uint3",
    "threads_per_threadgroup": "uint3",
    "threadgroups_per_grid": "uint3",
    "thread_position_in_grid": "uint3",
    "threads_per_grid": "uint3",
    "thread_index_in_threadgroup": "uint",
    "thread_index_in_simdgroup": "uint",
    "simdgroup_index_in_threadgroup": "uint",
    # not an attribute: the kernel's per-thread clock counter (Metal has no clock; time.clock), handed to helpers
    # that read the clock the same way
    "ks_clock_ticks": "thread ulong&",
}

CLOCK = """// ksearch: Metal has no clock: clock()/clock64() read a per-thread count of readings (8 ticks apart, from 100000);
// outputs derived from them are timing data, which the port check does not compare
inline long ks_clock(thread ulong& ticks) { ticks += 1ul; return long(100000ul + 8ul * ticks); }
"""

THIS_THREAD_BLOCK = ("cooperative_groups::thread_block(thread_position_in_threadgroup, threads_per_threadgroup, "
                     "threadgroup_position_in_grid)")

THIS_GRID = ("cooperative_groups::grid_group(thread_position_in_threadgroup, threads_per_threadgroup, "
             "threadgroup_position_in_grid, threadgroups_per_grid)")

SHUFFLE_WIDTH = """// ksearch: CUDA shuffles within sub-groups of `w` lanes (a source outside the caller's sub-group: own value)
template <typename T> inline T ks_shfl_w(T v, int src, int w, uint lane) {
  return simd_shuffle(v, ushort((lane / uint(w)) * uint(w) + uint((src % w + w) % w))); }
template <typename T> inline T ks_shfl_xor_w(T v, int m, int w, uint lane) {
  uint s = (lane ^ uint(m)) & 31u; return simd_shuffle(v, ushort(s / uint(w) > lane / uint(w) ? lane : s)); }
template <typename T> inline T ks_shfl_down_w(T v, uint d, int w, uint lane) {
  uint s = lane + d; return simd_shuffle(v, ushort(s / uint(w) != lane / uint(w) || s > 31u ? lane : s)); }
template <typename T> inline T ks_shfl_up_w(T v, uint d, int w, uint lane) {
  int s = int(lane) - int(d); return simd_shuffle(v, ushort(s < int((lane / uint(w)) * uint(w)) ? lane : uint(s))); }
"""

COOPERATIVE_GROUPS = """// ksearch: CUDA cooperative groups within one threadgroup, for Metal
namespace cooperative_groups {
// the scratch a block makes tiles of more than 32 threads with on a GPU; Metal's tiles need none
template <uint N, uint M = 0> struct block_tile_memory { char unused; };
struct thread_block {
  uint3 tid, dim, gid;
  thread_block(uint3 t, uint3 d, uint3 g) : tid(t), dim(d), gid(g) {}
  void sync() const { threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device); }
  uint thread_rank() const { return (tid.z * dim.y + tid.y) * dim.x + tid.x; }
  uint size() const { return dim.x * dim.y * dim.z; }
  uint num_threads() const { return size(); }
  uint3 thread_index() const { return tid; }
  uint3 group_index() const { return gid; }
  uint3 group_dim() const { return dim; }
  uint3 dim_threads() const { return dim; }
};
template <uint N> struct thread_block_tile {
  uint rank, block_size;
  thread_block_tile(uint r, uint s) : rank(r), block_size(s) {}
  uint lane() const { return rank % 32u; }
  void sync() const { if (N <= 32u) simdgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);
                      else threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device); }
  uint thread_rank() const { return rank % N; }
  uint size() const { return N; }
  uint num_threads() const { return N; }
  uint meta_group_rank() const { return rank / N; }
  uint meta_group_size() const { return (block_size + N - 1u) / N; }
  template <typename T> T shfl(T v, int src) const { return ks_shfl_w(v, src, int(N), lane()); }
  template <typename T> T shfl_xor(T v, uint m) const { return ks_shfl_xor_w(v, int(m), int(N), lane()); }
  template <typename T> T shfl_down(T v, uint d) const { return ks_shfl_down_w(v, d, int(N), lane()); }
  template <typename T> T shfl_up(T v, uint d) const { return ks_shfl_up_w(v, d, int(N), lane()); }
  uint ballot(bool p) const {
    uint b = uint(static_cast<simd_vote::vote_t>(simd_ballot(p)));
    uint mask = N >= 32u ? 0xffffffffu : ((1u << N) - 1u);
    return (b >> ((lane() / N) * N)) & mask; }
  bool any(bool p) const { return ballot(p) != 0u; }
  bool all(bool p) const { return ballot(p) == (N >= 32u ? 0xffffffffu : ((1u << N) - 1u)); }
};
// CUDA's thread_group (the base of both): a block or a tile, synced as its kind is
struct thread_group {
  uint rank, count;
  bool tile;
  thread_group(const thread_block b) : rank(b.thread_rank()), count(b.size()), tile(false) {}
  template <uint N> thread_group(const thread_block_tile<N> t) : rank(t.thread_rank()), count(N), tile(N <= 32u) {}
  void sync() const { if (tile) simdgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);
                      else threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device); }
  uint thread_rank() const { return rank; }
  uint size() const { return count; }
  uint num_threads() const { return count; }
};
inline void sync(const thread_group g) { g.sync(); }
template <uint N> inline thread_block_tile<N> tiled_partition(const thread_block b) {
  return thread_block_tile<N>(b.thread_rank(), b.size()); }
inline void sync(const thread_block b) { b.sync(); }
template <uint N> inline void sync(const thread_block_tile<N> t) { t.sync(); }
template <typename T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <typename T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <typename T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <typename T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <typename T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <typename T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };
template <uint N, typename T, typename Op> inline T reduce(const thread_block_tile<N> t, T v, Op op) {
  for (uint o = N / 2u; o > 0u; o /= 2u) v = op(v, t.shfl_xor(v, o));
  return v; }
// this_grid() read for its ranks and sizes (no sync(): Metal has no grid-wide barrier, the translator reports it)
struct grid_group {
  uint3 tid, dim, gid, ngroups;
  grid_group(uint3 t, uint3 d, uint3 g, uint3 n) : tid(t), dim(d), gid(g), ngroups(n) {}
  uint block_rank() const { return (gid.z * ngroups.y + gid.y) * ngroups.x + gid.x; }
  uint num_blocks() const { return ngroups.x * ngroups.y * ngroups.z; }
  uint thread_rank() const { return block_rank() * (dim.x * dim.y * dim.z) + (tid.z * dim.y + tid.y) * dim.x + tid.x; }
  uint size() const { return num_blocks() * dim.x * dim.y * dim.z; }
  uint num_threads() const { return size(); }
  bool is_valid() const { return true; }
  uint3 group_index() const { return gid; }
  uint3 group_dim() const { return dim; }
  uint3 dim_blocks() const { return ngroups; }
  uint3 block_index() const { return gid; }
};
// coalesced_threads(): the lanes of the SIMD-group active here (simd_ballot(true)); a lane's rank among them is
// simd_prefix_exclusive_sum over the active lanes, so no thread attribute is needed (helpers make these too)
struct coalesced_group {
  uint mask, parent, rank;
  coalesced_group() : mask(uint(static_cast<simd_vote::vote_t>(simd_ballot(true)))), parent(mask),
                      rank(simd_prefix_exclusive_sum(1u)) {}
  coalesced_group(uint m, uint p, uint r) : mask(m), parent(p), rank(r) {}
  static uint nth_lane(uint m, uint r) { for (uint i = 0u; i < r && m != 0u; i++) m &= m - 1u; return m != 0u ? ctz(m) : 0u; }
  uint lane() const { return nth_lane(mask, rank); }
  uint size() const { return popcount(mask); }
  uint num_threads() const { return size(); }
  uint thread_rank() const { return rank; }
  void sync() const { simdgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device); }
  template <typename T> T shfl(T v, int src) const { return simd_shuffle(v, ushort(nth_lane(mask, uint(src)))); }
  bool any(bool p) const { return simd_any(p); }
  bool all(bool p) const { return simd_all(p); }
};
inline coalesced_group coalesced_threads() { return coalesced_group(); }
// labeled_partition: the lanes of g holding the same label (every lane of g calls it, as CUDA requires)
template <typename L> inline coalesced_group labeled_partition(const coalesced_group g, L label) {
  uint m = 0u;
  for (uint b = g.mask; b != 0u; b &= b - 1u) {
    uint l = ctz(b);
    if (simd_shuffle(label, ushort(l)) == label) m |= 1u << l;
  }
  uint me = g.lane();
  return coalesced_group(m, g.mask, popcount(m & ((1u << me) - 1u))); }
// reduce over a coalesced group: every lane of the group it was partitioned from takes part in the shuffles
template <typename T, typename Op> inline T reduce(const coalesced_group g, T v, Op op) {
  T acc = v;
  bool first = true;
  for (uint b = g.parent; b != 0u; b &= b - 1u) {
    uint l = ctz(b);
    T x = simd_shuffle(v, ushort(l));
    if (((g.mask >> l) & 1u) != 0u) { acc = first ? x : op(acc, x); first = false; }
  }
  return acc; }
}  // namespace cooperative_groups
"""


# CUDA device code's memcpy (a struct's payload and an int4 as llm.c's Packed128; a local array into a local struct;
# a buffer's bytes into a local): Metal has no memcpy; a byte copy, one overload per pair of address spaces on Metal
# (the simulator's address spaces are all one, where the thread one stands for them all)
MEMCPY = """#if defined(__METAL_VERSION__)
#define KS_MEMCPY(DS, SS) template <class D, class S> inline void ks_memcpy(DS D* dst, const SS S* src, size_t n) { \\
  for (size_t i = 0; i < n; ++i) reinterpret_cast<DS char*>(dst)[i] = reinterpret_cast<const SS char*>(src)[i]; }
KS_MEMCPY(thread, thread) KS_MEMCPY(thread, device) KS_MEMCPY(thread, threadgroup) KS_MEMCPY(thread, constant)
KS_MEMCPY(device, thread) KS_MEMCPY(device, device) KS_MEMCPY(device, threadgroup) KS_MEMCPY(device, constant)
KS_MEMCPY(threadgroup, thread) KS_MEMCPY(threadgroup, device) KS_MEMCPY(threadgroup, threadgroup)
KS_MEMCPY(threadgroup, constant)
#undef KS_MEMCPY
#else
template <class D, class S>
inline void ks_memcpy(thread D* dst, const thread S* src, size_t n) {
  for (size_t i = 0; i < n; ++i) reinterpret_cast<thread char*>(dst)[i] = reinterpret_cast<const thread char*>(src)[i];
}
#endif
"""


# memset in device code (a local array or struct cleared): Metal has none either; a byte fill, per address space on
# Metal as ks_memcpy
MEMSET = """#if defined(__METAL_VERSION__)
#define KS_MEMSET(DS) template <class D> inline void ks_memset(DS D* dst, int v, size_t n) { \\
  for (size_t i = 0; i < n; ++i) reinterpret_cast<DS uchar*>(dst)[i] = uchar(v); }
KS_MEMSET(thread) KS_MEMSET(device) KS_MEMSET(threadgroup)
#undef KS_MEMSET
#else
template <class D>
inline void ks_memset(thread D* dst, int v, size_t n) {
  for (size_t i = 0; i < n; ++i) reinterpret_cast<thread unsigned char*>(dst)[i] = (unsigned char)v;
}
#endif
"""


ERF = """// ksearch: Metal has no erf/erfc: erfc from a Chebyshev-fitted exponential form (relative error under 1.2e-7 on
// the whole line), erf = 1 - erfc
inline float ks_erfc(float x) {
  float z = metal::fabs(x), t = 1.0f / (1.0f + 0.5f * z);
  float p = -0.82215223f + t * 0.17087277f;
  p = 1.48851587f + t * p; p = -1.13520398f + t * p; p = 0.27886807f + t * p; p = -0.18628806f + t * p;
  p = 0.09678418f + t * p; p = 0.37409196f + t * p; p = 1.00002368f + t * p; p = -1.26551223f + t * p;
  float r = t * metal::exp(-z * z + p);
  return x >= 0.0f ? r : 2.0f - r;
}
inline float ks_erf(float x) { return 1.0f - ks_erfc(x); }
"""


VOTE = """// ksearch: CUDA's counting and voting barriers (__syncthreads_count/_and/_or) for Metal: every thread adds its
// predicate to a threadgroup atomic between barriers and reads the total; the first barrier keeps the reset after
// every thread has read the previous total
inline int ks_syncthreads_count(bool p, threadgroup atomic_int* c, uint lin) {
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lin == 0) atomic_store_explicit(c, 0, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (p) atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);
  return atomic_load_explicit(c, memory_order_relaxed);
}
"""


def metal_support(text: str) -> str:
    """The support code `text` (a rewritten Metal header + body) calls, to put first in its header."""
    out = []
    if "ks_shfl_" in text or "cooperative_groups" in text:
        out.append(SHUFFLE_WIDTH)
    if "cooperative_groups" in text:
        out.append(COOPERATIVE_GROUPS)
    if "ks_clock(" in text:
        out.append(CLOCK)
    if "ks_memcpy(" in text:
        out.append(MEMCPY)
    if "ks_memset(" in text:
        out.append(MEMSET)
    if "ks_erf" in text:
        out.append(ERF)
    if "ks_syncthreads_count(" in text:
        out.append(VOTE)
    from .curand import support as curand_support, uses_curand   # cuRAND's device API (curand.py)
    if uses_curand(text):
        out.append(curand_support("metal"))
    from .wmma import metal_wmma_support   # nvcuda::wmma on simdgroup matrices (wmma.py)
    wmma = metal_wmma_support(text)
    if wmma:
        out.append(wmma)
    return "\n".join(out)
