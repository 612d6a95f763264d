// Precompiled-header entry for CUDA kernels: ksim.h in its CUDA dialect (see build.py).
#pragma once
#define KSIM_CUDA 1
#include "ksim.h"

// cooperative_groups spellings real code uses beyond ksim.h's core (translator work, additive)
namespace cooperative_groups {
template <class G> inline void sync(const G& g) { g.sync(); }
template <class G> inline unsigned long long thread_rank(const G& g) { return g.thread_rank(); }
template <class G> inline unsigned long long group_size(const G& g) { return g.size(); }
// a group handle of either kind (CUDA's thread_group base): a block or a tile of it, synced as its kind is
struct thread_group {
  unsigned long long sz, rk;
  bool tile;
  thread_group(const thread_block& b) : sz(b.size()), rk(b.thread_rank()), tile(false) {}
  template <unsigned N> thread_group(const thread_block_tile<N>& t) : sz(t.size()), rk(t.thread_rank()), tile(true) {}
  unsigned long long size() const { return sz; }
  unsigned long long num_threads() const { return sz; }
  unsigned long long thread_rank() const { return rk; }
  void sync() const { if (tile) ksim::warp_sync(); else thread_block().sync(); }
};
// coalesced groups: the lanes that reach coalesced_threads() together (the same model as ksim_host.h's, which the
// capture runs: a ballot waits for the warp's other lanes to arrive or leave)
struct coalesced_group {
  unsigned mask;
  unsigned parent;  // the lanes that made the group together (labeled_partition splits them; all of them call)
  coalesced_group() : mask(ksim::warp_ballot(true)), parent(mask) {}
  coalesced_group(unsigned m, unsigned p) : mask(m), parent(p) {}
  unsigned long long size() const { return (unsigned long long)__builtin_popcount(mask); }
  unsigned long long num_threads() const { return size(); }
  unsigned long long thread_rank() const { return (unsigned long long)__builtin_popcount(mask & ((1u << ksim::cur->lane) - 1)); }
  void sync() const { ksim::warp_sync(); }
  template <class T> T shfl(T v, int rank) const {
    unsigned m = mask;
    for (int r = 0; r < rank && m; r++) m &= m - 1;
    return __shfl_sync(mask, v, m ? __builtin_ctz(m) : 0);
  }
  unsigned ballot(int p) const { return __ballot_sync(mask, p); }
  int any(int p) const { return __any_sync(mask, p); }
  int all(int p) const { return __all_sync(mask, p); }
};
inline coalesced_group coalesced_threads() { return coalesced_group(); }
template <class L> inline coalesced_group labeled_partition(const coalesced_group& g, L label) {
  unsigned m = 0;
  for (unsigned b = g.mask; b; b &= b - 1) {
    int l = __builtin_ctz(b);
    if (__shfl_sync(g.mask, label, l) == label) m |= 1u << l;
  }
  return coalesced_group(m, g.mask);
}
template <unsigned N, class L> inline coalesced_group labeled_partition(const thread_block_tile<N>&, L label) {
  return labeled_partition(coalesced_group(), label);
}
template <class T, class Op> inline T reduce(const coalesced_group& g, T v, Op op) {
  T acc{};
  bool first = true;
  for (unsigned b = g.parent; b; b &= b - 1) {
    int l = __builtin_ctz(b);
    T x = __shfl_sync(g.parent, v, l);
    if ((g.mask >> l) & 1u) { acc = first ? x : op(acc, x); first = false; }
  }
  return acc;
}
template <unsigned N, class T = void> struct block_tile_memory {};
template <unsigned N, class T> inline thread_block this_thread_block(block_tile_memory<N, T>&) { return thread_block(); }
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };
}  // namespace cooperative_groups
#include "ksim_wmma.h"  // nvcuda::wmma (tensor-core fragments), warp-collective on the fibers
#ifndef KSIM_HOST
// Texture references and objects (kernel files run without their program): declared so that a file's other
// kernels compile; a kernel that reads one stops with a message naming the call (the translator does not port
// it: Metal textures are a different API).
typedef unsigned long long cudaTextureObject_t;
typedef unsigned long long cudaSurfaceObject_t;
typedef unsigned long long CUtexObject;
typedef unsigned long long CUsurfObject;
enum cudaTextureReadMode { cudaReadModeElementType = 0, cudaReadModeNormalizedFloat = 1 };
enum cudaTextureFilterMode { cudaFilterModePoint = 0, cudaFilterModeLinear = 1 };
enum cudaTextureAddressMode { cudaAddressModeWrap = 0, cudaAddressModeClamp = 1, cudaAddressModeMirror = 2,
                              cudaAddressModeBorder = 3 };
template <class T, int dim = 1, cudaTextureReadMode mode = cudaReadModeElementType> struct texture {
  int normalized; cudaTextureFilterMode filterMode; cudaTextureAddressMode addressMode[3];
};
template <class T = void, int dim = 1> struct surface {};
// host-side handle types that file-scope structs of kernel files hold (IPC samples): declared, never used here
struct cudaIpcMemHandle_t { char reserved[64]; };
struct cudaIpcEventHandle_t { char reserved[64]; };
namespace ksim {
[[noreturn]] inline void tex_in_kernel(const char* what) {
  fail(9, "%s read in a kernel run without its program: no texture is bound here; a texture kernel's port is "
          "checked on the launches captured from the program that binds its textures (run its main())", what);
}
}  // namespace ksim
#define KSIM_TEX_FN(name) \
  template <class T, class... A> inline T name(cudaTextureObject_t, A...) { ksim::tex_in_kernel(#name); } \
  template <class T, int D, cudaTextureReadMode M, class... A> inline T name(texture<T, D, M>, A...) { ksim::tex_in_kernel(#name); }
KSIM_TEX_FN(tex1Dfetch) KSIM_TEX_FN(tex1D) KSIM_TEX_FN(tex2D) KSIM_TEX_FN(tex3D) KSIM_TEX_FN(tex1DLayered)
KSIM_TEX_FN(tex2DLayered) KSIM_TEX_FN(texCubemap) KSIM_TEX_FN(texCubemapLayered)
#undef KSIM_TEX_FN
template <class T, class S, class... A> inline void surf1Dwrite(T, S, A...) { ksim::tex_in_kernel("surf1Dwrite"); }
template <class T, class S, class... A> inline void surf2Dwrite(T, S, A...) { ksim::tex_in_kernel("surf2Dwrite"); }
template <class T, class S, class... A> inline void surf3Dwrite(T, S, A...) { ksim::tex_in_kernel("surf3Dwrite"); }
template <class T, class S, class... A> inline void surf2Dread(T*, S, A...) { ksim::tex_in_kernel("surf2Dread"); }
// the other surface calls (a kernel file's surface kernels compile beside the one that runs; a surface given to a
// kernel-only run goes through the host runtime's entry, ksim_tex.h)
#define KSIM_SURF_FN(name) \
  template <class T, class S, class... A> inline void name(T*, S, A...) { ksim::tex_in_kernel(#name); } \
  template <class T, class... A> inline T name(A...) { ksim::tex_in_kernel(#name); }
KSIM_SURF_FN(surf1Dread) KSIM_SURF_FN(surf3Dread) KSIM_SURF_FN(surf1DLayeredread) KSIM_SURF_FN(surf2DLayeredread)
#undef KSIM_SURF_FN
template <class T, class... A> inline T surf2Dread(A...) { ksim::tex_in_kernel("surf2Dread"); }
template <class T, class S, class... A> inline void surf1DLayeredwrite(T, S, A...) { ksim::tex_in_kernel("surf1DLayeredwrite"); }
template <class T, class S, class... A> inline void surf2DLayeredwrite(T, S, A...) { ksim::tex_in_kernel("surf2DLayeredwrite"); }
#endif
// the CUDA version a kernel file sees (as in ksim_host.h): `#if CUDART_VERSION < 3000` blocks are old-CUDA code
#ifndef CUDART_VERSION
#define CUDART_VERSION 12040
#endif
#ifndef __CUDACC_VER_MAJOR__
#define __CUDACC_VER_MAJOR__ 12
#define __CUDACC_VER_MINOR__ 4
#endif
