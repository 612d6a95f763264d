"""Stand-in headers for a captured CUDA program: CUDA's own headers and the libraries it may include.

``include_dir()`` writes them once into the simulator's cache (keyed by their text) and returns the folder,
which capture.py puts first on g++'s include path. CUDA's runtime headers are empty (ksim_host.h, included at
the top of every translation unit, is the runtime); cuBLAS, cuRAND and cuFFT get small stand-ins (GEMMs and
FFTs computed on the host, the rest noted as ``CaptureNote(kind="stubbed")``); the driver API and NVRTC run the
kernels compiled into the capture (ksim_driver.h, host_driver.py); MPI and NCCL run one rank (their
collectives copy send to receive; a call that needs another rank stops the program by name); headers of things
the CPU cannot do (Thrust, CUB, OpenGL, cuDNN...) are not here: ``UNSUPPORTED`` names them and host_source.py turns their ``#include`` into a
compile-time ``#error`` that capture.py reports as a note.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from .build import cache_dir, unique_suffix
from . import host_helpers, host_thrust
from . import cub as _cub

_EMPTY = [
    "cuda_runtime.h", "cuda_runtime_api.h", "device_launch_parameters.h", "cuda_fp16.h", "cuda_fp16.hpp",
    "cuda_bf16.h", "cuda_bf16.hpp", "cooperative_groups.h", "cooperative_groups/reduce.h",
    "cooperative_groups/scan.h", "cooperative_groups/memcpy_async.h", "cuda_profiler_api.h",
    "device_functions.h", "vector_types.h", "vector_functions.h", "vector_functions.hpp", "driver_types.h",
    "builtin_types.h", "host_defines.h", "device_types.h", "channel_descriptor.h", "cuda_texture_types.h",
    "texture_fetch_functions.h", "texture_types.h", "surface_types.h", "surface_functions.h",
    "device_atomic_functions.h", "sm_20_atomic_functions.h", "sm_30_intrinsics.h", "sm_32_intrinsics.h",
    "sm_35_intrinsics.h", "sm_60_atomic_functions.h", "sm_61_intrinsics.h", "crt/host_defines.h",
    "cuda_device_runtime_api.h", "common_functions.h", "math_functions.h", "cuda_occupancy.h",
    "driver_functions.h", "library_types.h",
    "mma.h",   # nvcuda::wmma: ksim_wmma.h, included by ksim_host.h
    "cuda/pipeline", "cuda/barrier",   # libcu++ async copies: ksim_host.h's cuda::pipeline, cuda::barrier
    "cuda/atomic", "cuda/std/atomic",   # libcu++ atomics: ksim.h's cuda::atomic, cuda::atomic_ref, memory orders
]

_MATH_CONSTANTS = """#pragma once
#ifndef CUDART_INF_F
#define CUDART_INF_F (__builtin_inff())
#endif
#ifndef CUDART_NAN_F
#define CUDART_NAN_F (__builtin_nanf(""))
#endif
#ifndef CUDART_PI_F
#define CUDART_PI_F 3.141592654f
#endif
#define CUDART_INF (__builtin_inf())
#define CUDART_NAN (__builtin_nan(""))
#define CUDART_PI 3.1415926535897931e+0
#define CUDART_PIO2_F 1.570796327f
#define CUDART_2_OVER_PI_F 0.636619772f
#define CUDART_SQRT_HALF_F 0.707106781f
#define CUDART_SQRT_2PI 2.5066282746310002e+0
#define CUDART_SQRT_2PI_F 2.506628275f
#define CUDART_LN2_F 0.693147181f
#define CUDART_L2E_F 1.442695041f
#define CUDART_ONE_F 1.0f
#define CUDART_ZERO_F 0.0f
#define CUDART_MAX_NORMAL_F 3.4028234663852886e+38f
#define CUDART_MIN_DENORM_F 1.40129846e-45f
"""

# the CUDA driver API and NVRTC (ksim_driver.h: calls resolved to the kernels compiled into the capture)
_CUDA_H = (Path(__file__).with_name("ksim_driver.h")).read_text()

_NVTX = """#pragma once
#define nvtxRangePushA(...) 0
#define nvtxRangePush(...) 0
#define nvtxRangePop() 0
#define nvtxMarkA(...) ((void)0)
#define nvtxRangeStartA(...) 0
#define nvtxRangeEnd(...) ((void)0)
#define nvtxNameOsThreadA(...) ((void)0)
"""

_CUBLAS = """#pragma once
#define CUBLAS_API_H_ 1
#define CUBLAS_V2_H_ 1
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_FILL_MODE_LOWER = 0, CUBLAS_FILL_MODE_UPPER = 1 } cublasFillMode_t;
typedef enum { CUBLAS_DIAG_NON_UNIT = 0, CUBLAS_DIAG_UNIT = 1 } cublasDiagType_t;
typedef enum { CUBLAS_SIDE_LEFT = 0, CUBLAS_SIDE_RIGHT = 1 } cublasSideMode_t;
typedef enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 } cublasPointerMode_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;
typedef enum { CUDA_R_16F = 2, CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16BF = 14, CUDA_R_8I = 3, CUDA_R_32I = 10 } cudaDataType;
typedef cudaDataType cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70 } cublasComputeType_t;
struct cublasContext { int dummy; };
typedef cublasContext* cublasHandle_t;
inline cublasStatus_t cublasCreate_v2(cublasHandle_t* h) { static cublasContext c; *h = &c; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasDestroy_v2(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
#define cublasCreate cublasCreate_v2
#define cublasDestroy cublasDestroy_v2
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetPointerMode(cublasHandle_t, cublasPointerMode_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasGetVersion(cublasHandle_t, int* v) { *v = 120400; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetVector(int n, int es, const void* x, int incx, void* y, int incy) {
  for (int i = 0; i < n; i++) memcpy((char*)y + (size_t)i * incy * es, (const char*)x + (size_t)i * incx * es, es);
  return CUBLAS_STATUS_SUCCESS;
}
#define cublasGetVector cublasSetVector
inline cublasStatus_t cublasSetMatrix(int rows, int cols, int es, const void* a, int lda, void* b, int ldb) {
  for (int c = 0; c < cols; c++) memcpy((char*)b + (size_t)c * ldb * es, (const char*)a + (size_t)c * lda * es, (size_t)rows * es);
  return CUBLAS_STATUS_SUCCESS;
}
#define cublasGetMatrix cublasSetMatrix
namespace ksim_host {
// column-major C = alpha op(A) op(B) + beta C, as cuBLAS computes it (on the host, in double)
template <class T> inline cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const T* alpha, const T* A, int lda, const T* B, int ldb, const T* beta, T* C, int ldc, const char* file, int line) {
  note("stubbed", "a cuBLAS GEMM was computed on the host (not recorded as a launch)", file, line);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int p = 0; p < k; p++) {
        double a = ta == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
        double b = tb == CUBLAS_OP_N ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
        s += a * b;
      }
      T& c = C[i + (size_t)j * ldc];
      c = (T)((double)*alpha * s + ((double)*beta == 0.0 ? 0.0 : (double)*beta * (double)c));
    }
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace ksim_host
#define cublasSgemm(h, ...) ksim_host::gemm<float>(__VA_ARGS__, __FILE__, __LINE__)
#define cublasDgemm(h, ...) ksim_host::gemm<double>(__VA_ARGS__, __FILE__, __LINE__)
#define cublasSgemm_v2 cublasSgemm
#define cublasDgemm_v2 cublasDgemm
#define KSIM_CUBLAS_STUB(name) (ksim_host::stub(name, __FILE__, __LINE__), CUBLAS_STATUS_SUCCESS)
#define cublasHgemm(...) KSIM_CUBLAS_STUB("cublasHgemm")
#define cublasGemmEx(...) KSIM_CUBLAS_STUB("cublasGemmEx")
#define cublasSgemmBatched(...) KSIM_CUBLAS_STUB("cublasSgemmBatched")
namespace ksim_host {
template <class T> inline cublasStatus_t gemm_strided(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const T* alpha, const T* A, int lda, long long sa, const T* B, int ldb, long long sb, const T* beta, T* C, int ldc,
    long long sc, int batches, const char* file, int line) {
  for (int b = 0; b < batches; b++)
    gemm<T>(ta, tb, m, n, k, alpha, A + b * sa, lda, B + b * sb, ldb, beta, C + b * sc, ldc, file, line);
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace ksim_host
#define cublasSgemmStridedBatched(h, ...) ksim_host::gemm_strided<float>(__VA_ARGS__, __FILE__, __LINE__)
#define cublasDgemmStridedBatched(h, ...) ksim_host::gemm_strided<double>(__VA_ARGS__, __FILE__, __LINE__)
#define cublasGemmStridedBatchedEx(...) KSIM_CUBLAS_STUB("cublasGemmStridedBatchedEx")
namespace ksim_host {
// cuBLAS's level-1 and level-2 routines and geam, computed on the host as cuBLAS defines them (column-major,
// strides incx/incy, results through the pointer: host and device memory are one address space here)
inline void blas_note(const char* what, const char* file, int line) {
  note("stubbed", (std::string(what) + " was computed on the host (not recorded as a launch)").c_str(), file, line);
}
template <class T> inline cublasStatus_t axpy(const char* nm, int n, const T* a, const T* x, int incx, T* y, int incy, const char* f, int l) {
  blas_note(nm, f, l);
  for (int i = 0; i < n; i++) y[(size_t)i * incy] = (T)((double)*a * x[(size_t)i * incx] + y[(size_t)i * incy]);
  return CUBLAS_STATUS_SUCCESS;
}
template <class T> inline cublasStatus_t scal(const char* nm, int n, const T* a, T* x, int incx, const char* f, int l) {
  blas_note(nm, f, l);
  for (int i = 0; i < n; i++) x[(size_t)i * incx] = (T)((double)*a * x[(size_t)i * incx]);
  return CUBLAS_STATUS_SUCCESS;
}
template <class T> inline cublasStatus_t copy(const char* nm, int n, const T* x, int incx, T* y, int incy, const char* f, int l) {
  blas_note(nm, f, l);
  for (int i = 0; i < n; i++) y[(size_t)i * incy] = x[(size_t)i * incx];
  return CUBLAS_STATUS_SUCCESS;
}
template <class T> inline cublasStatus_t dot(const char* nm, int n, const T* x, int incx, const T* y, int incy, T* r, const char* f, int l) {
  blas_note(nm, f, l);
  double s = 0;
  for (int i = 0; i < n; i++) s += (double)x[(size_t)i * incx] * y[(size_t)i * incy];
  *r = (T)s;
  return CUBLAS_STATUS_SUCCESS;
}
template <class T> inline cublasStatus_t nrm2(const char* nm, int n, const T* x, int incx, T* r, const char* f, int l) {
  blas_note(nm, f, l);
  double s = 0;
  for (int i = 0; i < n; i++) s += (double)x[(size_t)i * incx] * x[(size_t)i * incx];
  *r = (T)sqrt(s);
  return CUBLAS_STATUS_SUCCESS;
}
template <class T> inline cublasStatus_t asum(const char* nm, int n, const T* x, int incx, T* r, const char* f, int l) {
  blas_note(nm, f, l);
  double s = 0;
  for (int i = 0; i < n; i++) s += fabs((double)x[(size_t)i * incx]);
  *r = (T)s;
  return CUBLAS_STATUS_SUCCESS;
}
template <class T> inline cublasStatus_t iamax(const char* nm, int n, const T* x, int incx, int* r, const char* f, int l) {
  blas_note(nm, f, l);
  int best = 0;
  for (int i = 1; i < n; i++)
    if (fabs((double)x[(size_t)i * incx]) > fabs((double)x[(size_t)best * incx])) best = i;
  *r = n > 0 ? best + 1 : 0;   // 1-based, as BLAS
  return CUBLAS_STATUS_SUCCESS;
}
template <class T> inline cublasStatus_t gemv(const char* nm, cublasOperation_t t, int m, int n, const T* a, const T* A, int lda,
    const T* x, int incx, const T* b, T* y, int incy, const char* f, int l) {
  blas_note(nm, f, l);
  int rows = t == CUBLAS_OP_N ? m : n, cols = t == CUBLAS_OP_N ? n : m;
  for (int i = 0; i < rows; i++) {
    double s = 0;
    for (int j = 0; j < cols; j++)
      s += (double)(t == CUBLAS_OP_N ? A[i + (size_t)j * lda] : A[j + (size_t)i * lda]) * x[(size_t)j * incx];
    T& yi = y[(size_t)i * incy];
    yi = (T)((double)*a * s + ((double)*b == 0.0 ? 0.0 : (double)*b * (double)yi));
  }
  return CUBLAS_STATUS_SUCCESS;
}
template <class T> inline cublasStatus_t geam(const char* nm, cublasOperation_t ta, cublasOperation_t tb, int m, int n, const T* a,
    const T* A, int lda, const T* b, const T* B, int ldb, T* C, int ldc, const char* f, int l) {
  blas_note(nm, f, l);
  std::vector<T> out((size_t)m * n);   // C may alias A or B
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double va = (double)*a == 0.0 ? 0.0 : (double)(ta == CUBLAS_OP_N ? A[i + (size_t)j * lda] : A[j + (size_t)i * lda]);
      double vb = (double)*b == 0.0 ? 0.0 : (double)(tb == CUBLAS_OP_N ? B[i + (size_t)j * ldb] : B[j + (size_t)i * ldb]);
      out[i + (size_t)j * m] = (T)((double)*a * va + (double)*b * vb);
    }
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) C[i + (size_t)j * ldc] = out[i + (size_t)j * m];
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace ksim_host
#define cublasSaxpy(h, ...) ksim_host::axpy<float>("cublasSaxpy", __VA_ARGS__, __FILE__, __LINE__)
#define cublasSaxpy_v2 cublasSaxpy
#define cublasSscal(h, ...) ksim_host::scal<float>("cublasSscal", __VA_ARGS__, __FILE__, __LINE__)
#define cublasSscal_v2 cublasSscal
#define cublasScopy(h, ...) ksim_host::copy<float>("cublasScopy", __VA_ARGS__, __FILE__, __LINE__)
#define cublasScopy_v2 cublasScopy
#define cublasSdot(h, ...) ksim_host::dot<float>("cublasSdot", __VA_ARGS__, __FILE__, __LINE__)
#define cublasSdot_v2 cublasSdot
#define cublasSnrm2(h, ...) ksim_host::nrm2<float>("cublasSnrm2", __VA_ARGS__, __FILE__, __LINE__)
#define cublasSnrm2_v2 cublasSnrm2
#define cublasSasum(h, ...) ksim_host::asum<float>("cublasSasum", __VA_ARGS__, __FILE__, __LINE__)
#define cublasSasum_v2 cublasSasum
#define cublasIsamax(h, ...) ksim_host::iamax<float>("cublasIsamax", __VA_ARGS__, __FILE__, __LINE__)
#define cublasIsamax_v2 cublasIsamax
#define cublasSgemv(h, ...) ksim_host::gemv<float>("cublasSgemv", __VA_ARGS__, __FILE__, __LINE__)
#define cublasSgemv_v2 cublasSgemv
#define cublasSgeam(h, ...) ksim_host::geam<float>("cublasSgeam", __VA_ARGS__, __FILE__, __LINE__)
#define cublasSgeam_v2 cublasSgeam
#define cublasDaxpy(h, ...) ksim_host::axpy<double>("cublasDaxpy", __VA_ARGS__, __FILE__, __LINE__)
#define cublasDaxpy_v2 cublasDaxpy
#define cublasDscal(h, ...) ksim_host::scal<double>("cublasDscal", __VA_ARGS__, __FILE__, __LINE__)
#define cublasDscal_v2 cublasDscal
#define cublasDcopy(h, ...) ksim_host::copy<double>("cublasDcopy", __VA_ARGS__, __FILE__, __LINE__)
#define cublasDcopy_v2 cublasDcopy
#define cublasDdot(h, ...) ksim_host::dot<double>("cublasDdot", __VA_ARGS__, __FILE__, __LINE__)
#define cublasDdot_v2 cublasDdot
#define cublasDnrm2(h, ...) ksim_host::nrm2<double>("cublasDnrm2", __VA_ARGS__, __FILE__, __LINE__)
#define cublasDnrm2_v2 cublasDnrm2
#define cublasDasum(h, ...) ksim_host::asum<double>("cublasDasum", __VA_ARGS__, __FILE__, __LINE__)
#define cublasDasum_v2 cublasDasum
#define cublasIdamax(h, ...) ksim_host::iamax<double>("cublasIdamax", __VA_ARGS__, __FILE__, __LINE__)
#define cublasIdamax_v2 cublasIdamax
#define cublasDgemv(h, ...) ksim_host::gemv<double>("cublasDgemv", __VA_ARGS__, __FILE__, __LINE__)
#define cublasDgemv_v2 cublasDgemv
#define cublasDgeam(h, ...) ksim_host::geam<double>("cublasDgeam", __VA_ARGS__, __FILE__, __LINE__)
#define cublasDgeam_v2 cublasDgeam
"""

_CURAND = """#pragma once
#define CURAND_H_ 1
typedef enum { CURAND_STATUS_SUCCESS = 0, CURAND_STATUS_VERSION_MISMATCH = 100, CURAND_STATUS_NOT_INITIALIZED = 101,
  CURAND_STATUS_ALLOCATION_FAILED = 102, CURAND_STATUS_TYPE_ERROR = 103, CURAND_STATUS_OUT_OF_RANGE = 104,
  CURAND_STATUS_LENGTH_NOT_MULTIPLE = 105, CURAND_STATUS_DOUBLE_PRECISION_REQUIRED = 106,
  CURAND_STATUS_LAUNCH_FAILURE = 201, CURAND_STATUS_PREEXISTING_FAILURE = 202, CURAND_STATUS_INITIALIZATION_FAILED = 203,
  CURAND_STATUS_ARCH_MISMATCH = 204, CURAND_STATUS_INTERNAL_ERROR = 999 } curandStatus_t;
typedef enum { CURAND_RNG_PSEUDO_DEFAULT = 100, CURAND_RNG_PSEUDO_XORWOW = 101, CURAND_RNG_PSEUDO_MRG32K3A = 121,
  CURAND_RNG_PSEUDO_MTGP32 = 141, CURAND_RNG_PSEUDO_PHILOX4_32_10 = 161, CURAND_RNG_QUASI_DEFAULT = 200,
  CURAND_RNG_QUASI_SOBOL32 = 201 } curandRngType_t;
struct curandGenerator_st { unsigned long long s; };
typedef curandGenerator_st* curandGenerator_t;
namespace ksim_host {
inline unsigned long long rng_next(unsigned long long& s) {  // splitmix64
  unsigned long long z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline double rng_uniform(unsigned long long& s) { return ((rng_next(s) >> 11) + 1) * (1.0 / 9007199254740993.0); }
inline double rng_normal(unsigned long long& s) {
  double u = rng_uniform(s), v = rng_uniform(s);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}
}  // namespace ksim_host
inline curandStatus_t curandCreateGenerator(curandGenerator_t* g, curandRngType_t) { *g = new curandGenerator_st{1234}; return CURAND_STATUS_SUCCESS; }
inline curandStatus_t curandCreateGeneratorHost(curandGenerator_t* g, curandRngType_t t) { return curandCreateGenerator(g, t); }
inline curandStatus_t curandDestroyGenerator(curandGenerator_t g) { delete g; return CURAND_STATUS_SUCCESS; }
inline curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t g, unsigned long long s) { g->s = s; return CURAND_STATUS_SUCCESS; }
inline curandStatus_t curandSetQuasiRandomGeneratorDimensions(curandGenerator_t, unsigned) { return CURAND_STATUS_SUCCESS; }
inline curandStatus_t curandSetStream(curandGenerator_t, cudaStream_t) { return CURAND_STATUS_SUCCESS; }
inline curandStatus_t curandSetGeneratorOffset(curandGenerator_t, unsigned long long) { return CURAND_STATUS_SUCCESS; }
inline curandStatus_t curandGenerateUniform(curandGenerator_t g, float* p, size_t n) {
  ksim_host::note("stubbed", "cuRAND numbers come from ksim's own generator (not cuRAND's sequence)");
  for (size_t i = 0; i < n; i++) p[i] = (float)ksim_host::rng_uniform(g->s);
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateUniformDouble(curandGenerator_t g, double* p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = ksim_host::rng_uniform(g->s);
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateNormal(curandGenerator_t g, float* p, size_t n, float m, float sd) {
  ksim_host::note("stubbed", "cuRAND numbers come from ksim's own generator (not cuRAND's sequence)");
  for (size_t i = 0; i < n; i++) p[i] = (float)(m + sd * ksim_host::rng_normal(g->s));
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateNormalDouble(curandGenerator_t g, double* p, size_t n, double m, double sd) {
  for (size_t i = 0; i < n; i++) p[i] = m + sd * ksim_host::rng_normal(g->s);
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerate(curandGenerator_t g, unsigned* p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned)ksim_host::rng_next(g->s);
  return CURAND_STATUS_SUCCESS;
}
"""

_CUCOMPLEX = """#pragma once
// cuComplex.h: the complex types (CUDA's vector types) and the helpers host code calls
typedef float2 cuFloatComplex;
typedef cuFloatComplex cuComplex;
typedef double2 cuDoubleComplex;
__host__ __device__ inline float cuCrealf(cuFloatComplex x) { return x.x; }
__host__ __device__ inline float cuCimagf(cuFloatComplex x) { return x.y; }
__host__ __device__ inline cuFloatComplex make_cuFloatComplex(float r, float i) { return make_float2(r, i); }
__host__ __device__ inline cuComplex make_cuComplex(float r, float i) { return make_float2(r, i); }
__host__ __device__ inline cuFloatComplex cuConjf(cuFloatComplex x) { return make_float2(x.x, -x.y); }
__host__ __device__ inline cuFloatComplex cuCaddf(cuFloatComplex a, cuFloatComplex b) { return make_float2(a.x + b.x, a.y + b.y); }
__host__ __device__ inline cuFloatComplex cuCsubf(cuFloatComplex a, cuFloatComplex b) { return make_float2(a.x - b.x, a.y - b.y); }
__host__ __device__ inline cuFloatComplex cuCmulf(cuFloatComplex a, cuFloatComplex b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
__host__ __device__ inline float cuCabsf(cuFloatComplex x) { return sqrtf(x.x * x.x + x.y * x.y); }
__host__ __device__ inline double cuCreal(cuDoubleComplex x) { return x.x; }
__host__ __device__ inline double cuCimag(cuDoubleComplex x) { return x.y; }
__host__ __device__ inline cuDoubleComplex make_cuDoubleComplex(double r, double i) { return make_double2(r, i); }
__host__ __device__ inline cuDoubleComplex cuConj(cuDoubleComplex x) { return make_double2(x.x, -x.y); }
__host__ __device__ inline cuDoubleComplex cuCadd(cuDoubleComplex a, cuDoubleComplex b) { return make_double2(a.x + b.x, a.y + b.y); }
__host__ __device__ inline cuDoubleComplex cuCsub(cuDoubleComplex a, cuDoubleComplex b) { return make_double2(a.x - b.x, a.y - b.y); }
__host__ __device__ inline cuDoubleComplex cuCmul(cuDoubleComplex a, cuDoubleComplex b) {
  return make_double2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
__host__ __device__ inline double cuCabs(cuDoubleComplex x) { return sqrt(x.x * x.x + x.y * x.y); }
"""

_CUFFT = """#pragma once
#define _CUFFT_H_ 1
// cuFFT on the host: plans are bookkeeping, cufftExec* compute the transform in double (a mixed-radix DFT per
// dimension) on the host-emulated device memory, unnormalized as cuFFT's are; the program's own kernels around
// the transform are captured with the spectrum it wrote. Not recorded as a launch.
#include "cuComplex.h"
#include <complex>
#include <map>
#include <vector>
typedef enum { CUFFT_SUCCESS = 0, CUFFT_INVALID_PLAN = 1, CUFFT_ALLOC_FAILED = 2, CUFFT_INVALID_TYPE = 3,
  CUFFT_INVALID_VALUE = 4, CUFFT_INTERNAL_ERROR = 5, CUFFT_EXEC_FAILED = 6, CUFFT_SETUP_FAILED = 7,
  CUFFT_INVALID_SIZE = 8, CUFFT_UNALIGNED_DATA = 9, CUFFT_INVALID_DEVICE = 11,
  CUFFT_NO_WORKSPACE = 13, CUFFT_NOT_IMPLEMENTED = 14, CUFFT_NOT_SUPPORTED = 16, CUFFT_MISSING_DEPENDENCY = 17,
  CUFFT_NVRTC_FAILURE = 18, CUFFT_NVJITLINK_FAILURE = 19, CUFFT_NVSHMEM_FAILURE = 20 } cufftResult;
typedef cufftResult cufftResult_t;
typedef enum { CUFFT_R2C = 0x2a, CUFFT_C2R = 0x2c, CUFFT_C2C = 0x29, CUFFT_D2Z = 0x6a, CUFFT_Z2D = 0x6c, CUFFT_Z2Z = 0x69 } cufftType;
typedef cufftType cufftType_t;
typedef enum { CUFFT_COMPATIBILITY_FFTW_PADDING = 0x01 } cufftCompatibility;
#define CUFFT_FORWARD -1
#define CUFFT_INVERSE 1
#define CUFFT_VERSION 11400
typedef int cufftHandle;
typedef float cufftReal;
typedef double cufftDoubleReal;
typedef cuComplex cufftComplex;
typedef cuDoubleComplex cufftDoubleComplex;
namespace ksim_host {
typedef std::complex<double> fft_c;
struct FftPlan {
  bool made = false;
  int rank = 0;
  long long n[3] = {1, 1, 1}, inembed[3] = {1, 1, 1}, onembed[3] = {1, 1, 1};
  long long istride = 1, idist = 0, ostride = 1, odist = 0, batch = 1;
  bool basic = true;   // inembed or onembed NULL: the basic (contiguous) layout, the other layout arguments ignored
  cufftType type = CUFFT_C2C;
};
inline std::map<int, FftPlan>& fft_plans() { static std::map<int, FftPlan> p; return p; }
inline int& fft_next_handle() { static int h = 0; return h; }
inline bool fft_real_in(cufftType t) { return t == CUFFT_R2C || t == CUFFT_D2Z; }
inline bool fft_real_out(cufftType t) { return t == CUFFT_C2R || t == CUFFT_Z2D; }
inline bool fft_double(cufftType t) { return t == CUFFT_D2Z || t == CUFFT_Z2D || t == CUFFT_Z2Z; }
inline const char* fft_type_name(cufftType t) {
  switch (t) { case CUFFT_R2C: return "R2C"; case CUFFT_C2R: return "C2R"; case CUFFT_C2C: return "C2C";
               case CUFFT_D2Z: return "D2Z"; case CUFFT_Z2D: return "Z2D"; default: return "Z2Z"; }
}
// elements (of the type each side holds) one transform spans, and the work area cuFFT would ask for (a guess:
// one complex buffer of the batch; ksim needs none)
inline size_t fft_work_size(int rank, const long long* n, cufftType t, long long batch) {
  size_t e = (size_t)batch;
  for (int d = 0; d < rank; d++) e *= (size_t)n[d];
  return e * (fft_double(t) ? 16 : 8);
}
// a plan: checks cuFFT's own conditions (rank 1-3, sizes > 0, a known type), fills the layout
template <class I> inline cufftResult fft_make(int h, int rank, const I* n, const I* inembed, long long istride,
    long long idist, const I* onembed, long long ostride, long long odist, cufftType type, long long batch,
    size_t* work) {
  if (rank < 1 || rank > 3 || !n || batch < 1) return CUFFT_INVALID_VALUE;
  if (type != CUFFT_R2C && type != CUFFT_C2R && type != CUFFT_C2C && type != CUFFT_D2Z && type != CUFFT_Z2D &&
      type != CUFFT_Z2Z) return CUFFT_INVALID_TYPE;
  FftPlan p;
  p.rank = rank; p.type = type; p.batch = batch;
  for (int d = 0; d < rank; d++) { p.n[d] = (long long)n[d]; if (p.n[d] < 1) return CUFFT_INVALID_SIZE; }
  p.basic = !inembed || !onembed;
  if (!p.basic) {
    for (int d = 0; d < rank; d++) { p.inembed[d] = (long long)inembed[d]; p.onembed[d] = (long long)onembed[d]; }
    p.istride = istride; p.idist = idist; p.ostride = ostride; p.odist = odist;
  }
  p.made = true;
  fft_plans()[h] = p;
  if (work) *work = fft_work_size(rank, p.n, type, batch);
  return CUFFT_SUCCESS;
}
inline cufftResult fft_new(cufftHandle* h) {
  if (!h) return CUFFT_INVALID_VALUE;
  *h = ++fft_next_handle();
  fft_plans()[*h] = FftPlan();
  return CUFFT_SUCCESS;
}
// DFT of n points read from `in` (stride `is`) into `out` (contiguous): mixed radix, decimation in time on the
// smallest factor; a prime length is summed directly. w[(t % N) * ws] = exp(sign 2 pi i t / N) of the top size N.
inline void fft_rec(const fft_c* in, size_t is, fft_c* out, long long n, const fft_c* w, size_t ws) {
  if (n == 1) { out[0] = in[0]; return; }
  long long p = 2;
  while (p * p <= n && n % p) p++;
  if (n % p) p = n;
  long long m = n / p;
  if (m == 1) {   // prime length
    for (long long k = 0; k < n; k++) {
      fft_c s = 0;
      for (long long j = 0; j < n; j++) s += in[j * is] * w[(size_t)((j * k) % n) * ws];
      out[k] = s;
    }
    return;
  }
  std::vector<fft_c> sub((size_t)n);
  for (long long r = 0; r < p; r++) fft_rec(in + r * is, is * p, &sub[(size_t)(r * m)], m, w, ws * p);
  for (long long k = 0; k < m; k++)
    for (long long q = 0; q < p; q++) {
      long long kk = k + q * m;
      fft_c s = 0;
      for (long long r = 0; r < p; r++) s += sub[(size_t)(r * m + k)] * w[(size_t)((r * kk) % n) * ws];
      out[kk] = s;
    }
}
// the transform of `count` lines of `len` points, `step` apart, each line's points `stride` apart, in place
inline void fft_lines(fft_c* a, long long len, long long count, long long step, long long stride, int sign) {
  if (len == 1) return;
  std::vector<fft_c> w((size_t)len), line((size_t)len), out((size_t)len);
  const double two_pi = 6.283185307179586476925286766559;
  for (long long t = 0; t < len; t++) w[(size_t)t] = std::polar(1.0, sign * two_pi * (double)t / (double)len);
  for (long long c = 0; c < count; c++) {
    fft_c* base = a + c * step;
    for (long long j = 0; j < len; j++) line[(size_t)j] = base[j * stride];
    fft_rec(line.data(), 1, out.data(), len, w.data(), 1);
    for (long long j = 0; j < len; j++) base[j * stride] = out[(size_t)j];
  }
}
// along dimension d of a row-major array of `shape` (rank dims, last fastest)
inline void fft_axis(fft_c* a, int rank, const long long* shape, int d, int sign) {
  long long inner = 1, outer = 1;
  for (int e = d + 1; e < rank; e++) inner *= shape[e];
  for (int e = 0; e < d; e++) outer *= shape[e];
  for (long long o = 0; o < outer; o++)
    fft_lines(a + o * shape[d] * inner, shape[d], inner, 1, inner, sign);
}
// offset of element (x, y, z) of a transform: the advanced layout's ((x * embed[1] + y) * embed[2] + z) * stride
inline long long fft_offset(int rank, const long long* idx, const long long* embed, long long stride) {
  long long o = 0;
  for (int d = 0; d < rank; d++) o = o * (d ? embed[d] : 1) + idx[d];
  return o * stride;
}
template <class R, class C> inline cufftResult fft_exec(int h, const void* idata, void* odata, int sign,
    cufftType want, const char* call, const char* file, int line) {
  auto it = fft_plans().find(h);
  if (it == fft_plans().end() || !it->second.made) {
    note("program", std::string(call) + " on a handle without a plan (CUFFT_INVALID_PLAN)", file, line);
    return CUFFT_INVALID_PLAN;
  }
  const FftPlan& p = it->second;
  if (p.type != want) {
    note("program", std::string(call) + " on a plan of type CUFFT_" + fft_type_name(p.type) +
         " (CUFFT_INVALID_VALUE)", file, line);
    return CUFFT_INVALID_VALUE;
  }
  if (!idata || !odata || (sign != CUFFT_FORWARD && sign != CUFFT_INVERSE)) return CUFFT_INVALID_VALUE;
  note("stubbed", std::string(call) + " was computed on the host (not recorded as a launch)", file, line);
  const int rank = p.rank;
  const bool rin = fft_real_in(p.type), rout = fft_real_out(p.type);
  const long long last = p.n[rank - 1], half = last / 2 + 1;
  long long full = 1;                      // points of one transform
  for (int d = 0; d < rank; d++) full *= p.n[d];
  long long cshape[3];                     // the complex side's shape (half the last dimension for R2C/C2R)
  for (int d = 0; d < rank; d++) cshape[d] = p.n[d];
  if (rin || rout) cshape[rank - 1] = half;
  long long cpts = full / last * cshape[rank - 1];
  // layouts: element offsets of the input and output sides (in elements of each side's type)
  long long iemb[3], oemb[3], istr = p.istride, ostr = p.ostride, idist = p.idist, odist = p.odist;
  const bool inplace = idata == odata;
  if (p.basic) {   // contiguous; an in-place real side pads its last dimension to 2 * (n / 2 + 1) reals
    for (int d = 0; d < rank; d++) { iemb[d] = rout ? cshape[d] : p.n[d]; oemb[d] = rin ? cshape[d] : p.n[d]; }
    if (rin && inplace) iemb[rank - 1] = 2 * half;
    if (rout && inplace) oemb[rank - 1] = 2 * half;
    istr = ostr = 1;
    idist = odist = 1;
    for (int d = 0; d < rank; d++) { idist *= iemb[d]; odist *= oemb[d]; }
  } else {
    for (int d = 0; d < rank; d++) { iemb[d] = p.inembed[d]; oemb[d] = p.onembed[d]; }
  }
  const long long* ishape = rout ? cshape : p.n;   // the points each side holds
  const long long* oshape = rin ? cshape : p.n;
  long long ipts = rout ? cpts : full, opts = rin ? cpts : full;
  // gather every batch before writing any (in-place transforms read all they need first)
  std::vector<fft_c> buf((size_t)(p.batch * full));   // each batch's full transform
  std::vector<fft_c> half_buf;
  if (rout) half_buf.resize((size_t)(p.batch * cpts));
  long long idx[3];
  for (long long b = 0; b < p.batch; b++)
    for (long long e = 0; e < ipts; e++) {
      long long r = e;
      for (int d = rank - 1; d >= 0; d--) { idx[d] = r % ishape[d]; r /= ishape[d]; }
      long long off = b * idist + fft_offset(rank, idx, iemb, istr);
      fft_c v = rin ? fft_c((double)((const R*)idata)[off], 0.0)
                    : fft_c((double)((const C*)idata)[off].x, (double)((const C*)idata)[off].y);
      if (rout) half_buf[(size_t)(b * cpts + e)] = v; else buf[(size_t)(b * full + e)] = v;
    }
  if (rout) {   // C2R: the inverse along the other dimensions on the half spectrum, then Hermitian rows
    for (long long b = 0; b < p.batch; b++)
      for (int d = 0; d < rank - 1; d++) fft_axis(&half_buf[(size_t)(b * cpts)], rank, cshape, d, sign);
    long long rows = p.batch * (full / last);
    std::vector<fft_c> row((size_t)last);
    for (long long r = 0; r < rows; r++) {
      const fft_c* hrow = &half_buf[(size_t)(r * half)];
      for (long long k = 0; k < last; k++) row[(size_t)k] = k < half ? hrow[k] : std::conj(hrow[last - k]);
      fft_lines(row.data(), last, 1, 0, 1, sign);
      for (long long k = 0; k < last; k++) buf[(size_t)(r * last + k)] = fft_c(row[(size_t)k].real(), 0.0);
    }
  } else {
    for (long long b = 0; b < p.batch; b++)
      for (int d = 0; d < rank; d++) fft_axis(&buf[(size_t)(b * full)], rank, p.n, d, sign);
  }
  for (long long b = 0; b < p.batch; b++)
    for (long long e = 0; e < opts; e++) {
      long long r = e;
      for (int d = rank - 1; d >= 0; d--) { idx[d] = r % oshape[d]; r /= oshape[d]; }
      long long off = b * odist + fft_offset(rank, idx, oemb, ostr);
      long long src = e;
      if (rin) {   // the first n / 2 + 1 points of the last dimension of the full spectrum
        long long k = e % half;
        src = e / half * last + k;
      }
      const fft_c& v = buf[(size_t)(b * full + src)];
      if (rout) ((R*)odata)[off] = (R)v.real();
      else { ((C*)odata)[off].x = (decltype(C::x))v.real(); ((C*)odata)[off].y = (decltype(C::x))v.imag(); }
    }
  return CUFFT_SUCCESS;
}
}  // namespace ksim_host
inline cufftResult cufftCreate(cufftHandle* h) { return ksim_host::fft_new(h); }
inline cufftResult cufftDestroy(cufftHandle h) { return ksim_host::fft_plans().erase(h) ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN; }
inline cufftResult cufftMakePlanMany(cufftHandle h, int rank, int* n, int* inembed, int istride, int idist,
    int* onembed, int ostride, int odist, cufftType type, int batch, size_t* work) {
  return ksim_host::fft_make(h, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, work);
}
inline cufftResult cufftMakePlanMany64(cufftHandle h, int rank, long long* n, long long* inembed, long long istride,
    long long idist, long long* onembed, long long ostride, long long odist, cufftType type, long long batch,
    size_t* work) {
  return ksim_host::fft_make(h, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, work);
}
inline cufftResult cufftMakePlan1d(cufftHandle h, int nx, cufftType type, int batch, size_t* work) {
  int n[1] = {nx};
  return ksim_host::fft_make<int>(h, 1, n, nullptr, 1, 0, nullptr, 1, 0, type, batch, work);
}
inline cufftResult cufftMakePlan2d(cufftHandle h, int nx, int ny, cufftType type, size_t* work) {
  int n[2] = {nx, ny};
  return ksim_host::fft_make<int>(h, 2, n, nullptr, 1, 0, nullptr, 1, 0, type, 1, work);
}
inline cufftResult cufftMakePlan3d(cufftHandle h, int nx, int ny, int nz, cufftType type, size_t* work) {
  int n[3] = {nx, ny, nz};
  return ksim_host::fft_make<int>(h, 3, n, nullptr, 1, 0, nullptr, 1, 0, type, 1, work);
}
inline cufftResult cufftPlan1d(cufftHandle* h, int nx, cufftType type, int batch) {
  cufftResult r = cufftCreate(h);
  return r ? r : cufftMakePlan1d(*h, nx, type, batch, nullptr);
}
inline cufftResult cufftPlan2d(cufftHandle* h, int nx, int ny, cufftType type) {
  cufftResult r = cufftCreate(h);
  return r ? r : cufftMakePlan2d(*h, nx, ny, type, nullptr);
}
inline cufftResult cufftPlan3d(cufftHandle* h, int nx, int ny, int nz, cufftType type) {
  cufftResult r = cufftCreate(h);
  return r ? r : cufftMakePlan3d(*h, nx, ny, nz, type, nullptr);
}
inline cufftResult cufftPlanMany(cufftHandle* h, int rank, int* n, int* inembed, int istride, int idist,
    int* onembed, int ostride, int odist, cufftType type, int batch) {
  cufftResult r = cufftCreate(h);
  return r ? r : cufftMakePlanMany(*h, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, nullptr);
}
inline cufftResult cufftEstimate1d(int nx, cufftType type, int batch, size_t* work) {
  long long n[1] = {nx}; if (work) *work = ksim_host::fft_work_size(1, n, type, batch); return CUFFT_SUCCESS; }
inline cufftResult cufftEstimate2d(int nx, int ny, cufftType type, size_t* work) {
  long long n[2] = {nx, ny}; if (work) *work = ksim_host::fft_work_size(2, n, type, 1); return CUFFT_SUCCESS; }
inline cufftResult cufftEstimate3d(int nx, int ny, int nz, cufftType type, size_t* work) {
  long long n[3] = {nx, ny, nz}; if (work) *work = ksim_host::fft_work_size(3, n, type, 1); return CUFFT_SUCCESS; }
inline cufftResult cufftEstimateMany(int rank, int* n, int*, int, int, int*, int, int, cufftType type, int batch,
    size_t* work) {
  if (rank < 1 || rank > 3 || !n) return CUFFT_INVALID_VALUE;
  long long m[3] = {1, 1, 1};
  for (int d = 0; d < rank; d++) m[d] = n[d];
  if (work) *work = ksim_host::fft_work_size(rank, m, type, batch);
  return CUFFT_SUCCESS;
}
inline cufftResult cufftGetSize1d(cufftHandle, int nx, cufftType type, int batch, size_t* work) {
  return cufftEstimate1d(nx, type, batch, work); }
inline cufftResult cufftGetSize2d(cufftHandle, int nx, int ny, cufftType type, size_t* work) {
  return cufftEstimate2d(nx, ny, type, work); }
inline cufftResult cufftGetSize3d(cufftHandle, int nx, int ny, int nz, cufftType type, size_t* work) {
  return cufftEstimate3d(nx, ny, nz, type, work); }
inline cufftResult cufftGetSizeMany(cufftHandle, int rank, int* n, int* inembed, int istride, int idist, int* onembed,
    int ostride, int odist, cufftType type, int batch, size_t* work) {
  return cufftEstimateMany(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, work); }
inline cufftResult cufftGetSizeMany64(cufftHandle, int rank, long long* n, long long*, long long, long long,
    long long*, long long, long long, cufftType type, long long batch, size_t* work) {
  if (rank < 1 || rank > 3 || !n) return CUFFT_INVALID_VALUE;
  if (work) *work = ksim_host::fft_work_size(rank, n, type, batch);
  return CUFFT_SUCCESS;
}
inline cufftResult cufftGetSize(cufftHandle h, size_t* work) {
  auto it = ksim_host::fft_plans().find(h);
  if (it == ksim_host::fft_plans().end()) return CUFFT_INVALID_PLAN;
  const ksim_host::FftPlan& p = it->second;
  if (work) *work = p.made ? ksim_host::fft_work_size(p.rank, p.n, p.type, p.batch) : 0;
  return CUFFT_SUCCESS;
}
inline cufftResult cufftSetAutoAllocation(cufftHandle, int) { return CUFFT_SUCCESS; }
inline cufftResult cufftSetWorkArea(cufftHandle, void*) { return CUFFT_SUCCESS; }
inline cufftResult cufftSetStream(cufftHandle, cudaStream_t) { return CUFFT_SUCCESS; }
inline cufftResult cufftSetCompatibilityMode(cufftHandle, cufftCompatibility) { return CUFFT_SUCCESS; }
inline cufftResult cufftGetVersion(int* v) { *v = CUFFT_VERSION; return CUFFT_SUCCESS; }
#define cufftExecC2C(plan, i, o, dir) ksim_host::fft_exec<cufftReal, cufftComplex>(plan, i, o, dir, CUFFT_C2C, "cufftExecC2C", __FILE__, __LINE__)
#define cufftExecR2C(plan, i, o) ksim_host::fft_exec<cufftReal, cufftComplex>(plan, i, o, CUFFT_FORWARD, CUFFT_R2C, "cufftExecR2C", __FILE__, __LINE__)
#define cufftExecC2R(plan, i, o) ksim_host::fft_exec<cufftReal, cufftComplex>(plan, i, o, CUFFT_INVERSE, CUFFT_C2R, "cufftExecC2R", __FILE__, __LINE__)
#define cufftExecZ2Z(plan, i, o, dir) ksim_host::fft_exec<cufftDoubleReal, cufftDoubleComplex>(plan, i, o, dir, CUFFT_Z2Z, "cufftExecZ2Z", __FILE__, __LINE__)
#define cufftExecD2Z(plan, i, o) ksim_host::fft_exec<cufftDoubleReal, cufftDoubleComplex>(plan, i, o, CUFFT_FORWARD, CUFFT_D2Z, "cufftExecD2Z", __FILE__, __LINE__)
#define cufftExecZ2D(plan, i, o) ksim_host::fft_exec<cufftDoubleReal, cufftDoubleComplex>(plan, i, o, CUFFT_INVERSE, CUFFT_Z2D, "cufftExecZ2D", __FILE__, __LINE__)
// what the host does not emulate (cufftXt.h: callbacks, several GPUs) stops the program, naming the call
#define KSIM_CUFFT_STOP(name) (ksim_host::stop("stubbed", name " (cuFFT's extension API) is not emulated: the program cannot go on", __FILE__, __LINE__), CUFFT_NOT_SUPPORTED)
"""

_CUBLASLT = """#pragma once
// cuBLASLt: handles, descriptors and heuristics are bookkeeping here; cublasLtMatmul itself is stubbed with a note
// (its output is not computed), so that the program's own kernels around it are still captured
#include "cublas_v2.h"
#include <cstdint>
struct cublasLtContext { int dummy; };
typedef cublasLtContext* cublasLtHandle_t;
struct cublasLtMatmulDescOpaque_t { int dummy; };
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque_t { int dummy; };
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
struct cublasLtMatmulPreferenceOpaque_t { int dummy; };
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount;
                 int reserved[4]; } cublasLtMatmulHeuristicResult_t;
typedef enum { CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0, CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2, CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_TRANSC = 5, CUBLASLT_MATMUL_DESC_FILL_MODE = 6, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13, CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE = 14,
  CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,
  CUBLASLT_MATMUL_DESC_C_SCALE_POINTER = 19, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20,
  CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,
  CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26 } cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_RELU = 2, CUBLASLT_EPILOGUE_RELU_AUX = 130,
  CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_RELU_BIAS = 6, CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 134,
  CUBLASLT_EPILOGUE_DRELU = 136, CUBLASLT_EPILOGUE_DRELU_BGRAD = 152, CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 160, CUBLASLT_EPILOGUE_GELU_BIAS = 36, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
  CUBLASLT_EPILOGUE_DGELU = 192, CUBLASLT_EPILOGUE_DGELU_BGRAD = 208, CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512 } cublasLtEpilogue_t;
typedef enum { CUBLASLT_MATRIX_LAYOUT_TYPE = 0, CUBLASLT_MATRIX_LAYOUT_ORDER = 1, CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
  CUBLASLT_MATRIX_LAYOUT_COLS = 3, CUBLASLT_MATRIX_LAYOUT_LD = 4, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 } cublasLtMatrixLayoutAttribute_t;
typedef enum { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1, CUBLASLT_ORDER_COL32 = 2 } cublasLtOrder_t;
typedef enum { CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 }
  cublasLtMatmulPreferenceAttributes_t;
namespace ksim_host { template <class T> inline T* lt_new() { static T one; return &one; } }
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = ksim_host::lt_new<cublasLtContext>(); return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t, cudaDataType_t) {
  *d = ksim_host::lt_new<cublasLtMatmulDescOpaque_t>(); return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*,
                                                     size_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t, uint64_t, uint64_t, int64_t) {
  *l = ksim_host::lt_new<cublasLtMatrixLayoutOpaque_t>(); return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t,
                                                       const void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = ksim_host::lt_new<cublasLtMatmulPreferenceOpaque_t>(); return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
    cublasLtMatmulPreferenceAttributes_t, const void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int want,
    cublasLtMatmulHeuristicResult_t* out, int* got) {
  if (want > 0) { *out = cublasLtMatmulHeuristicResult_t{}; out->state = CUBLAS_STATUS_SUCCESS; }
  *got = want > 0 ? 1 : 0;
  return CUBLAS_STATUS_SUCCESS;
}
#define cublasLtMatmul(...) KSIM_CUBLAS_STUB("cublasLtMatmul")
"""

_CUFFTXT = """#pragma once
// cuFFT's extensions: its callback types; installing a callback needs the device's cuFFT and stops the program
#include "cufft.h"
typedef enum { CUFFT_CB_LD_COMPLEX = 0x0, CUFFT_CB_LD_COMPLEX_DOUBLE = 0x1, CUFFT_CB_LD_REAL = 0x2,
  CUFFT_CB_LD_REAL_DOUBLE = 0x3, CUFFT_CB_ST_COMPLEX = 0x4, CUFFT_CB_ST_COMPLEX_DOUBLE = 0x5, CUFFT_CB_ST_REAL = 0x6,
  CUFFT_CB_ST_REAL_DOUBLE = 0x7, CUFFT_CB_UNDEFINED = 0x8 } cufftXtCallbackType;
typedef cufftComplex (*cufftCallbackLoadC)(void*, size_t, void*, void*);
typedef cufftReal (*cufftCallbackLoadR)(void*, size_t, void*, void*);
typedef void (*cufftCallbackStoreC)(void*, size_t, cufftComplex, void*, void*);
typedef void (*cufftCallbackStoreR)(void*, size_t, cufftReal, void*, void*);
// several GPUs: the descriptor types compile (cudalibxt.h's layout); every call stops the program, naming it
typedef enum { CUFFT_XT_FORMAT_INPUT = 0x00, CUFFT_XT_FORMAT_OUTPUT = 0x01, CUFFT_XT_FORMAT_INPLACE = 0x02,
  CUFFT_XT_FORMAT_INPLACE_SHUFFLED = 0x03, CUFFT_XT_FORMAT_1D_INPUT_SHUFFLED = 0x04 } cufftXtSubFormat;
typedef enum { CUFFT_COPY_HOST_TO_DEVICE = 0x00, CUFFT_COPY_DEVICE_TO_HOST = 0x01, CUFFT_COPY_DEVICE_TO_DEVICE = 0x02 }
  cufftXtCopyType;
typedef struct cudaXtDesc_t { int version; int nGPUs; int GPUs[64]; void* data[64]; size_t size[64]; void* cudaXtState; } cudaXtDesc;
typedef struct cudaLibXtDesc_t { int version; cudaXtDesc* descriptor; int library; int subFormat; void* libDescriptor; } cudaLibXtDesc;
#define cufftXtSetCallback(...) KSIM_CUFFT_STOP("cufftXtSetCallback")
#define cufftXtClearCallback(...) KSIM_CUFFT_STOP("cufftXtClearCallback")
#define cufftXtSetCallbackSharedSize(...) KSIM_CUFFT_STOP("cufftXtSetCallbackSharedSize")
#define cufftXtSetGPUs(...) KSIM_CUFFT_STOP("cufftXtSetGPUs")
#define cufftXtMalloc(...) KSIM_CUFFT_STOP("cufftXtMalloc")
#define cufftXtFree(...) KSIM_CUFFT_STOP("cufftXtFree")
#define cufftXtMemcpy(...) KSIM_CUFFT_STOP("cufftXtMemcpy")
#define cufftXtMakePlanMany(...) KSIM_CUFFT_STOP("cufftXtMakePlanMany")
#define cufftXtGetSizeMany(...) KSIM_CUFFT_STOP("cufftXtGetSizeMany")
#define cufftXtSetWorkArea(...) KSIM_CUFFT_STOP("cufftXtSetWorkArea")
#define cufftXtExec(...) KSIM_CUFFT_STOP("cufftXtExec")
#define cufftXtExecDescriptor(...) KSIM_CUFFT_STOP("cufftXtExecDescriptor")
#define cufftXtExecDescriptorC2C(...) KSIM_CUFFT_STOP("cufftXtExecDescriptorC2C")
#define cufftXtExecDescriptorR2C(...) KSIM_CUFFT_STOP("cufftXtExecDescriptorR2C")
#define cufftXtExecDescriptorC2R(...) KSIM_CUFFT_STOP("cufftXtExecDescriptorC2R")
#define cufftXtExecDescriptorZ2Z(...) KSIM_CUFFT_STOP("cufftXtExecDescriptorZ2Z")
#define cufftXtExecDescriptorD2Z(...) KSIM_CUFFT_STOP("cufftXtExecDescriptorD2Z")
#define cufftXtExecDescriptorZ2D(...) KSIM_CUFFT_STOP("cufftXtExecDescriptorZ2D")
"""

_ONE_RANK = """#pragma once
// mpi.h and nccl.h: the capture runs one process, MPI rank 0 of 1 and one NCCL rank on its one device. A call that
// needs another rank (point-to-point messages, more ranks than one) stops the program, naming the call.
#include <cstring>
#include <string>
namespace ksim_host {
[[noreturn]] inline void one_rank_stop(const std::string& call, const char* file, int line) {
  stop("gpu_only", call + " is not emulated: the CPU capture runs one process (MPI rank 0 of 1, one NCCL rank)",
       file, line);
}
// a collective of one rank: the receive buffer is a copy of the send buffer (nothing to copy when they are one)
inline void one_rank_copy(void* recv, const void* send, size_t bytes) {
  if (bytes && recv && send && recv != send) memmove(recv, send, bytes);
}
}  // namespace ksim_host
"""

_MPI = """#pragma once
// MPI for one process: rank 0 of 1 on every communicator; collectives copy the send buffer to the receive buffer
// (MPI_IN_PLACE: nothing to do); point-to-point calls and the v/nonblocking collectives stop the program by name.
#include "ksim_one_rank.h"
#define MPI_VERSION 3
#define MPI_SUBVERSION 1
typedef int MPI_Comm;
typedef int MPI_Datatype;   // (kind << 8) | size in bytes
typedef int MPI_Op;
typedef int MPI_Request;
typedef int MPI_Info;
typedef int MPI_Errhandler;
typedef long MPI_Aint;
typedef long long MPI_Offset;
typedef struct { int MPI_SOURCE, MPI_TAG, MPI_ERROR; int count; } MPI_Status;
#define MPI_COMM_NULL ((MPI_Comm)0)
#define MPI_COMM_WORLD ((MPI_Comm)1)
#define MPI_COMM_SELF ((MPI_Comm)2)
#define MPI_INFO_NULL ((MPI_Info)0)
#define MPI_REQUEST_NULL ((MPI_Request)0)
#define MPI_ERRORS_ARE_FATAL ((MPI_Errhandler)1)
#define MPI_ERRORS_RETURN ((MPI_Errhandler)2)
#define MPI_STATUS_IGNORE ((MPI_Status*)0)
#define MPI_STATUSES_IGNORE ((MPI_Status*)0)
#define MPI_IN_PLACE ((void*)1)
#define MPI_ANY_SOURCE (-1)
#define MPI_ANY_TAG (-1)
#define MPI_PROC_NULL (-2)
#define MPI_ROOT (-3)
#define MPI_UNDEFINED (-32766)
#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_ERROR_STRING 512
#define MPI_MAX_LIBRARY_VERSION_STRING 256
#define MPI_COMM_TYPE_SHARED 1
enum { MPI_THREAD_SINGLE = 0, MPI_THREAD_FUNNELED = 1, MPI_THREAD_SERIALIZED = 2, MPI_THREAD_MULTIPLE = 3 };
enum { MPI_SUCCESS = 0, MPI_ERR_BUFFER = 1, MPI_ERR_COUNT = 2, MPI_ERR_TYPE = 3, MPI_ERR_TAG = 4, MPI_ERR_COMM = 5,
       MPI_ERR_RANK = 6, MPI_ERR_ROOT = 7, MPI_ERR_OP = 9, MPI_ERR_ARG = 12, MPI_ERR_OTHER = 16, MPI_ERR_INTERN = 17 };
#define KSIM_MPI_TYPE(kind, size) ((MPI_Datatype)(((kind) << 8) | (size)))
#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_CHAR KSIM_MPI_TYPE(1, 1)
#define MPI_SIGNED_CHAR KSIM_MPI_TYPE(2, 1)
#define MPI_UNSIGNED_CHAR KSIM_MPI_TYPE(3, 1)
#define MPI_BYTE KSIM_MPI_TYPE(4, 1)
#define MPI_SHORT KSIM_MPI_TYPE(5, 2)
#define MPI_UNSIGNED_SHORT KSIM_MPI_TYPE(6, 2)
#define MPI_INT KSIM_MPI_TYPE(7, 4)
#define MPI_UNSIGNED KSIM_MPI_TYPE(8, 4)
#define MPI_LONG KSIM_MPI_TYPE(9, sizeof(long))
#define MPI_UNSIGNED_LONG KSIM_MPI_TYPE(10, sizeof(long))
#define MPI_LONG_LONG KSIM_MPI_TYPE(11, 8)
#define MPI_LONG_LONG_INT MPI_LONG_LONG
#define MPI_UNSIGNED_LONG_LONG KSIM_MPI_TYPE(12, 8)
#define MPI_FLOAT KSIM_MPI_TYPE(13, 4)
#define MPI_DOUBLE KSIM_MPI_TYPE(14, 8)
#define MPI_LONG_DOUBLE KSIM_MPI_TYPE(15, sizeof(long double))
#define MPI_C_BOOL KSIM_MPI_TYPE(16, 1)
#define MPI_CXX_BOOL KSIM_MPI_TYPE(17, sizeof(bool))
#define MPI_INT8_T KSIM_MPI_TYPE(18, 1)
#define MPI_INT16_T KSIM_MPI_TYPE(19, 2)
#define MPI_INT32_T KSIM_MPI_TYPE(20, 4)
#define MPI_INT64_T KSIM_MPI_TYPE(21, 8)
#define MPI_UINT8_T KSIM_MPI_TYPE(22, 1)
#define MPI_UINT16_T KSIM_MPI_TYPE(23, 2)
#define MPI_UINT32_T KSIM_MPI_TYPE(24, 4)
#define MPI_UINT64_T KSIM_MPI_TYPE(25, 8)
#define MPI_AINT KSIM_MPI_TYPE(26, sizeof(MPI_Aint))
#define MPI_OFFSET KSIM_MPI_TYPE(27, 8)
#define MPI_2INT KSIM_MPI_TYPE(28, 8)
#define MPI_FLOAT_INT KSIM_MPI_TYPE(29, 8)
#define MPI_DOUBLE_INT KSIM_MPI_TYPE(30, 16)
#define MPI_OP_NULL ((MPI_Op)0)
#define MPI_MAX ((MPI_Op)1)
#define MPI_MIN ((MPI_Op)2)
#define MPI_SUM ((MPI_Op)3)
#define MPI_PROD ((MPI_Op)4)
#define MPI_LAND ((MPI_Op)5)
#define MPI_BAND ((MPI_Op)6)
#define MPI_LOR ((MPI_Op)7)
#define MPI_BOR ((MPI_Op)8)
#define MPI_LXOR ((MPI_Op)9)
#define MPI_BXOR ((MPI_Op)10)
#define MPI_MAXLOC ((MPI_Op)11)
#define MPI_MINLOC ((MPI_Op)12)
namespace ksim_host {
inline bool mpi_comm_ok(MPI_Comm c) { return c != MPI_COMM_NULL; }
inline size_t mpi_bytes(int count, MPI_Datatype t) { return count > 0 ? (size_t)count * (size_t)(t & 0xff) : 0; }
inline int mpi_copy(const void* send, void* recv, int count, MPI_Datatype t, MPI_Comm c) {
  if (!mpi_comm_ok(c)) return MPI_ERR_COMM;
  if (count < 0) return MPI_ERR_COUNT;
  if (send != MPI_IN_PLACE) one_rank_copy(recv, send, mpi_bytes(count, t));
  return MPI_SUCCESS;
}
inline int& mpi_state() { static int s = 0; return s; }   // 0 not initialized, 1 initialized, 2 finalized
inline int mpi_init() {
  note("stubbed", "MPI runs as one process (rank 0 of 1): its collectives copy the send buffer to the receive buffer");
  mpi_state() = 1;
  return MPI_SUCCESS;
}
}  // namespace ksim_host
inline int MPI_Init(int*, char***) { return ksim_host::mpi_init(); }
inline int MPI_Init_thread(int*, char***, int required, int* provided) { if (provided) *provided = required; return ksim_host::mpi_init(); }
inline int MPI_Initialized(int* f) { *f = ksim_host::mpi_state() >= 1; return MPI_SUCCESS; }
inline int MPI_Finalize() { ksim_host::mpi_state() = 2; return MPI_SUCCESS; }
inline int MPI_Finalized(int* f) { *f = ksim_host::mpi_state() == 2; return MPI_SUCCESS; }
inline int MPI_Query_thread(int* p) { *p = MPI_THREAD_MULTIPLE; return MPI_SUCCESS; }
inline int MPI_Abort(MPI_Comm, int code) {
  ksim_host::note("program", "MPI_Abort called with error code " + std::to_string(code));
  exit(code);
}
inline int MPI_Comm_rank(MPI_Comm c, int* r) { if (!ksim_host::mpi_comm_ok(c)) return MPI_ERR_COMM; *r = 0; return MPI_SUCCESS; }
inline int MPI_Comm_size(MPI_Comm c, int* n) { if (!ksim_host::mpi_comm_ok(c)) return MPI_ERR_COMM; *n = 1; return MPI_SUCCESS; }
inline int MPI_Comm_dup(MPI_Comm c, MPI_Comm* out) { if (!ksim_host::mpi_comm_ok(c)) return MPI_ERR_COMM; *out = c; return MPI_SUCCESS; }
inline int MPI_Comm_split(MPI_Comm c, int color, int, MPI_Comm* out) {
  if (!ksim_host::mpi_comm_ok(c)) return MPI_ERR_COMM;
  *out = color == MPI_UNDEFINED ? MPI_COMM_NULL : MPI_COMM_SELF;
  return MPI_SUCCESS;
}
inline int MPI_Comm_split_type(MPI_Comm c, int type, int key, MPI_Info, MPI_Comm* out) { return MPI_Comm_split(c, type, key, out); }
inline int MPI_Comm_free(MPI_Comm* c) { *c = MPI_COMM_NULL; return MPI_SUCCESS; }
inline int MPI_Comm_set_errhandler(MPI_Comm, MPI_Errhandler) { return MPI_SUCCESS; }
inline int MPI_Barrier(MPI_Comm c) { return ksim_host::mpi_comm_ok(c) ? MPI_SUCCESS : MPI_ERR_COMM; }
inline int MPI_Bcast(void*, int, MPI_Datatype, int root, MPI_Comm c) {
  if (!ksim_host::mpi_comm_ok(c)) return MPI_ERR_COMM;
  return root == 0 ? MPI_SUCCESS : MPI_ERR_ROOT;
}
inline int MPI_Allreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op, MPI_Comm c) { return ksim_host::mpi_copy(s, r, n, t, c); }
inline int MPI_Reduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op, int root, MPI_Comm c) {
  return root == 0 ? ksim_host::mpi_copy(s, r, n, t, c) : MPI_ERR_ROOT;
}
inline int MPI_Allgather(const void* s, int sn, MPI_Datatype st, void* r, int, MPI_Datatype, MPI_Comm c) { return ksim_host::mpi_copy(s, r, sn, st, c); }
inline int MPI_Gather(const void* s, int sn, MPI_Datatype st, void* r, int, MPI_Datatype, int root, MPI_Comm c) {
  return root == 0 ? ksim_host::mpi_copy(s, r, sn, st, c) : MPI_ERR_ROOT;
}
inline int MPI_Scatter(const void* s, int, MPI_Datatype, void* r, int rn, MPI_Datatype rt, int root, MPI_Comm c) {
  if (root != 0) return MPI_ERR_ROOT;
  return r == MPI_IN_PLACE ? MPI_SUCCESS : ksim_host::mpi_copy(s, r, rn, rt, c);
}
inline int MPI_Alltoall(const void* s, int sn, MPI_Datatype st, void* r, int, MPI_Datatype, MPI_Comm c) { return ksim_host::mpi_copy(s, r, sn, st, c); }
inline int MPI_Type_size(MPI_Datatype t, int* n) { *n = t & 0xff; return MPI_SUCCESS; }
inline double MPI_Wtime() { return ksim_host::now_s(); }
inline double MPI_Wtick() { return 1e-9; }
inline int MPI_Get_processor_name(char* s, int* n) { *n = snprintf(s, MPI_MAX_PROCESSOR_NAME, "ksim-capture"); return MPI_SUCCESS; }
inline int MPI_Get_version(int* v, int* sv) { *v = MPI_VERSION; *sv = MPI_SUBVERSION; return MPI_SUCCESS; }
inline int MPI_Get_library_version(char* s, int* n) { *n = snprintf(s, MPI_MAX_LIBRARY_VERSION_STRING, "ksim one-process MPI"); return MPI_SUCCESS; }
inline int MPI_Error_string(int e, char* s, int* n) { *n = snprintf(s, MPI_MAX_ERROR_STRING, "MPI error %d", e); return MPI_SUCCESS; }
#define KSIM_MPI_STOP(name) (ksim_host::one_rank_stop(name, __FILE__, __LINE__), MPI_ERR_OTHER)
#define MPI_Send(...) KSIM_MPI_STOP("MPI_Send")
#define MPI_Ssend(...) KSIM_MPI_STOP("MPI_Ssend")
#define MPI_Recv(...) KSIM_MPI_STOP("MPI_Recv")
#define MPI_Isend(...) KSIM_MPI_STOP("MPI_Isend")
#define MPI_Irecv(...) KSIM_MPI_STOP("MPI_Irecv")
#define MPI_Sendrecv(...) KSIM_MPI_STOP("MPI_Sendrecv")
#define MPI_Sendrecv_replace(...) KSIM_MPI_STOP("MPI_Sendrecv_replace")
#define MPI_Probe(...) KSIM_MPI_STOP("MPI_Probe")
#define MPI_Iprobe(...) KSIM_MPI_STOP("MPI_Iprobe")
#define MPI_Wait(...) KSIM_MPI_STOP("MPI_Wait")
#define MPI_Waitall(...) KSIM_MPI_STOP("MPI_Waitall")
#define MPI_Test(...) KSIM_MPI_STOP("MPI_Test")
#define MPI_Iallreduce(...) KSIM_MPI_STOP("MPI_Iallreduce")
#define MPI_Ibcast(...) KSIM_MPI_STOP("MPI_Ibcast")
#define MPI_Allgatherv(...) KSIM_MPI_STOP("MPI_Allgatherv")
#define MPI_Gatherv(...) KSIM_MPI_STOP("MPI_Gatherv")
#define MPI_Scatterv(...) KSIM_MPI_STOP("MPI_Scatterv")
#define MPI_Alltoallv(...) KSIM_MPI_STOP("MPI_Alltoallv")
#define MPI_Reduce_scatter(...) KSIM_MPI_STOP("MPI_Reduce_scatter")
#define MPI_Scan(...) KSIM_MPI_STOP("MPI_Scan")
#define MPI_Exscan(...) KSIM_MPI_STOP("MPI_Exscan")
#define MPI_Win_create(...) KSIM_MPI_STOP("MPI_Win_create")
#define MPI_Comm_spawn(...) KSIM_MPI_STOP("MPI_Comm_spawn")
"""

_NCCL = """#pragma once
// NCCL with one rank on the capture's one device, on its CPU memory: all-reduce, reduce, broadcast, all-gather and
// reduce-scatter of one rank copy the send buffer to the receive buffer (ncclAvg over one rank too). The stream
// argument is taken as cudaMemcpyAsync takes it: the runtime runs every call in order, so the copy is done on
// return. More than one rank, point-to-point and pre-multiplied sums stop the program, naming the call.
#include "ksim_one_rank.h"
#define NCCL_MAJOR 2
#define NCCL_MINOR 21
#define NCCL_PATCH 5
#define NCCL_SUFFIX ""
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)
#define NCCL_CONFIG_UNDEF_PTR nullptr
typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
  ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7, ncclNumResults = 8 } ncclResult_t;
typedef enum { ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3, ncclInt64 = 4,
  ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9, ncclFloat8e4m3 = 10, ncclFloat8e5m2 = 11, ncclNumTypes = 12 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff } ncclRedOp_t;
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
struct ncclComm { int device; };
typedef ncclComm* ncclComm_t;
typedef struct { size_t size; unsigned int magic; unsigned int version; int blocking; int cgaClusterSize; int minCTAs;
  int maxCTAs; const char* netName; int splitShare; } ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER { sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, \\
  NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT }
namespace ksim_host {
inline size_t nccl_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}
inline ncclResult_t nccl_init(ncclComm_t* comm, int nranks, int rank, const char* call, const char* file, int line) {
  if (!comm) return ncclInvalidArgument;
  if (nranks != 1 || rank != 0)
    one_rank_stop(std::string(call) + " with nranks=" + std::to_string(nranks) + ", rank=" + std::to_string(rank),
                  file, line);
  int dev = 0;
  cudaGetDevice(&dev);
  *comm = new ncclComm{dev};
  return ncclSuccess;
}
// a collective of one rank: checks what NCCL checks, then the copy (`bytes` of the receive side)
inline ncclResult_t nccl_copy(const char* call, const void* send, void* recv, size_t count, ncclDataType_t t,
                              int op, int root, ncclComm_t comm, cudaStream_t, const char* file, int line) {
  const char* bad = !comm ? "a null communicator" : !nccl_size(t) ? "an unknown data type"
                  : (op < 0 || op >= ncclNumOps) ? "an unknown reduction" : root != 0 ? "a root other than rank 0"
                  : (count && (!send || !recv)) ? "a null buffer" : nullptr;
  if (bad) {
    note("program", std::string(call) + " was given " + bad + " (ncclInvalidArgument)", file, line);
    return ncclInvalidArgument;
  }
  note("stubbed", std::string(call) + " over one rank copied its send buffer (not recorded as a launch)", file, line);
  one_rank_copy(recv, send, count * nccl_size(t));
  return ncclSuccess;
}
}  // namespace ksim_host
inline ncclResult_t ncclGetVersion(int* v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }
inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "ksim-one-rank");
  return ncclSuccess;
}
#define ncclCommInitRank(comm, nranks, id, rank) ksim_host::nccl_init(comm, nranks, rank, "ncclCommInitRank", __FILE__, __LINE__)
#define ncclCommInitRankConfig(comm, nranks, id, rank, config) ksim_host::nccl_init(comm, nranks, rank, "ncclCommInitRankConfig", __FILE__, __LINE__)
#define ncclCommInitAll(comms, ndev, devlist) ksim_host::nccl_init(comms, ndev, 0, "ncclCommInitAll", __FILE__, __LINE__)
inline ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int, ncclComm_t* out, ncclConfig_t*) {
  if (!comm || !out) return ncclInvalidArgument;
  *out = color == NCCL_SPLIT_NOCOLOR ? nullptr : new ncclComm{comm->device};
  return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t comm) { delete comm; return ncclSuccess; }
inline ncclResult_t ncclCommAbort(ncclComm_t comm) { delete comm; return ncclSuccess; }
inline ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm ? ncclSuccess : ncclInvalidArgument; }
inline ncclResult_t ncclCommCount(const ncclComm_t comm, int* n) { if (!comm) return ncclInvalidArgument; *n = 1; return ncclSuccess; }
inline ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* d) { if (!comm) return ncclInvalidArgument; *d = comm->device; return ncclSuccess; }
inline ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* r) { if (!comm) return ncclInvalidArgument; *r = 0; return ncclSuccess; }
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* e) { if (!comm) return ncclInvalidArgument; *e = ncclSuccess; return ncclSuccess; }
inline ncclResult_t ncclGroupStart() { return ncclSuccess; }
inline ncclResult_t ncclGroupEnd() { return ncclSuccess; }
inline ncclResult_t ncclMemAlloc(void** p, size_t n) { return cudaMalloc(p, n) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError; }
inline ncclResult_t ncclMemFree(void* p) { cudaFree(p); return ncclSuccess; }
inline ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buf, size_t, void** handle) {
  if (!comm || !handle) return ncclInvalidArgument; *handle = buf; return ncclSuccess; }
inline ncclResult_t ncclCommDeregister(const ncclComm_t comm, void*) { return comm ? ncclSuccess : ncclInvalidArgument; }
inline const char* ncclGetLastError(ncclComm_t) { return ""; }
inline const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
#define ncclAllReduce(send, recv, count, type, op, comm, stream) \\
  ksim_host::nccl_copy("ncclAllReduce", send, recv, count, type, op, 0, comm, stream, __FILE__, __LINE__)
#define ncclReduce(send, recv, count, type, op, root, comm, stream) \\
  ksim_host::nccl_copy("ncclReduce", send, recv, count, type, op, root, comm, stream, __FILE__, __LINE__)
#define ncclBroadcast(send, recv, count, type, root, comm, stream) \\
  ksim_host::nccl_copy("ncclBroadcast", send, recv, count, type, ncclSum, root, comm, stream, __FILE__, __LINE__)
#define ncclBcast(buf, count, type, root, comm, stream) \\
  ksim_host::nccl_copy("ncclBcast", buf, buf, count, type, ncclSum, root, comm, stream, __FILE__, __LINE__)
#define ncclAllGather(send, recv, sendcount, type, comm, stream) \\
  ksim_host::nccl_copy("ncclAllGather", send, recv, sendcount, type, ncclSum, 0, comm, stream, __FILE__, __LINE__)
#define ncclReduceScatter(send, recv, recvcount, type, op, comm, stream) \\
  ksim_host::nccl_copy("ncclReduceScatter", send, recv, recvcount, type, op, 0, comm, stream, __FILE__, __LINE__)
#define KSIM_NCCL_STOP(name) (ksim_host::one_rank_stop(name, __FILE__, __LINE__), ncclInvalidUsage)
#define ncclSend(...) KSIM_NCCL_STOP("ncclSend")
#define ncclRecv(...) KSIM_NCCL_STOP("ncclRecv")
#define ncclRedOpCreatePreMulSum(...) KSIM_NCCL_STOP("ncclRedOpCreatePreMulSum")
#define ncclRedOpDestroy(...) KSIM_NCCL_STOP("ncclRedOpDestroy")
"""

FILES: dict[str, str] = {name: "#pragma once\n// ksim capture: provided by ksim_host.h\n" for name in _EMPTY}
FILES.update({
    "math_constants.h": _MATH_CONSTANTS, "cuda.h": _CUDA_H, "nvToolsExt.h": _NVTX, "nvtx3/nvToolsExt.h": _NVTX,
    "cublas_v2.h": _CUBLAS, "cublas.h": _CUBLAS, "cublas_api.h": _CUBLAS, "cublasLt.h": _CUBLASLT,
    "curand.h": _CURAND, "cuComplex.h": _CUCOMPLEX,
    # the device API: ksim_curand.h draws cuRAND's XORWOW sequence (the ports carry the same text); the other
    # generators' states are not emulated (Philox's name stands for XORWOW's state so that programs naming it compile)
    "curand_kernel.h": '#pragma once\n#include "curand.h"\n#include "ksim_curand.h"\n'
                       'typedef curandStateXORWOW curandStatePhilox4_32_10_t;\n', "cufft.h": _CUFFT,
    "cufftXt.h": _CUFFTXT,
    "ksim_one_rank.h": _ONE_RANK, "mpi.h": _MPI, "nccl.h": _NCCL,
    "nvrtc.h": '#pragma once\n#include "cuda.h"\n',   # NVRTC: ksim_driver.h, with the driver API
})
# GLUT and the OpenGL a program shows its results with, headless (ksim_gl.h): glutMainLoop calls the display and idle
# callbacks, then ends the program; buffer objects are host allocations, so CUDA-GL interop on buffers maps them.
# GLEW, GLFW, EGL and the samples' helper_gl.h stay UNSUPPORTED (left out where unused)
GL_HEADERS = ("GL/gl.h", "GL/glu.h", "GL/glut.h", "GL/freeglut.h", "GL/freeglut_std.h", "GL/freeglut_ext.h",
              "GL/glext.h", "GL/glx.h", "GLUT/glut.h", "OpenGL/gl.h", "OpenGL/glu.h", "OpenGL/glext.h",
              "cuda_gl_interop.h")
FILES.update({h: '#pragma once\n#include "ksim_gl.h"\n' for h in GL_HEADERS})
# Thrust's vectors and basic algorithms on the host (host_thrust.py); its other headers stay UNSUPPORTED
FILES.update(host_thrust.FILES)
FILES.update({h: f'#pragma once\n#include "{_cub.STAND_IN}"\n' for h in _cub.HEADERS})   # CUB's collectives (sim/cub.py)

# NVIDIA samples' helper headers (helper_cuda.h, ...; host_helpers.py): used only where the program's include path
# has none of that name (host_source.build_program), unlike FILES, which win over any file of the program
FALLBACK: dict[str, str] = dict(host_helpers.FILES)

# headers whose library the capture cannot run: (pattern, what it is)
UNSUPPORTED: list[tuple[re.Pattern, str]] = [
    (re.compile(r"^thrust/"), "Thrust"), (_cub.OTHER_HEADERS, "CUB"),
    (re.compile(r"^(GL|GLES\d?|GLFW|GLUT|EGL)/|^(cuda_gl_interop|cudaGL|cuda_egl_interop|helper_gl|glew)\.h$"),
     "OpenGL interop"),
    (re.compile(r"^(cuda_d3d\d*_interop|d3d\w*|dxgi\w*|dynlink_d3d\d+)\.h$"), "Direct3D interop"),
    (re.compile(r"^vulkan/|^cuda_vk"), "Vulkan interop"),
    (re.compile(r"^cudnn"), "cuDNN"), (re.compile(r"^nccl_"), "NCCL's plugin headers"),
    (re.compile(r"^cusparse"), "cuSPARSE"),
    (re.compile(r"^cusolver"), "cuSOLVER"), (re.compile(r"^npp"), "NPP"), (re.compile(r"^nvjpeg"), "nvJPEG"),
    (re.compile(r"^cuda/annotated_ptr"), "cuda::annotated_ptr"),
    (re.compile(r"^cuda_fp8\.h$"), "FP8 types"), (re.compile(r"^cudla|^nvsci|^cufile"), "a device-only library"),
    (re.compile(r"^windows\.h$"), "Windows"),
]


def stand_in(header: str) -> bool:
    """Whether `header` has a stand-in of its own (a library's types and stubs), not an empty one that
    ksim_host.h already covers."""
    return header in FILES and header not in _EMPTY


def unsupported(header: str) -> str | None:
    if header in FILES:   # a stand-in wins over its library's pattern (Thrust's provided headers)
        return None
    for pat, what in UNSUPPORTED:
        if pat.search(header):
            return host_thrust.UNPROVIDED if what == "Thrust" else what
    return None


def include_dir() -> Path:
    """The folder of stand-in headers (written once per version of their text)."""
    files = {**FILES, **FALLBACK}
    key = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:12]
    d = cache_dir() / f"host-include-{key}"
    if (d / ".complete").exists():
        return d
    for name, text in files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + f".{unique_suffix()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, p)
    (d / ".complete").write_text("")
    return d
