// ksim_tex.h - textures in the CPU CUDA runtime (included once, at the end of ksim_host.h).
//
// Host side: CUDA arrays (cudaMallocArray / cudaMalloc3DArray, copies into them), texture references bound to
// linear memory, pitched memory or arrays (cudaBindTexture / cudaBindTexture2D / cudaBindTextureToArray) and
// texture objects (cudaCreateTextureObject from a resource and a texture descriptor).
// Device side: tex1Dfetch / tex1D / tex2D / tex3D / tex1DLayered / tex2DLayered / texCubemap with point and
// linear filtering, wrap / clamp / mirror / border addressing, normalized coordinates, element and
// normalized-float read modes.
// Capture: the first fetch from a texture in a launch writes what the kernel reads from it — every texel,
// converted to the fetch's return type, densely (x fastest, then y, then z / layer / face) — to an .npy file
// of the capture folder, and one line to textures.jsonl ({"launch", "key": "ref:<name>" | "obj:<handle>",
// geometry, addressing}). The port reads that texture as an ordinary input buffer with the same index
// arithmetic (ksearch_engine/translate/textures.py: keep the two in step).
// Surfaces stop the capture (KSIM_GPU_ONLY), naming the call and its line.
#pragma once
#include <cmath>
#include <type_traits>

#undef cudaCreateTextureObject
#undef cudaDestroyTextureObject
#undef cudaBindTexture
#undef cudaBindTexture2D
#undef cudaBindTextureToArray
#undef cudaUnbindTexture
#undef cudaMallocArray
#undef cudaMalloc3DArray
#undef cudaMemcpyToArray
#undef cudaMemcpy2DToArray
#undef cudaMemcpy3D
#undef cudaFreeArray

struct cudaArray {
  char* data;
  cudaChannelFormatDesc desc;
  size_t w, h, d;  // elements; h, d >= 1
  size_t elem;     // bytes per element
  unsigned flags;
};
#ifndef cudaArrayLayered
#define cudaArrayDefault 0x00
#define cudaArrayLayered 0x01
#define cudaArraySurfaceLoadStore 0x02
#define cudaArrayCubemap 0x04
#define cudaArrayTextureGather 0x08
#endif

namespace ksim_tex {

inline size_t elem_bytes(const cudaChannelFormatDesc& c) {
  size_t b = (size_t)(c.x + c.y + c.z + c.w) / 8;
  return b ? b : 1;
}

struct Tex {
  const char* base = nullptr;
  size_t w = 0, h = 1, d = 1;  // elements; d: depth, layers or faces
  size_t pitch = 0;            // bytes per row
  size_t elem = 4;
  cudaChannelFormatDesc ch{32, 0, 0, 0, cudaChannelFormatKindFloat};
  int dims = 1;                // 1, 2 or 3 (a layered / cubemap texture: its sample dimensions)
  bool layered = false, cubemap = false, linear_mem = false;
  int addr[3] = {1, 1, 1};     // cudaTextureAddressMode, after the rules of unnormalized coordinates
  bool linear = false, normalized = false, norm_read = false;
  long long dumped = -1;       // the launch whose contents were written
  bool bound = false;
};

inline std::vector<Tex>& objects() { static std::vector<Tex> v; return v; }
inline std::map<const void*, Tex>& refs() { static std::map<const void*, Tex> m; return m; }

inline void finish(Tex& t, const int addr[3], int filter, int normalized, int read) {
  t.normalized = normalized != 0;
  t.linear = filter == cudaFilterModeLinear;
  t.norm_read = read == cudaReadModeNormalizedFloat;
  for (int i = 0; i < 3; i++) {
    int a = addr[i];
    // wrap and mirror need normalized coordinates; CUDA clamps otherwise
    if (!t.normalized && (a == cudaAddressModeWrap || a == cudaAddressModeMirror)) a = cudaAddressModeClamp;
    t.addr[i] = a;
  }
  if (t.cubemap) {   // face coordinates are normalized, clamped (no seamless filtering)
    t.addr[0] = t.addr[1] = t.addr[2] = cudaAddressModeClamp;
    t.normalized = true;
  }
  if (t.linear_mem) t.addr[0] = cudaAddressModeBorder;  // tex1Dfetch out of range reads zero
  t.bound = true;
}

inline Tex from_array(cudaArray_const_t a) {
  Tex t;
  t.base = a->data;
  t.w = a->w; t.h = a->h; t.d = a->d;
  t.elem = a->elem;
  t.pitch = a->w * a->elem;
  t.ch = a->desc;
  t.layered = (a->flags & cudaArrayLayered) != 0;
  t.cubemap = (a->flags & cudaArrayCubemap) != 0;
  t.dims = a->d > 1 && !t.layered && !t.cubemap ? 3 : (a->h > 1 || t.layered || t.cubemap ? 2 : 1);
  if (t.layered && a->h <= 1 && a->d > 1) t.dims = 1;
  return t;
}

// ---- reading one texel, converted to the fetch's return type -----------------------------------------
template <class R> struct parts { using C = R; static constexpr int n = 1; };
template <class T, int N> struct parts<ksim::vec<T, N>> { using C = T; static constexpr int n = N; };

inline double channel(const Tex& t, const char* p, int k) {
  int bits = k == 0 ? t.ch.x : k == 1 ? t.ch.y : k == 2 ? t.ch.z : t.ch.w;
  int off = 0;
  for (int i = 0; i < k; i++) off += (i == 0 ? t.ch.x : i == 1 ? t.ch.y : i == 2 ? t.ch.z : t.ch.w) / 8;
  p += off;
  bool sgn = t.ch.f == cudaChannelFormatKindSigned;
  if (t.ch.f == cudaChannelFormatKindFloat) {
    if (bits == 16) return (double)(float)*(const __half*)p;
    return bits == 64 ? *(const double*)p : (double)*(const float*)p;
  }
  long long v = bits == 8 ? (sgn ? (long long)*(const int8_t*)p : (long long)*(const uint8_t*)p)
              : bits == 16 ? (sgn ? (long long)*(const int16_t*)p : (long long)*(const uint16_t*)p)
              : (sgn ? (long long)*(const int32_t*)p : (long long)*(const uint32_t*)p);
  if (!t.norm_read) return (double)v;
  double m = sgn ? (double)((1ll << (bits - 1)) - 1) : (double)((1ll << bits) - 1);
  double r = (double)v / m;
  return r < -1.0 ? -1.0 : r;
}

template <class R> inline R texel(const Tex& t, long x, long y, long z) {
  R r{};
  if (x < 0 || y < 0 || z < 0) return r;  // border: zero
  const char* p = t.base + ((size_t)z * t.h + (size_t)y) * t.pitch + (size_t)x * t.elem;
  using C = typename parts<R>::C;
  if (!t.norm_read && sizeof(R) == t.elem) {
    memcpy(&r, p, sizeof(R));
    return r;
  }
  C* c = (C*)&r;
  int nch = (t.ch.x > 0) + (t.ch.y > 0) + (t.ch.z > 0) + (t.ch.w > 0);
  for (int k = 0; k < parts<R>::n && k < nch; k++) c[k] = (C)channel(t, p, k);
  return r;
}

// index arithmetic of one coordinate (the same as the port's: translate/textures.py)
inline long addr_index(long i, long n, int mode) {
  if (mode == cudaAddressModeWrap) return ((i % n) + n) % n;
  if (mode == cudaAddressModeMirror) { long k = ((i % (2 * n)) + 2 * n) % (2 * n); return k < n ? k : 2 * n - 1 - k; }
  if (mode == cudaAddressModeBorder) return i < 0 || i >= n ? -1 : i;
  return i < 0 ? 0 : (i >= n ? n - 1 : i);
}
inline float frac8(float a) { return floorf(a * 256.0f + 0.5f) * (1.0f / 256.0f); }  // 8 fractional bits

template <class R> inline R sample(const Tex& t, int nd, float x, float y, float z, long layer) {
  float c[3] = {x, y, z};
  long n[3] = {(long)t.w, (long)t.h, (long)t.d};
  long i0[3] = {0, 0, 0}, i1[3] = {0, 0, 0};
  float a[3] = {0, 0, 0};
  for (int k = 0; k < nd; k++) {
    float X = t.normalized ? c[k] * (float)n[k] : c[k];
    if (t.linear) {
      float xb = X - 0.5f;
      float f = floorf(xb);
      a[k] = frac8(xb - f);
      i0[k] = addr_index((long)f, n[k], t.addr[k]);
      i1[k] = addr_index((long)f + 1, n[k], t.addr[k]);
    } else {
      i0[k] = addr_index((long)floorf(X), n[k], t.addr[k]);
    }
  }
  if (t.layered || t.cubemap) {   // the layer (cube face) is z: layered arrays are width x height x layers
    i0[2] = i1[2] = layer < 0 || layer >= n[2] ? -1 : layer;
  }
  if (!t.linear) return texel<R>(t, i0[0], i0[1], i0[2]);
  using C = typename parts<R>::C;
  constexpr int N = parts<R>::n;
  R r{};
  C* out = (C*)&r;
  int corners = 1 << nd;
  float acc[4] = {0, 0, 0, 0};
  for (int q = 0; q < corners; q++) {
    float wgt = 1.0f;
    long ix[3] = {i0[0], i0[1], i0[2]};
    for (int k = 0; k < nd; k++) {
      bool hi = (q >> k) & 1;
      wgt *= hi ? a[k] : 1.0f - a[k];
      if (hi) ix[k] = i1[k];
    }
    R v = texel<R>(t, ix[0], ix[1], ix[2]);
    for (int k = 0; k < N; k++) acc[k] += wgt * (float)((C*)&v)[k];
  }
  for (int k = 0; k < N; k++) out[k] = (C)acc[k];
  return r;
}

// cubemap: the face of the direction's major axis, then (s, t) in [0, 1] on it
inline void cube_face(float x, float y, float z, long& face, float& u, float& v) {
  float ax = fabsf(x), ay = fabsf(y), az = fabsf(z), m, s, tt;
  if (ax >= ay && ax >= az) { m = ax; face = x >= 0 ? 0 : 1; s = x >= 0 ? -z : z; tt = -y; }
  else if (ay >= az) { m = ay; face = y >= 0 ? 2 : 3; s = x; tt = y >= 0 ? z : -z; }
  else { m = az; face = z >= 0 ? 4 : 5; s = z >= 0 ? x : -x; tt = -y; }
  u = (s / m + 1.0f) * 0.5f;
  v = (tt / m + 1.0f) * 0.5f;
}

// ---- the capture: what a launch's kernel read from each texture -------------------------------------
inline std::map<std::string, int>& dumps_of() { static std::map<std::string, int> m; return m; }
template <class R> inline void dump_slow(Tex& t, const std::string& key);
template <class R, class K> inline void dump(Tex& t, K key) {
#ifdef KSIM_KERNEL_ONLY   // a kernel run without its program: no capture to write to
  return;
#endif
  long long launch = ksim_host::st().launches - 1;
  if (t.dumped == launch) return;   // the cheap test every fetch makes
  t.dumped = launch;
  dump_slow<R>(t, key());
}
template <class R> inline void dump_slow(Tex& t, const std::string& key) {
  ksim_host::State& S = ksim_host::st();
  long long launch = S.launches - 1;
  if (S.dir.empty()) return;
  // the capture records a few launches per kernel: as many textures per kernel, and no more
  if (++dumps_of()[S.kernel_name + "|" + key] > 2 * S.max_per_kernel + 2) return;
  using C = typename parts<R>::C;
  size_t count = t.w * t.h * t.d;
  size_t nbytes = count * sizeof(R);
  if ((long long)nbytes > S.byte_budget - S.bytes_used) return;   // the port check says the texture is missing
  std::vector<R> dense(count);
  for (size_t z = 0; z < t.d; z++)
    for (size_t y = 0; y < t.h; y++)
      for (size_t x = 0; x < t.w; x++) dense[(z * t.h + y) * t.w + x] = texel<R>(t, (long)x, (long)y, (long)z);
  std::string safe;
  for (char c : key) safe += isalnum((unsigned char)c) ? c : '_';
  std::string f = "l" + std::to_string(launch) + "_tex_" + safe + ".npy";
  ksim_host::write_npy(f, ksim_host::dtype_of<C>::descr, sizeof(C), dense.data(), nbytes);
  S.bytes_used += (long long)nbytes;
  char line[1024];
  snprintf(line, sizeof line,
           "{\"launch\":%lld,\"key\":%s,\"file\":\"%s\",\"dtype\":\"%s\",\"comps\":%d,\"w\":%zu,\"h\":%zu,\"d\":%zu,"
           "\"dims\":%d,\"layered\":%d,\"cubemap\":%d,\"addr\":[%d,%d,%d],\"linear\":%d,\"normalized\":%d}\n",
           launch, ksim_host::jstr(key).c_str(), f.c_str(), ksim_host::dtype_of<C>::name ? ksim_host::dtype_of<C>::name : "uint8",
           parts<R>::n, t.w, t.h, t.d, t.dims, (int)t.layered, (int)t.cubemap, t.addr[0], t.addr[1], t.addr[2],
           (int)t.linear, (int)t.normalized);
  FILE* o = fopen((S.dir + "/textures.jsonl").c_str(), "a");
  if (o) { fputs(line, o); fclose(o); }
}

inline Tex& object(cudaTextureObject_t h, const char* what) {
  if (h == 0 || h > objects().size() || !objects()[h - 1].bound)
    ksim::fail(9, "%s: texture object %llu was never created (cudaCreateTextureObject) or was destroyed", what, h);
  return objects()[h - 1];
}
template <class T, int D, cudaTextureReadMode M> inline Tex& ref(const texture<T, D, M>& r, const char* name, const char* what) {
  auto it = refs().find((const void*)&r);
  if (it == refs().end() || !it->second.bound)
    ksim::fail(9, "%s: texture reference '%s' is not bound (cudaBindTexture*)", what, name);
  // the reference's own fields, as the program set them before binding
  return it->second;
}
template <class R> inline R obj_read(cudaTextureObject_t h, const char* what, int nd, float x, float y, float z, long layer) {
  Tex& t = object(h, what);
  dump<R>(t, [h] { return "obj:" + std::to_string(h); });
  return sample<R>(t, nd, x, y, z, layer);
}
template <class R, class T, int D, cudaTextureReadMode M>
inline R ref_read(const texture<T, D, M>& r, const char* name, const char* what, int nd, float x, float y, float z) {
  Tex& t = ref(r, name, what);
  dump<R>(t, [name] { return std::string("ref:") + name; });
  return sample<R>(t, nd, x, y, z, 0);
}
template <class T, cudaTextureReadMode M> struct read_t { using type = T; };
template <> struct read_t<unsigned char, cudaReadModeNormalizedFloat> { using type = float; };
template <> struct read_t<signed char, cudaReadModeNormalizedFloat> { using type = float; };
template <> struct read_t<char, cudaReadModeNormalizedFloat> { using type = float; };
template <> struct read_t<unsigned short, cudaReadModeNormalizedFloat> { using type = float; };
template <> struct read_t<short, cudaReadModeNormalizedFloat> { using type = float; };
template <class C, int N> struct read_t<ksim::vec<C, N>, cudaReadModeNormalizedFloat> {
  using type = typename std::conditional<std::is_floating_point<C>::value, ksim::vec<C, N>, ksim::vec<float, N>>::type;
};

}  // namespace ksim_tex

// channel descriptors of CUDA's own types (the generic one above knows sizes only)
#define KSIM_CHDESC(T, b, n, k) \
  template <> inline cudaChannelFormatDesc cudaCreateChannelDesc<T>() { \
    return {b, n > 1 ? b : 0, n > 2 ? b : 0, n > 3 ? b : 0, k}; }
KSIM_CHDESC(char, 8, 1, cudaChannelFormatKindSigned) KSIM_CHDESC(signed char, 8, 1, cudaChannelFormatKindSigned)
KSIM_CHDESC(unsigned char, 8, 1, cudaChannelFormatKindUnsigned)
KSIM_CHDESC(uchar2, 8, 2, cudaChannelFormatKindUnsigned) KSIM_CHDESC(uchar4, 8, 4, cudaChannelFormatKindUnsigned)
KSIM_CHDESC(char2, 8, 2, cudaChannelFormatKindSigned)
KSIM_CHDESC(char4, 8, 4, cudaChannelFormatKindSigned)
KSIM_CHDESC(short, 16, 1, cudaChannelFormatKindSigned) KSIM_CHDESC(unsigned short, 16, 1, cudaChannelFormatKindUnsigned)
KSIM_CHDESC(short2, 16, 2, cudaChannelFormatKindSigned) KSIM_CHDESC(short4, 16, 4, cudaChannelFormatKindSigned)
KSIM_CHDESC(ushort2, 16, 2, cudaChannelFormatKindUnsigned) KSIM_CHDESC(ushort4, 16, 4, cudaChannelFormatKindUnsigned)
KSIM_CHDESC(int, 32, 1, cudaChannelFormatKindSigned) KSIM_CHDESC(unsigned, 32, 1, cudaChannelFormatKindUnsigned)
KSIM_CHDESC(int2, 32, 2, cudaChannelFormatKindSigned) KSIM_CHDESC(int4, 32, 4, cudaChannelFormatKindSigned)
KSIM_CHDESC(uint2, 32, 2, cudaChannelFormatKindUnsigned) KSIM_CHDESC(uint4, 32, 4, cudaChannelFormatKindUnsigned)
KSIM_CHDESC(float, 32, 1, cudaChannelFormatKindFloat)
KSIM_CHDESC(float2, 32, 2, cudaChannelFormatKindFloat) KSIM_CHDESC(float4, 32, 4, cudaChannelFormatKindFloat)
#undef KSIM_CHDESC

// ---- host API -------------------------------------------------------------------------------------------
inline cudaError_t cudaMallocArray(cudaArray_t* a, const cudaChannelFormatDesc* desc, size_t w, size_t h = 0, unsigned flags = 0) {
  size_t e = ksim_tex::elem_bytes(*desc);
  size_t hh = h ? h : 1;
  *a = new cudaArray{(char*)calloc(w * hh + 1, e), *desc, w, hh, 1, e, flags};
  return cudaSuccess;
}
inline cudaError_t cudaMalloc3DArray(cudaArray_t* a, const cudaChannelFormatDesc* desc, cudaExtent ext, unsigned flags = 0) {
  size_t e = ksim_tex::elem_bytes(*desc);
  size_t h = ext.height ? ext.height : 1, d = ext.depth ? ext.depth : 1;
  *a = new cudaArray{(char*)calloc(ext.width * h * d + 1, e), *desc, ext.width, h, d, e, flags};
  return cudaSuccess;
}
inline cudaError_t cudaFreeArray(cudaArray_t a) {
  if (a) { free(a->data); delete a; }
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch,
                                       size_t width, size_t height, cudaMemcpyKind = cudaMemcpyDefault) {
  size_t row = dst->w * dst->elem;
  for (size_t y = 0; y < height; y++)
    memcpy(dst->data + (hOffset + y) * row + wOffset, (const char*)src + y * spitch, width);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                                     cudaMemcpyKind = cudaMemcpyDefault) {
  memcpy(dst->data + hOffset * dst->w * dst->elem + wOffset, src, count);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DFromArray(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                         size_t width, size_t height, cudaMemcpyKind = cudaMemcpyDefault) {
  size_t row = src->w * src->elem;
  for (size_t y = 0; y < height; y++)
    memcpy((char*)dst + y * dpitch, src->data + (hOffset + y) * row + wOffset, width);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) {
  // arrays: extent in elements; pitched memory: width in bytes
  size_t eb = p->dstArray ? p->dstArray->elem : p->srcArray ? p->srcArray->elem : 1;
  size_t wbytes = (p->dstArray || p->srcArray) ? p->extent.width * eb : p->extent.width;
  size_t h = p->extent.height ? p->extent.height : 1, d = p->extent.depth ? p->extent.depth : 1;
  for (size_t z = 0; z < d; z++)
    for (size_t y = 0; y < h; y++) {
      const char* s;
      char* t;
      if (p->srcArray) {
        const cudaArray* a = p->srcArray;
        s = a->data + (((p->srcPos.z + z) * a->h + p->srcPos.y + y) * a->w) * a->elem + p->srcPos.x * a->elem;
      } else {
        s = (const char*)p->srcPtr.ptr + ((p->srcPos.z + z) * p->srcPtr.ysize + p->srcPos.y + y) * p->srcPtr.pitch + p->srcPos.x;
      }
      if (p->dstArray) {
        cudaArray* a = p->dstArray;
        t = a->data + (((p->dstPos.z + z) * a->h + p->dstPos.y + y) * a->w) * a->elem + p->dstPos.x * a->elem;
      } else {
        t = (char*)p->dstPtr.ptr + ((p->dstPos.z + z) * p->dstPtr.ysize + p->dstPos.y + y) * p->dstPtr.pitch + p->dstPos.x;
      }
      memmove(t, s, wbytes);
    }
  return cudaSuccess;
}
#undef cudaMemcpy3DAsync
inline cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t = 0) { return cudaMemcpy3D(p); }

inline cudaError_t cudaCreateTextureObject(cudaTextureObject_t* out, const cudaResourceDesc* r, const cudaTextureDesc* td,
                                           const void* = nullptr) {
  ksim_tex::Tex t;
  if (r->resType == cudaResourceTypeArray) {
    t = ksim_tex::from_array(r->res.array.array);
  } else if (r->resType == cudaResourceTypeLinear) {
    t.ch = r->res.linear.desc;
    t.elem = ksim_tex::elem_bytes(t.ch);
    t.base = (const char*)r->res.linear.devPtr;
    t.w = r->res.linear.sizeInBytes / t.elem;
    t.pitch = r->res.linear.sizeInBytes;
    t.linear_mem = true;
  } else if (r->resType == cudaResourceTypePitch2D) {
    t.ch = r->res.pitch2D.desc;
    t.elem = ksim_tex::elem_bytes(t.ch);
    t.base = (const char*)r->res.pitch2D.devPtr;
    t.w = r->res.pitch2D.width;
    t.h = r->res.pitch2D.height;
    t.pitch = r->res.pitch2D.pitchInBytes;
    t.dims = 2;
  } else {
    ksim_host::gpu_only("mipmapped texture objects (cudaCreateTextureObject of a cudaResourceTypeMipmappedArray)", __FILE__, __LINE__);
  }
  int addr[3] = {td->addressMode[0], td->addressMode[1], td->addressMode[2]};
  ksim_tex::finish(t, addr, td->filterMode, td->normalizedCoords, td->readMode);
  ksim_tex::objects().push_back(t);
  *out = (cudaTextureObject_t)ksim_tex::objects().size();
  return cudaSuccess;
}
inline cudaError_t cudaDestroyTextureObject(cudaTextureObject_t h) {
  if (h && h <= ksim_tex::objects().size()) ksim_tex::objects()[h - 1].bound = false;
  return cudaSuccess;
}
inline cudaError_t cudaGetTextureObjectResourceDesc(cudaResourceDesc*, cudaTextureObject_t) { return cudaSuccess; }

namespace ksim_tex {
template <class T, int D, cudaTextureReadMode M>
inline cudaError_t bind(const texture<T, D, M>& r, Tex t) {
  int addr[3] = {r.addressMode[0], r.addressMode[1], r.addressMode[2]};
  finish(t, addr, r.filterMode, r.normalized, M);
  refs()[(const void*)&r] = t;
  return cudaSuccess;
}
}  // namespace ksim_tex

template <class T, int D, cudaTextureReadMode M>
inline cudaError_t cudaBindTexture(size_t* offset, const texture<T, D, M>& r, const void* p, const cudaChannelFormatDesc& desc,
                                   size_t size = ~(size_t)0) {
  if (offset) *offset = 0;
  ksim_tex::Tex t;
  t.ch = desc;
  t.elem = sizeof(T);
  t.base = (const char*)p;
  if (size == ~(size_t)0) {
    const ksim_host::Alloc* a = ksim_host::find_alloc(p);
    size = a ? a->n - ((const char*)p - a->ptr) : 0;
  }
  t.w = size / t.elem;
  t.pitch = size;
  t.linear_mem = true;
  return ksim_tex::bind(r, t);
}
template <class T, int D, cudaTextureReadMode M>
inline cudaError_t cudaBindTexture(size_t* offset, const texture<T, D, M>& r, const void* p, size_t size = ~(size_t)0) {
  cudaChannelFormatDesc desc = r.channelDesc.x ? r.channelDesc : cudaCreateChannelDesc<T>();
  return cudaBindTexture(offset, r, p, desc, size);
}
template <class T, int D, cudaTextureReadMode M>   // the C API's form: a pointer to the reference
inline cudaError_t cudaBindTexture(size_t* offset, const texture<T, D, M>* r, const void* p, const cudaChannelFormatDesc* desc,
                                   size_t size = ~(size_t)0) {
  return cudaBindTexture(offset, *r, p, *desc, size);
}
template <class T, int D, cudaTextureReadMode M>
inline cudaError_t cudaBindTexture2D(size_t* offset, const texture<T, D, M>& r, const void* p, const cudaChannelFormatDesc& desc,
                                     size_t w, size_t h, size_t pitch) {
  if (offset) *offset = 0;
  ksim_tex::Tex t;
  t.ch = desc;
  t.elem = sizeof(T);
  t.base = (const char*)p;
  t.w = w; t.h = h; t.pitch = pitch; t.dims = 2;
  return ksim_tex::bind(r, t);
}
template <class T, int D, cudaTextureReadMode M>
inline cudaError_t cudaBindTexture2D(size_t* offset, const texture<T, D, M>& r, const void* p, size_t w, size_t h, size_t pitch) {
  return cudaBindTexture2D(offset, r, p, cudaCreateChannelDesc<T>(), w, h, pitch);
}
template <class T, int D, cudaTextureReadMode M>
inline cudaError_t cudaBindTexture2D(size_t* offset, const texture<T, D, M>* r, const void* p, const cudaChannelFormatDesc* desc,
                                     size_t w, size_t h, size_t pitch) {
  return cudaBindTexture2D(offset, *r, p, *desc, w, h, pitch);
}
template <class T, int D, cudaTextureReadMode M>
inline cudaError_t cudaBindTextureToArray(const texture<T, D, M>& r, cudaArray_const_t a, const cudaChannelFormatDesc& = {}) {
  return ksim_tex::bind(r, ksim_tex::from_array(a));
}
template <class T, int D, cudaTextureReadMode M>
inline cudaError_t cudaBindTextureToArray(const texture<T, D, M>* r, cudaArray_const_t a, const cudaChannelFormatDesc* = nullptr) {
  return ksim_tex::bind(*r, ksim_tex::from_array(a));
}
template <class T, int D, cudaTextureReadMode M>
inline cudaError_t cudaUnbindTexture(const texture<T, D, M>& r) {
  ksim_tex::refs().erase((const void*)&r);
  return cudaSuccess;
}
template <class T, int D, cudaTextureReadMode M>
inline cudaError_t cudaUnbindTexture(const texture<T, D, M>* r) { return cudaUnbindTexture(*r); }

// ---- device API: texture objects (more specialized than ksim_host.h's stubs, so these are chosen) ---------
template <class T, class I> inline T tex1Dfetch(cudaTextureObject_t h, I i) {
  ksim_tex::Tex& t = ksim_tex::object(h, "tex1Dfetch");
  ksim_tex::dump<T>(t, [h] { return "obj:" + std::to_string(h); });
  return ksim_tex::texel<T>(t, ksim_tex::addr_index((long)i, (long)t.w, cudaAddressModeBorder), 0, 0);
}
template <class T, class X> inline T tex1D(cudaTextureObject_t h, X x) { return ksim_tex::obj_read<T>(h, "tex1D", 1, (float)x, 0, 0, 0); }
template <class T, class X, class Y> inline T tex2D(cudaTextureObject_t h, X x, Y y) {
  return ksim_tex::obj_read<T>(h, "tex2D", 2, (float)x, (float)y, 0, 0);
}
template <class T, class X, class Y, class Z> inline T tex3D(cudaTextureObject_t h, X x, Y y, Z z) {
  return ksim_tex::obj_read<T>(h, "tex3D", 3, (float)x, (float)y, (float)z, 0);
}
template <class T, class X, class L> inline T tex1DLayered(cudaTextureObject_t h, X x, L layer) {
  return ksim_tex::obj_read<T>(h, "tex1DLayered", 1, (float)x, 0, 0, (long)layer);
}
template <class T, class X, class Y, class L> inline T tex2DLayered(cudaTextureObject_t h, X x, Y y, L layer) {
  return ksim_tex::obj_read<T>(h, "tex2DLayered", 2, (float)x, (float)y, 0, (long)layer);
}
template <class T, class X, class Y, class Z> inline T texCubemap(cudaTextureObject_t h, X x, Y y, Z z) {
  long face; float u, v;
  ksim_tex::cube_face((float)x, (float)y, (float)z, face, u, v);
  return ksim_tex::obj_read<T>(h, "texCubemap", 2, u, v, 0, face);
}
// texture references: the macros keep the reference's name (the capture names the port's input after it)
namespace ksim_tex {
template <class T, int D, cudaTextureReadMode M, class I>
inline typename read_t<T, M>::type ref_fetch(const texture<T, D, M>& r, const char* name, I i) {
  using R = typename read_t<T, M>::type;
  Tex& t = ref(r, name, "tex1Dfetch");
  dump<R>(t, [name] { return std::string("ref:") + name; });
  return texel<R>(t, addr_index((long)i, (long)t.w, cudaAddressModeBorder), 0, 0);
}
template <class T, int D, cudaTextureReadMode M, class... A>
inline typename read_t<T, M>::type ref_tex(const texture<T, D, M>& r, const char* name, const char* what, A... a) {
  float c[3] = {0, 0, 0};
  int k = 0;
  ((c[k++] = (float)a), ...);
  return ref_read<typename read_t<T, M>::type>(r, name, what, (int)sizeof...(A), c[0], c[1], c[2]);
}
}  // namespace ksim_tex
#define tex1Dfetch(r, ...) ksim_tex::ref_fetch(r, #r, __VA_ARGS__)
#define tex1D(r, ...) ksim_tex::ref_tex(r, #r, "tex1D", __VA_ARGS__)
#define tex2D(r, ...) ksim_tex::ref_tex(r, #r, "tex2D", __VA_ARGS__)
#define tex3D(r, ...) ksim_tex::ref_tex(r, #r, "tex3D", __VA_ARGS__)

// ---- surfaces: surface objects and references over CUDA arrays ------------------------------------------
// Host side: cudaCreateSurfaceObject over a cudaArray (cudaMallocArray / cudaMalloc3DArray, layered arrays
// included), cudaBindSurfaceToArray for a `surface<void, dim>` reference. Device side: surf1D/2D/3D and
// surf1DLayered/2DLayered read and write, with CUDA's byte-addressed x (surf2Dwrite(v, s, x * sizeof(v), y))
// and boundary modes (cudaBoundaryModeTrap, the default, stops the kernel as a fault; Zero ignores a write and
// reads zero; Clamp clamps each coordinate into the array). Cubemap surfaces stay GPU-only.
// Capture: the first access to a surface in a launch writes the whole array (one channel's dtype, x fastest,
// then y, then z / layer) before the launch, and the launch's end writes it after; one line in textures.jsonl
// ({"launch", "key": "surf:<handle>" | "sref:<name>", "surface": 1, "file": before, "after", geometry}). The port
// takes the array as a buffer (translate/textures.py: surface_args).
#undef cudaCreateSurfaceObject
#undef cudaDestroySurfaceObject
#undef cudaBindSurfaceToArray
#ifndef cudaSurfaceType1D
#define cudaSurfaceType1D 0x01
#define cudaSurfaceType2D 0x02
#define cudaSurfaceType3D 0x03
#define cudaSurfaceTypeCubemap 0x0C
#define cudaSurfaceType1DLayered 0xF1
#define cudaSurfaceType2DLayered 0xF2
#define cudaSurfaceTypeCubemapLayered 0xFC
#endif
template <class T = void, int dim = 1> struct surface { cudaChannelFormatDesc channelDesc; };

namespace ksim_surf {
struct Surf {
  cudaArray* a = nullptr;
  bool bound = false;
  long long touched = -1;   // the launch that accessed it last
};
inline std::vector<Surf>& objects() { static std::vector<Surf> v; return v; }
inline std::map<const void*, Surf>& refs() { static std::map<const void*, Surf> m; return m; }
struct Touched { cudaArray* a; std::string key, before; };
inline std::vector<Touched>& touched() { static std::vector<Touched> v; return v; }

inline const char* descr_of(const cudaChannelFormatDesc& c, size_t& item) {
  int b = c.x;
  bool same = (c.y == 0 || c.y == b) && (c.z == 0 || c.z == b) && (c.w == 0 || c.w == b);
  item = 1;
  if (!same || b % 8) return "|u1";
  item = (size_t)b / 8;
  if (c.f == cudaChannelFormatKindFloat) return b == 16 ? "<f2" : b == 64 ? "<f8" : "<f4";
  bool s = c.f == cudaChannelFormatKindSigned;
  return b == 8 ? (s ? "|i1" : "|u1") : b == 16 ? (s ? "<i2" : "<u2") : b == 64 ? (s ? "<i8" : "<u8") : (s ? "<i4" : "<u4");
}
inline int comps_of(const cudaChannelFormatDesc& c) { return (c.x > 0) + (c.y > 0) + (c.z > 0) + (c.w > 0); }

inline void end_launch(long long launch) {
  ksim_host::State& S = ksim_host::st();
  for (auto& t : touched()) {
    cudaArray* a = t.a;
    size_t nbytes = a->w * a->h * a->d * a->elem, item;
    const char* descr = descr_of(a->desc, item);
    std::string safe;
    for (char c : t.key) safe += isalnum((unsigned char)c) ? c : '_';
    std::string f = "l" + std::to_string(launch) + "_surf_" + safe + "_after.npy";
    if ((long long)nbytes > S.byte_budget - S.bytes_used) continue;   // the check says the surface is missing
    ksim_host::write_npy(f, descr, item, a->data, nbytes);
    S.bytes_used += (long long)nbytes;
    char line[1024];
    snprintf(line, sizeof line,
             "{\"launch\":%lld,\"key\":%s,\"surface\":1,\"file\":\"%s\",\"after\":\"%s\",\"descr\":\"%s\",\"comps\":%d,"
             "\"elem\":%zu,\"w\":%zu,\"h\":%zu,\"d\":%zu,\"layered\":%d}\n",
             launch, ksim_host::jstr(t.key).c_str(), t.before.c_str(), f.c_str(), descr, comps_of(a->desc), a->elem,
             a->w, a->h, a->d, (int)((a->flags & cudaArrayLayered) != 0));
    FILE* o = fopen((S.dir + "/textures.jsonl").c_str(), "a");
    if (o) { fputs(line, o); fclose(o); }
  }
  touched().clear();
}

// the first access of a launch: the array's contents before it
template <class K> inline void touch(Surf& s, K key) {
#ifdef KSIM_KERNEL_ONLY   // a kernel run without its program: no capture to write to
  return;
#endif
  ksim_host::State& S = ksim_host::st();
  long long launch = S.launches - 1;
  if (s.touched == launch) return;
  s.touched = launch;
  if (S.dir.empty()) return;
  std::string k = key();
  if (++ksim_tex::dumps_of()[S.kernel_name + "|" + k] > 2 * S.max_per_kernel + 2) return;
  cudaArray* a = s.a;
  size_t nbytes = a->w * a->h * a->d * a->elem, item;
  if (2 * (long long)nbytes > S.byte_budget - S.bytes_used) return;
  const char* descr = descr_of(a->desc, item);
  std::string safe;
  for (char c : k) safe += isalnum((unsigned char)c) ? c : '_';
  std::string f = "l" + std::to_string(launch) + "_surf_" + safe + "_before.npy";
  ksim_host::write_npy(f, descr, item, a->data, nbytes);
  S.bytes_used += (long long)nbytes;
  touched().push_back({a, k, f});
  ksim_host::launch_end_hook() = &end_launch;
}

inline Surf& object(cudaSurfaceObject_t h, const char* what) {
  if (h == 0 || h > objects().size() || !objects()[h - 1].bound)
    ksim::fail(9, "%s: surface object %llu was never created (cudaCreateSurfaceObject) or was destroyed", what, h);
  return objects()[h - 1];
}
template <class S> inline Surf& find(const S& s, const char* name, const char* what) {
  if constexpr (std::is_integral<S>::value) {
    Surf& r = object((cudaSurfaceObject_t)s, what);
    touch(r, [s] { return "surf:" + std::to_string((unsigned long long)s); });
    return r;
  } else {
    auto it = refs().find((const void*)&s);
    if (it == refs().end() || !it->second.bound)
      ksim::fail(9, "%s: surface reference '%s' is not bound (cudaBindSurfaceToArray)", what, name);
    touch(it->second, [name] { return std::string("sref:") + name; });
    return it->second;
  }
}

// the byte address of an access of `n` bytes at (byte x, y, z), after the boundary mode; nullptr: out of range
// under cudaBoundaryModeZero
inline char* address(cudaArray* a, const char* what, const char* name, size_t n, long c[4], int ncoord, bool layered,
                     int mode) {
  long xb = c[0], y = 0, z = 0;
  int nd = ncoord - (layered ? 1 : 0);
  if (nd >= 2) y = c[1];
  if (nd >= 3) z = c[2];
  if (layered) {
    if (nd == 1) { y = 0; z = c[1]; } else z = c[2];
  }
  long wb = (long)(a->w * a->elem), H = (long)a->h, D = (long)a->d;
  bool out = xb < 0 || xb + (long)n > wb || y < 0 || y >= H || z < 0 || z >= D;
  if (out) {
    if (mode == cudaBoundaryModeTrap)
      ksim::fail(4, "%s out of range on surface '%s': byte x %ld (an access of %zu bytes; the row has %ld bytes), "
                    "y %ld, z/layer %ld of a %zu x %zu x %zu array (cudaBoundaryModeTrap: the kernel fails)",
                 what, name, xb, n, wb, y, z, a->w, a->h, a->d);
    if (mode == cudaBoundaryModeZero) return nullptr;
    xb = xb < 0 ? 0 : (xb + (long)n > wb ? wb - (long)n : xb);
    y = y < 0 ? 0 : (y >= H ? H - 1 : y);
    z = z < 0 ? 0 : (z >= D ? D - 1 : z);
  }
  return a->data + ((size_t)z * a->h + (size_t)y) * (size_t)wb + (size_t)xb;
}

template <class T, class S, class... A>
inline void write_(T v, const S& s, const char* name, const char* what, int ncoord, bool layered, A... args) {
  long c[5] = {0, 0, 0, 0, 0};
  int k = 0;
  ((c[k++] = (long)args), ...);
  int mode = k > ncoord ? (int)c[ncoord] : cudaBoundaryModeTrap;
  Surf& sf = find(s, name, what);
  char* p = address(sf.a, what, name, sizeof(T), c, ncoord, layered, mode);
  if (p) memcpy(p, &v, sizeof(T));
}
template <class T, class S, class... A>
inline T read_(const S& s, const char* name, const char* what, int ncoord, bool layered, A... args) {
  long c[5] = {0, 0, 0, 0, 0};
  int k = 0;
  ((c[k++] = (long)args), ...);
  int mode = k > ncoord ? (int)c[ncoord] : cudaBoundaryModeTrap;
  Surf& sf = find(s, name, what);
  T r{};
  const char* p = address(sf.a, what, name, sizeof(T), c, ncoord, layered, mode);
  if (p) memcpy(&r, p, sizeof(T));
  return r;
}
template <class T, class S, class... A>
inline void read_to(T* out, const S& s, const char* name, const char* what, int ncoord, bool layered, A... args) {
  *out = read_<T>(s, name, what, ncoord, layered, args...);
}
}  // namespace ksim_surf

inline cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* out, const cudaResourceDesc* r) {
  if (r->resType != cudaResourceTypeArray)
    ksim::fail(9, "cudaCreateSurfaceObject: the resource must be a CUDA array (cudaResourceTypeArray)");
  if (r->res.array.array->flags & cudaArrayCubemap)
    ksim_host::gpu_only("cubemap surfaces (cudaCreateSurfaceObject of a cubemap array)", __FILE__, __LINE__);
  ksim_surf::Surf s;
  s.a = r->res.array.array;
  s.bound = true;
  ksim_surf::objects().push_back(s);
  *out = (cudaSurfaceObject_t)ksim_surf::objects().size();
  return cudaSuccess;
}
inline cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t h) {
  if (h && h <= ksim_surf::objects().size()) ksim_surf::objects()[h - 1].bound = false;
  return cudaSuccess;
}
template <class T, int D>
inline cudaError_t cudaBindSurfaceToArray(const surface<T, D>& r, cudaArray_const_t a, const cudaChannelFormatDesc& = {}) {
  ksim_surf::Surf s;
  s.a = const_cast<cudaArray*>(a);
  s.bound = true;
  ksim_surf::refs()[(const void*)&r] = s;
  return cudaSuccess;
}
template <class T, int D>
inline cudaError_t cudaBindSurfaceToArray(const surface<T, D>* r, cudaArray_const_t a, const cudaChannelFormatDesc* = nullptr) {
  return cudaBindSurfaceToArray(*r, a);
}
// surfNDread<T>(object, ...) (the form that returns the value; declared before the macros below)
#define KSIM_SURF_READ(fn, n, lay) \
  template <class T, class... A> inline T fn(cudaSurfaceObject_t s, A... a) { return ksim_surf::read_<T>(s, "(object)", #fn, n, lay, a...); }
KSIM_SURF_READ(surf1Dread, 1, false) KSIM_SURF_READ(surf2Dread, 2, false) KSIM_SURF_READ(surf3Dread, 3, false)
KSIM_SURF_READ(surf1DLayeredread, 2, true) KSIM_SURF_READ(surf2DLayeredread, 3, true)
#undef KSIM_SURF_READ
// the surface's name goes with each call (the capture names the port's input after a reference)
#define surf1Dwrite(v, s, ...) ksim_surf::write_(v, s, #s, "surf1Dwrite", 1, false, __VA_ARGS__)
#define surf2Dwrite(v, s, ...) ksim_surf::write_(v, s, #s, "surf2Dwrite", 2, false, __VA_ARGS__)
#define surf3Dwrite(v, s, ...) ksim_surf::write_(v, s, #s, "surf3Dwrite", 3, false, __VA_ARGS__)
#define surf1DLayeredwrite(v, s, ...) ksim_surf::write_(v, s, #s, "surf1DLayeredwrite", 2, true, __VA_ARGS__)
#define surf2DLayeredwrite(v, s, ...) ksim_surf::write_(v, s, #s, "surf2DLayeredwrite", 3, true, __VA_ARGS__)
#define surf1Dread(p, s, ...) ksim_surf::read_to(p, s, #s, "surf1Dread", 1, false, __VA_ARGS__)
#define surf2Dread(p, s, ...) ksim_surf::read_to(p, s, #s, "surf2Dread", 2, false, __VA_ARGS__)
#define surf3Dread(p, s, ...) ksim_surf::read_to(p, s, #s, "surf3Dread", 3, false, __VA_ARGS__)
#define surf1DLayeredread(p, s, ...) ksim_surf::read_to(p, s, #s, "surf1DLayeredread", 2, true, __VA_ARGS__)
#define surf2DLayeredread(p, s, ...) ksim_surf::read_to(p, s, #s, "surf2DLayeredread", 3, true, __VA_ARGS__)
