// Precompiled-header entry for CUDA kernels: ksim.h in its CUDA dialect (see build.py).
#pragma once
#define KSIM_CUDA 1
#include "ksim.h"

// cooperative_groups spellings real code uses beyond ksim.h's core (translator work, additive)
namespace cooperative_groups {
template <class G> inline void sync(const G& g) { g.sync(); }
template <class G> inline unsigned long long thread_rank(const G& g) { return g.thread_rank(); }
template <class G> inline unsigned long long group_size(const G& g) { return g.size(); }
using thread_group = thread_block;   // a block-wide group handle (tiled_partition(block, 32) is not modelled)
struct coalesced_group : thread_block_tile<32> {};
inline coalesced_group coalesced_threads() { return coalesced_group(); }
template <unsigned N, class T = void> struct block_tile_memory {};
template <unsigned N, class T> inline thread_block this_thread_block(block_tile_memory<N, T>&) { return thread_block(); }
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };
}  // namespace cooperative_groups
// legacy (pre-CUDA 9) warp shuffles and votes: all 32 lanes
template <class T> inline T __shfl(T v, int src, int width = 32) { return __shfl_sync(0xffffffffu, v, src, width); }
template <class T> inline T __shfl_xor(T v, int m, int width = 32) { return __shfl_xor_sync(0xffffffffu, v, m, width); }
template <class T> inline T __shfl_down(T v, unsigned d, int width = 32) { return __shfl_down_sync(0xffffffffu, v, d, width); }
template <class T> inline T __shfl_up(T v, unsigned d, int width = 32) { return __shfl_up_sync(0xffffffffu, v, d, width); }
inline int __any(int p) { return __any_sync(0xffffffffu, p); }
inline int __all(int p) { return __all_sync(0xffffffffu, p); }
inline unsigned __ballot(int p) { return __ballot_sync(0xffffffffu, p); }
// `using namespace nvcuda;` in files whose other kernels use wmma (those kernels' bodies are blanked)
namespace nvcuda { namespace wmma {} }
