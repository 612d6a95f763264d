// ksim_host.h - a CUDA runtime on the CPU, for launch capture (capture.py).
//
// A whole .cu program (host code + kernels) is compiled with g++ against this header: device memory is
// guard-paged host memory, copies are memcpy, streams and events are serialised host operations, and a
// kernel launch (the Python side rewrites `k<<<g, b, smem, stream>>>(args)` into ksim_host::launch) runs the
// grid in-process through ksim.h's fiber scheduler. Each launch is written to `launches.jsonl` in the capture
// directory ($KSIM_CAPTURE_DIR): geometry, arguments (pointer arguments resolved to the allocation they point
// into), and the allocations' contents before and after as .npy files, within a byte budget.
// Faults inside a kernel are reported by ksim.h (its message goes to `fault.txt`); constructs that only a GPU
// can do (textures, graphs, IPC, dynamic parallelism...) stop the program with a note naming file and line.
#pragma once
#define KSIM_CUDA 1
#define KSIM_HOST 1
#include "ksim.h"
#include <cxxabi.h>
#include <fcntl.h>
#include <chrono>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <typeinfo>
#include <vector>

// ------------------------------------------------------------------------------------------------
// Types, enums and constants of the runtime API
// ------------------------------------------------------------------------------------------------
#undef warpSize  // a constant here: cudaDeviceProp has a field of that name
constexpr int warpSize = 32;
#define __DRIVER_TYPES_H__ 1
#define __CUDA_RUNTIME_H__ 1
#define CUDART_VERSION 12040
#define CUDA_VERSION 12040
#define __CUDACC_VER_MAJOR__ 12
#define __CUDACC_VER_MINOR__ 4
#define CUDART_CB
#define CUDARTAPI
#define CUDAAPI
enum cudaError {
  cudaErrorProfilerNotInitialized = 6, cudaErrorProfilerAlreadyStarted = 7, cudaErrorProfilerAlreadyStopped = 8,
  cudaErrorMapBufferObjectFailed = 14, cudaErrorUnmapBufferObjectFailed = 15, cudaErrorInvalidTextureBinding = 19,
  cudaErrorInvalidChannelDescriptor = 20, cudaErrorAddressOfConstant = 22, cudaErrorTextureFetchFailed = 23,
  cudaErrorTextureNotBound = 24, cudaErrorSynchronizationError = 25, cudaErrorInvalidFilterSetting = 26,
  cudaErrorInvalidNormSetting = 27, cudaErrorMixedDeviceExecution = 28, cudaErrorNotYetImplemented = 31,
  cudaErrorMemoryValueTooLarge = 32, cudaErrorSetOnActiveProcess = 36, cudaErrorInvalidSurface = 37,
  cudaErrorDuplicateVariableName = 43, cudaErrorDuplicateTextureName = 44, cudaErrorDuplicateSurfaceName = 45,
  cudaErrorDevicesUnavailable = 46, cudaErrorIncompatibleDriverContext = 49, cudaErrorPriorLaunchFailure = 53,
  cudaErrorLaunchMaxDepthExceeded = 65, cudaErrorLaunchFileScopedTex = 66, cudaErrorLaunchFileScopedSurf = 67,
  cudaErrorSyncDepthExceeded = 68, cudaErrorLaunchPendingCountExceeded = 69, cudaErrorStartupFailure = 127,
  cudaErrorECCUncorrectable = 214, cudaErrorUnsupportedLimit = 215, cudaErrorDeviceAlreadyInUse = 216,
  cudaErrorPeerAccessUnsupported = 217, cudaErrorInvalidPtx = 218, cudaErrorInvalidGraphicsContext = 219,
  cudaErrorNvlinkUncorrectable = 220, cudaErrorJitCompilerNotFound = 221, cudaErrorSharedObjectSymbolNotFound = 302,
  cudaErrorSharedObjectInitFailed = 303, cudaErrorOperatingSystem = 304, cudaErrorAssert = 710,
  cudaErrorTooManyPeers = 711, cudaErrorHardwareStackError = 714, cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716, cudaErrorInvalidAddressSpace = 717, cudaErrorInvalidPc = 718,
  cudaErrorNotPermitted = 800, cudaErrorApiFailureBase = 10000,
  cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4, cudaErrorProfilerDisabled = 5, cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidPitchValue = 12, cudaErrorInvalidSymbol = 13, cudaErrorInvalidHostPointer = 16,
  cudaErrorInvalidDevicePointer = 17, cudaErrorInvalidTexture = 18, cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35, cudaErrorMissingConfiguration = 52, cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101, cudaErrorInvalidKernelImage = 200,
  cudaErrorNoKernelImageForDevice = 209, cudaErrorInvalidResourceHandle = 400, cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700, cudaErrorLaunchOutOfResources = 701, cudaErrorLaunchTimeout = 702,
  cudaErrorPeerAccessAlreadyEnabled = 704, cudaErrorPeerAccessNotEnabled = 705,
  cudaErrorHostMemoryAlreadyRegistered = 712, cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorLaunchFailure = 719, cudaErrorCooperativeLaunchTooLarge = 720, cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900, cudaErrorStreamCaptureInvalidated = 901, cudaErrorIllegalState = 401,
  cudaErrorUnknown = 999
};
typedef cudaError cudaError_t;
struct CUstream_st;
struct CUevent_st { double t; };
typedef CUstream_st* cudaStream_t;
struct cudaGraphicsResource;   // OpenGL/Direct3D interop handles (their calls stop the capture: GPU only)
typedef cudaGraphicsResource* cudaGraphicsResource_t;
typedef CUevent_st* cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaFuncCache { cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2,
                     cudaFuncCachePreferEqual = 3 };
enum cudaSharedMemConfig { cudaSharedMemBankSizeDefault = 0, cudaSharedMemBankSizeFourByte = 1,
                           cudaSharedMemBankSizeEightByte = 2 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9, cudaFuncAttributeClusterDimMustBeSet = 10,
                         cudaFuncAttributeRequiredClusterWidth = 11, cudaFuncAttributeRequiredClusterHeight = 12,
                         cudaFuncAttributeRequiredClusterDepth = 13, cudaFuncAttributeNonPortableClusterSizeAllowed = 14,
                         cudaFuncAttributeClusterSchedulingPolicyPreference = 15, cudaFuncAttributeMax = 16 };
// the split of on-chip memory between L1 and shared memory a kernel prefers (a percentage): a hint, nothing here
enum cudaSharedCarveout { cudaSharedmemCarveoutDefault = -1, cudaSharedmemCarveoutMaxL1 = 0,
                          cudaSharedmemCarveoutMaxShared = 100 };
enum cudaComputeMode { cudaComputeModeDefault = 0, cudaComputeModeExclusive = 1, cudaComputeModeProhibited = 2,
                       cudaComputeModeExclusiveProcess = 3 };
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2,
                      cudaMemoryTypeManaged = 3 };
enum cudaLimit { cudaLimitStackSize = 0, cudaLimitPrintfFifoSize = 1, cudaLimitMallocHeapSize = 2,
                 cudaLimitDevRuntimeSyncDepth = 3, cudaLimitDevRuntimePendingLaunchCount = 4,
                 cudaLimitMaxL2FetchGranularity = 5, cudaLimitPersistingL2CacheSize = 6 };
enum cudaMemoryAdvise { cudaMemAdviseSetReadMostly = 1, cudaMemAdviseUnsetReadMostly = 2,
                        cudaMemAdviseSetPreferredLocation = 3, cudaMemAdviseUnsetPreferredLocation = 4,
                        cudaMemAdviseSetAccessedBy = 5, cudaMemAdviseUnsetAccessedBy = 6 };
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxBlockDimX = 2, cudaDevAttrMaxBlockDimY = 3,
  cudaDevAttrMaxBlockDimZ = 4, cudaDevAttrMaxGridDimX = 5, cudaDevAttrMaxGridDimY = 6, cudaDevAttrMaxGridDimZ = 7,
  cudaDevAttrMaxSharedMemoryPerBlock = 8, cudaDevAttrTotalConstantMemory = 9, cudaDevAttrWarpSize = 10,
  cudaDevAttrMaxPitch = 11, cudaDevAttrMaxRegistersPerBlock = 12, cudaDevAttrClockRate = 13,
  cudaDevAttrTextureAlignment = 14, cudaDevAttrGpuOverlap = 15, cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrKernelExecTimeout = 17, cudaDevAttrIntegrated = 18, cudaDevAttrCanMapHostMemory = 19,
  cudaDevAttrComputeMode = 20, cudaDevAttrConcurrentKernels = 31, cudaDevAttrEccEnabled = 32,
  cudaDevAttrPciBusId = 33, cudaDevAttrPciDeviceId = 34, cudaDevAttrTccDriver = 35,
  cudaDevAttrMemoryClockRate = 36, cudaDevAttrGlobalMemoryBusWidth = 37, cudaDevAttrL2CacheSize = 38,
  cudaDevAttrMaxThreadsPerMultiProcessor = 39, cudaDevAttrAsyncEngineCount = 40, cudaDevAttrUnifiedAddressing = 41,
  cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrStreamPrioritiesSupported = 78, cudaDevAttrGlobalL1CacheSupported = 79,
  cudaDevAttrLocalL1CacheSupported = 80, cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrMaxRegistersPerMultiprocessor = 82, cudaDevAttrManagedMemory = 83, cudaDevAttrIsMultiGpuBoard = 84,
  cudaDevAttrConcurrentManagedAccess = 89, cudaDevAttrComputePreemptionSupported = 90,
  cudaDevAttrCooperativeLaunch = 95, cudaDevAttrCooperativeMultiDeviceLaunch = 96,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97, cudaDevAttrPageableMemoryAccess = 88,
  cudaDevAttrDirectManagedMemAccessFromHost = 101, cudaDevAttrMaxBlocksPerMultiprocessor = 106,
  cudaDevAttrMemoryPoolsSupported = 115
};
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
#define cudaMemAttachSingle 0x04
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04
#define cudaDeviceScheduleAuto 0x00
#define cudaDeviceScheduleSpin 0x01
#define cudaDeviceScheduleYield 0x02
#define cudaDeviceScheduleBlockingSync 0x04
#define cudaDeviceMapHost 0x08
#define cudaDeviceLmemResizeToMax 0x10
#define cudaDeviceBlockingSync 0x04
#define cudaCpuDeviceId (-1)
#define cudaInvalidDeviceId (-2)

struct cudaUUID_t { char bytes[16]; };
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  char luid[8];
  unsigned luidDeviceNodeMask;
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize;
  size_t memPitch;
  int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
  size_t totalConstMem;
  int major, minor;
  size_t textureAlignment, texturePitchAlignment;
  int deviceOverlap, multiProcessorCount, kernelExecTimeoutEnabled, integrated, canMapHostMemory, computeMode;
  int maxTexture1D, maxTexture1DMipmap, maxTexture1DLinear, maxTexture2D[2], maxTexture2DMipmap[2],
      maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3], maxTextureCubemap,
      maxTexture1DLayered[2], maxTexture2DLayered[3], maxTextureCubemapLayered[2], maxSurface1D, maxSurface2D[2],
      maxSurface3D[3], maxSurface1DLayered[2], maxSurface2DLayered[3], maxSurfaceCubemap,
      maxSurfaceCubemapLayered[2];
  size_t surfaceAlignment;
  int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount,
      unifiedAddressing, memoryClockRate, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize,
      maxThreadsPerMultiProcessor, streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID, hostNativeAtomicSupported,
      singleToDoublePrecisionPerfRatio, pageableMemoryAccess, concurrentManagedAccess,
      computePreemptionSupported, canUseHostPointerForRegisteredMem, cooperativeLaunch,
      cooperativeMultiDeviceLaunch;
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor,
      accessPolicyMaxWindowSize;
  size_t reservedSharedMemPerBlock;
  int hostRegisterSupported, sparseCudaArraySupported, hostRegisterReadOnlySupported,
      timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported,
      gpuDirectRDMAFlushWritesOptions, gpuDirectRDMAWritesOrdering, memoryPoolSupportedHandleTypes,
      deferredMappingCudaArraySupported, ipcEventSupported, clusterLaunch, unifiedFunctionPointers;
  int reserved[63];
};
struct cudaFuncAttributes {
  size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
  int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, cacheModeCA, maxDynamicSharedSizeBytes,
      preferredShmemCarveout;
};
struct cudaPointerAttributes { cudaMemoryType type; int device; void* devicePointer; void* hostPointer; };
struct cudaPitchedPtr { void* ptr; size_t pitch, xsize, ysize; };
struct cudaExtent { size_t width, height, depth; };
struct cudaPos { size_t x, y, z; };
inline cudaPitchedPtr make_cudaPitchedPtr(void* d, size_t p, size_t xs, size_t ys) { return {d, p, xs, ys}; }
inline cudaExtent make_cudaExtent(size_t w, size_t h, size_t d) { return {w, h, d}; }
inline cudaPos make_cudaPos(size_t x, size_t y, size_t z) { return {x, y, z}; }
typedef void (*cudaStreamCallback_t)(cudaStream_t, cudaError_t, void*);
typedef void (*cudaHostFn_t)(void*);
// texture / surface / array types: declared so that programs compile; using them stops the run
typedef unsigned long long cudaTextureObject_t;
typedef unsigned long long cudaSurfaceObject_t;
struct cudaArray;
typedef cudaArray* cudaArray_t;
typedef const cudaArray* cudaArray_const_t;
struct cudaMipmappedArray;
typedef cudaMipmappedArray* cudaMipmappedArray_t;
enum cudaChannelFormatKind { cudaChannelFormatKindSigned = 0, cudaChannelFormatKindUnsigned = 1,
                             cudaChannelFormatKindFloat = 2, cudaChannelFormatKindNone = 3 };
struct cudaChannelFormatDesc { int x, y, z, w; cudaChannelFormatKind f; };
enum cudaTextureAddressMode { cudaAddressModeWrap = 0, cudaAddressModeClamp = 1, cudaAddressModeMirror = 2,
                              cudaAddressModeBorder = 3 };
enum cudaTextureFilterMode { cudaFilterModePoint = 0, cudaFilterModeLinear = 1 };
enum cudaTextureReadMode { cudaReadModeElementType = 0, cudaReadModeNormalizedFloat = 1 };
enum cudaResourceType { cudaResourceTypeArray = 0, cudaResourceTypeMipmappedArray = 1,
                        cudaResourceTypeLinear = 2, cudaResourceTypePitch2D = 3 };
struct cudaResourceDesc {
  cudaResourceType resType;
  union {
    struct { cudaArray_t array; } array;
    struct { cudaMipmappedArray_t mipmap; } mipmap;
    struct { void* devPtr; cudaChannelFormatDesc desc; size_t sizeInBytes; } linear;
    struct { void* devPtr; cudaChannelFormatDesc desc; size_t width, height, pitchInBytes; } pitch2D;
  } res;
};
struct cudaTextureDesc {
  cudaTextureAddressMode addressMode[3];
  cudaTextureFilterMode filterMode;
  cudaTextureReadMode readMode;
  int sRGB;
  float borderColor[4];
  int normalizedCoords;
  unsigned maxAnisotropy;
  cudaTextureFilterMode mipmapFilterMode;
  float mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp;
  int disableTrilinearOptimization, seamlessCubemap;
};
template <class T, int dim = 1, cudaTextureReadMode mode = cudaReadModeElementType> struct texture {
  int normalized;
  cudaTextureFilterMode filterMode;
  cudaTextureAddressMode addressMode[3];
  cudaChannelFormatDesc channelDesc;
};
struct CUgraph_st;
typedef CUgraph_st* cudaGraph_t;
struct CUgraphExec_st;
typedef CUgraphExec_st* cudaGraphExec_t;
struct CUgraphNode_st;
typedef CUgraphNode_st* cudaGraphNode_t;
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
                             cudaStreamCaptureModeRelaxed = 2 };
enum cudaSurfaceBoundaryMode { cudaBoundaryModeZero = 0, cudaBoundaryModeClamp = 1, cudaBoundaryModeTrap = 2 };
struct cudaMemcpy3DParms {
  cudaArray_t srcArray; cudaPos srcPos; cudaPitchedPtr srcPtr; cudaArray_t dstArray; cudaPos dstPos;
  cudaPitchedPtr dstPtr; cudaExtent extent; cudaMemcpyKind kind;
};
enum cudaAccessProperty { cudaAccessPropertyNormal = 0, cudaAccessPropertyStreaming = 1, cudaAccessPropertyPersisting = 2 };
struct cudaAccessPolicyWindow { void* base_ptr; size_t num_bytes; float hitRatio; cudaAccessProperty hitProp, missProp; };
union cudaStreamAttrValue { cudaAccessPolicyWindow accessPolicyWindow; int syncPolicy; };
typedef cudaStreamAttrValue cudaKernelNodeAttrValue;
enum cudaStreamAttrID { cudaStreamAttributeAccessPolicyWindow = 1, cudaStreamAttributeSynchronizationPolicy = 3 };
struct cudaIpcMemHandle_t { char reserved[64]; };
struct cudaIpcEventHandle_t { char reserved[64]; };

namespace ksim_host {

// ------------------------------------------------------------------------------------------------
// The capture's state: allocations, output files, budgets
// ------------------------------------------------------------------------------------------------
enum Mem { M_DEVICE = 0, M_MANAGED = 1, M_HOST = 2, M_SYMBOL = 3 };
static const char* const MEM_NAMES[] = {"device", "managed", "host_mapped", "symbol"};
struct Alloc {
  char* ptr;
  size_t n;
  int id;
  int mem;
  char* map_base;
  size_t map_len;
  std::string name;  // symbols
};

struct State {
  std::map<uintptr_t, Alloc> allocs;  // by start address
  std::vector<Alloc> symbols;
  int next_id = 0;
  std::string dir;
  FILE* log = nullptr;
  long long byte_budget = 64ll << 20, bytes_used = 0;
  int max_per_kernel = 4;
  int skip_after = 8;  // launches of a kernel run before a benchmark loop may be fast-forwarded
  long long skipped = 0;
  double t0 = 0, timeout_s = 0;
  long long launches = 0;
  std::map<std::string, int> recorded_of, count_of;
  std::map<std::string, int> usable_of;  // launches recorded with their contents, per kernel
  std::set<std::string> signatures;
  // launches run without being recorded (or too large to be) that took a while, by signature: a benchmark
  // loop repeating one of them is fast-forwarded sooner
  std::map<std::string, bool> slow_repeats;
  std::map<std::string, int> ran_of;   // launches of a kernel run before its benchmark loop was fast-forwarded
  // a run that capture.py may repeat at smaller sizes (capture_scale.py): the first launch of a kernel that
  // is over the byte budget, or runs longer than slow_s, stops the program (stop_for_scaling)
  bool stop_oversize = false;
  double slow_s = 0;
  bool launch_stoppable = false;  // the running launch is its kernel's first one with contents
  double launch_t0 = 0;
  long long blocks_done = 0, blocks_total = 0;
  std::string launch_desc;  // the running launch's record, for a stop
  cudaError_t last_error = cudaSuccess;
  size_t device_bytes = 0, device_limit = 8ull << 30;
  std::set<std::string> noted;
  char* fault_text = nullptr;
  char* current = nullptr;  // the running launch (JSON), a shared file page: read after a crash or a kill
  // fiber resources kept between launches
  int fiber_cap = 0;
  char* dyn_base = nullptr;
  size_t dyn_len = 0, dyn_cap = 0;
  void (*invoke)(void*) = nullptr;
  void* thunk = nullptr;
  bool in_kernel = false;
  std::string kernel_name;
};
State& st();

inline double now_s() {
  using namespace std::chrono;
  return duration_cast<duration<double>>(steady_clock::now().time_since_epoch()).count();
}

// A launch's cost is the CPU time of the thread that runs it (a kernel runs on the thread that launched it), not
// wall time: on a loaded machine wall time grows with the load, and whether a launch is "too slow to check"
// (slow_s) must not depend on what else the machine runs.
inline double cpu_s() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

inline std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += (char)c; }
    else if (c < 0x20 || c >= 0x7f) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += (char)c;
  }
  return o + "\"";
}

constexpr size_t CURRENT_BYTES = 1 << 16;
void write_counts();
inline void log_line(const std::string& s) {
  State& S = st();
  if (!S.log) return;
  fputs(s.c_str(), S.log);
  fputc('\n', S.log);
  fflush(S.log);
}

// launches run per kernel, written when the program ends (normally, at a budget, or crashing)
inline void write_counts() {
  State& S = st();
  std::string o = "{\"ev\":\"counts\",\"counts\":{";
  bool first = true;
  for (auto& kv : S.count_of) { o += (first ? "" : ",") + jstr(kv.first) + ":" + std::to_string(kv.second); first = false; }
  log_line(o + "}}");
}

// A note for the capture (kind: stubbed, skipped, gpu_only, limit, program, include); each (kind, message,
// line) is written once.
inline void note(const char* kind, const std::string& msg, const char* file = nullptr, int line = 0) {
  State& S = st();
  std::string key = std::string(kind) + msg + (file ? file : "") + std::to_string(line);
  if (!S.noted.insert(key).second) return;
  log_line("{\"ev\":\"note\",\"kind\":" + jstr(kind) + ",\"message\":" + jstr(msg) + ",\"file\":" +
           (file ? jstr(file) : std::string("null")) + ",\"line\":" + (line ? std::to_string(line) : "null") + "}");
}

// Stops the program: something only a GPU (or a library not emulated) can do.
[[noreturn]] inline void stop(const char* kind, const std::string& msg, const char* file = nullptr, int line = 0) {
  note(kind, msg, file, line);
  log_line("{\"ev\":\"stop\",\"kind\":" + jstr(kind) + ",\"message\":" + jstr(msg) + ",\"file\":" +
           (file ? jstr(file) : std::string("null")) + ",\"line\":" + (line ? std::to_string(line) : "null") + "}");
  write_counts();
  fflush(stdout);
  fflush(stderr);
  _exit(3);
}
[[noreturn]] inline void gpu_only(const char* what, const char* file, int line) {
  stop("gpu_only", std::string(what) + " only runs on a GPU: the CPU capture stops here", file, line);
}
inline int stub(const char* what, const char* file, int line) {
  note("stubbed", std::string(what) + " was not run (library call stubbed; results it would write are not computed)",
       file, line);
  return 0;
}

// Guard-paged memory: the block ends where a PROT_NONE region begins, so overruns fault.
inline void* map_alloc(size_t n, int mem, const char* what) {
  State& S = st();
  if (mem == M_DEVICE || mem == M_MANAGED) {
    if (S.device_bytes + n > S.device_limit) return nullptr;
    S.device_bytes += n;
  }
  size_t ps = (size_t)sysconf(_SC_PAGESIZE), guard = 64 * 1024;
  size_t rounded = (n + 15) / 16 * 16;
  size_t data = (rounded + ps - 1) / ps * ps;
  if (!data) data = ps;
  char* base = (char*)mmap(nullptr, data + guard, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  mprotect(base + data, guard, PROT_NONE);
  char* p = base + data - rounded;
  Alloc a{p, n, S.next_id++, mem, base, data + guard, what ? what : ""};
  S.allocs[(uintptr_t)p] = a;
  return p;
}
inline bool free_alloc(void* p) {
  State& S = st();
  auto it = S.allocs.find((uintptr_t)p);
  if (it == S.allocs.end() || it->second.mem == M_SYMBOL) return false;
  if (it->second.mem == M_DEVICE || it->second.mem == M_MANAGED) S.device_bytes -= it->second.n;
  munmap(it->second.map_base, it->second.map_len);
  S.allocs.erase(it);
  return true;
}
inline const Alloc* find_alloc(const void* p) {
  State& S = st();
  if (!p || S.allocs.empty()) return nullptr;
  auto it = S.allocs.upper_bound((uintptr_t)p);
  if (it == S.allocs.begin()) return nullptr;
  --it;
  const Alloc& a = it->second;
  if ((uintptr_t)p <= (uintptr_t)a.ptr + a.n) return &a;
  return nullptr;
}
// __device__ / __constant__ variables of the file (registered by code the Python side appends)
struct SymReg {
  SymReg(const char* name, void* p, size_t n) {
    State& S = st();
    Alloc a{(char*)p, n, S.next_id++, M_SYMBOL, nullptr, 0, name};
    S.allocs[(uintptr_t)p] = a;
    S.symbols.push_back(a);
  }
};

// ------------------------------------------------------------------------------------------------
// .npy files and argument descriptions
// ------------------------------------------------------------------------------------------------
inline bool write_npy(const std::string& name, const char* descr, size_t itemsize, const void* data, size_t nbytes) {
  State& S = st();
  size_t count = itemsize ? nbytes / itemsize : 0;
  std::string hdr = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" +
                    std::to_string(count) + ",), }";
  size_t total = 10 + hdr.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  hdr += std::string(pad, ' ') + "\n";
  FILE* f = fopen((S.dir + "/" + name).c_str(), "wb");
  if (!f) return false;
  unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
  magic[8] = (unsigned char)(hdr.size() & 0xff);
  magic[9] = (unsigned char)(hdr.size() >> 8);
  fwrite(magic, 1, 10, f);
  fwrite(hdr.data(), 1, hdr.size(), f);
  fwrite(data, 1, count * itemsize, f);
  fclose(f);
  return true;
}

template <class T> struct dtype_of { static constexpr const char* name = nullptr; static constexpr const char* descr = "|u1"; static constexpr size_t item = 1; };
#define KSIM_DT(T, n, d, s) \
  template <> struct dtype_of<T> { static constexpr const char* name = n; static constexpr const char* descr = d; static constexpr size_t item = s; };
KSIM_DT(float, "float32", "<f4", 4)
KSIM_DT(double, "float64", "<f8", 8)
KSIM_DT(__half, "float16", "<f2", 2)
KSIM_DT(__nv_bfloat16, "bfloat16", "<u2", 2)
KSIM_DT(bool, "bool", "|b1", 1)
KSIM_DT(char, "int8", "|i1", 1)
KSIM_DT(signed char, "int8", "|i1", 1)
KSIM_DT(unsigned char, "uint8", "|u1", 1)
KSIM_DT(short, "int16", "<i2", 2)
KSIM_DT(unsigned short, "uint16", "<u2", 2)
KSIM_DT(int, "int32", "<i4", 4)
KSIM_DT(unsigned, "uint32", "<u4", 4)
KSIM_DT(long, "int64", "<i8", 8)
KSIM_DT(unsigned long, "uint64", "<u8", 8)
KSIM_DT(long long, "int64", "<i8", 8)
KSIM_DT(unsigned long long, "uint64", "<u8", 8)
#undef KSIM_DT
template <class T, int N> struct dtype_of<ksim::vec<T, N>> : dtype_of<T> {};

template <class U> inline void pointee_dtype(const char** name, const char** descr, size_t* item, size_t* elem) {
  using V = std::remove_cv_t<U>;
  if constexpr (std::is_void<V>::value) {
    *name = "uint8"; *descr = "|u1"; *item = 1; *elem = 1;
  } else if constexpr (std::is_pointer<V>::value) {
    *name = "uint64"; *descr = "<u8"; *item = 8; *elem = sizeof(V);
  } else if constexpr (std::is_enum<V>::value) {
    pointee_dtype<std::underlying_type_t<V>>(name, descr, item, elem);
  } else if constexpr (dtype_of<V>::name != nullptr) {
    *name = dtype_of<V>::name; *descr = dtype_of<V>::descr; *item = dtype_of<V>::item; *elem = sizeof(V);
  } else {
    *name = "uint8"; *descr = "|u1"; *item = 1; *elem = sizeof(V);  // a struct: its bytes
  }
}

template <class T> inline std::string type_name() {
  int status = 0;
  char* d = abi::__cxa_demangle(typeid(T).name(), nullptr, nullptr, &status);
  std::string s = d && status == 0 ? d : typeid(T).name();
  free(d);
  std::string r;
  for (size_t i = 0; i < s.size(); i++) {  // ksim's spelling of CUDA's types
    if (s.compare(i, 13, "ksim::cu16<0>") == 0) { r += "__half"; i += 12; }
    else if (s.compare(i, 13, "ksim::cu16<1>") == 0) { r += "__nv_bfloat16"; i += 12; }
    else r += s[i];
  }
  return r;
}

// a launch's template arguments as the instantiation sees them: reduce7<T, 256> in a host template -> "int", "256"
template <class T> inline std::string targ(const char*) { return type_name<T>(); }
template <auto V> inline std::string targ(const char* text) {
  using D = decltype(V);
  if constexpr (std::is_same<D, bool>::value) return V ? "true" : "false";
  else if constexpr (std::is_integral<D>::value) return std::to_string(V);
  else if constexpr (std::is_enum<D>::value) return std::to_string((long long)V);
  else if constexpr (std::is_pointer<D>::value && std::is_function<std::remove_pointer_t<D>>::value) {
    // a function as the argument (template <fn_ptr F>): marked by its code offset, named by capture.py
    char b[64];
    snprintf(b, sizeof b, "fnarg@fn=0x%lx", (unsigned long)ksim::code_offset((uintptr_t)V));
    return b;
  }
  else return text;
}
inline std::string join_targs(std::initializer_list<std::string> l) {
  std::string o;
  for (auto& x : l) o += (o.empty() ? "" : ", ") + x;
  return o;
}

struct ArgInfo {
  std::string ctype, kind;  // buffer, scalar, struct, null, unknown_pointer
  std::string value = "null", raw_hex;
  const void* ptr = nullptr;
  const char *dtype = nullptr, *descr = nullptr;
  size_t item = 1, elem = 1;
  const Alloc* alloc = nullptr;
  std::vector<char> before;
  std::string before_file, after_file;
  // a pointer inside its allocation (d_in + R): the allocation's bytes before it (the kernel may read them at
  // negative indices), recorded where they are whole elements and fit the byte budget
  std::vector<char> head;
  std::string head_file, head_after_file;
  bool written = false;
  // a struct (by value, or the first one a buffer holds) whose 8-byte words hold addresses of allocations: the
  // buffers it points to ((byte offset in the struct, address)), recorded as arguments of their own (of_arg, at)
  std::vector<std::pair<size_t, const void*>> inner;
  int of_arg = -1;
  size_t at = 0;
};

// the 8-byte-aligned words of a struct's bytes that hold the address of an allocation (a pointer field)
inline void embedded_pointers(const void* obj, size_t n, std::vector<std::pair<size_t, const void*>>& out) {
  if (n < sizeof(void*) || n > 4096) return;
  for (size_t off = 0; off + sizeof(void*) <= n; off += sizeof(void*)) {
    const void* p;
    memcpy(&p, (const char*)obj + off, sizeof p);
    if (p && find_alloc(p)) out.push_back({off, p});
  }
}

template <class T> inline ArgInfo describe(const T& v) {
  ArgInfo a;
  a.ctype = type_name<T>();
  if constexpr (std::is_pointer<T>::value) {
    a.ptr = (const void*)v;
    pointee_dtype<std::remove_pointer_t<T>>(&a.dtype, &a.descr, &a.item, &a.elem);
    if (!v) { a.kind = "null"; return a; }
    a.alloc = find_alloc((const void*)v);
    a.kind = a.alloc ? "buffer" : "unknown_pointer";
    using E = std::remove_cv_t<std::remove_pointer_t<T>>;
    if constexpr (std::is_class<E>::value && !std::is_polymorphic<E>::value)
      if (a.alloc && (size_t)(a.alloc->ptr + a.alloc->n - (const char*)v) >= sizeof(E))
        embedded_pointers((const void*)v, sizeof(E), a.inner);
  } else if constexpr (std::is_same<T, bool>::value) {
    a.kind = "scalar"; a.value = v ? "true" : "false";
  } else if constexpr (std::is_enum<T>::value) {
    a.kind = "scalar"; a.value = std::to_string((long long)v);
  } else if constexpr (std::is_integral<T>::value) {
    a.kind = "scalar";
    a.value = std::is_signed<T>::value ? std::to_string((long long)v) : std::to_string((unsigned long long)v);
  } else if constexpr (std::is_floating_point<T>::value || std::is_same<T, __half>::value ||
                       std::is_same<T, __nv_bfloat16>::value) {
    a.kind = "scalar";
    double d = (double)(float)v;
    if constexpr (std::is_floating_point<T>::value) d = (double)v;
    char b[40];
    if (std::isfinite(d)) snprintf(b, sizeof b, "%.17g", d), a.value = b;
    else a.value = std::isnan(d) ? "NaN" : (d > 0 ? "Infinity" : "-Infinity");   // JSON constants json.loads reads
    if (a.value.find_first_of(".enNI") == std::string::npos) a.value += ".0";
  } else {
    a.kind = "struct";
    if constexpr (!std::is_polymorphic<T>::value) embedded_pointers((const void*)&v, sizeof(T), a.inner);
    const unsigned char* p = (const unsigned char*)&v;
    static const char* hx = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(T); i++) { a.raw_hex += hx[p[i] >> 4]; a.raw_hex += hx[p[i] & 15]; }
  }
  return a;
}

template <class Tup, size_t... I> inline std::vector<ArgInfo> describe_all(const Tup& t, std::index_sequence<I...>) {
  std::vector<ArgInfo> out{describe(std::get<I>(t))...};
  size_t n = out.size();
  for (size_t i = 0; i < n; i++)   // the buffers structs point to, after the parameters (of_arg, at)
    for (auto& [off, p] : std::vector<std::pair<size_t, const void*>>(out[i].inner)) {
      ArgInfo e;
      e.ctype = "void*";
      e.kind = "buffer";
      e.ptr = p;
      e.alloc = find_alloc(p);
      e.dtype = "uint8"; e.descr = "|u1"; e.item = 1; e.elem = 1;
      e.of_arg = (int)i;
      e.at = off;
      out.push_back(e);
    }
  return out;
}

// The program stops at a launch too big (bytes) or too slow to record: capture.py runs it again at smaller sizes
[[noreturn]] inline void stop_for_scaling(const char* why) {
  State& S = st();
  char num[96];
  snprintf(num, sizeof num, ",\"seconds\":%.3f,\"done\":%lld,\"total\":%lld", cpu_s() - S.launch_t0, S.blocks_done,
           S.blocks_total);
  log_line("{\"ev\":\"stop\",\"kind\":" + jstr(why) + ",\"message\":\"stopped to run at smaller sizes\",\"file\":null,"
           "\"line\":null,\"launch\":" + S.launch_desc + num + "}");
  write_counts();
  fflush(stdout);
  fflush(stderr);
  _exit(3);
}

// ------------------------------------------------------------------------------------------------
// Running a grid in this process (ksim.h's scheduler, without its fork)
// ------------------------------------------------------------------------------------------------
inline void on_signal(int sig, siginfo_t* si, void* uc) {
  write_counts();
  if (st().in_kernel && ksim::cur) {
    // which allocation the address is next to (ksim's message, at offset 0, names the kernel line)
    uintptr_t a = si ? (uintptr_t)si->si_addr : 0;
    const Alloc* best = nullptr;
    for (auto& kv : st().allocs)
      if (kv.first <= a) best = &kv.second;
    if (best && st().fault_text) {
      uintptr_t end = (uintptr_t)best->ptr + best->n;
      if (a >= end && a - end < (1u << 20))
        snprintf(st().fault_text + 3072, 1000, "the address is %lu bytes past the end of allocation #%d (%zu bytes)",
                 (unsigned long)(a - end), best->id, best->n);
    }
    ksim::on_fault(sig, si, uc);  // names the kernel line; exits
  }
  uintptr_t pc = 0;
#if defined(__x86_64__) && defined(__linux__)
  pc = (uintptr_t)((ucontext_t*)uc)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__) && defined(__linux__)
  pc = (uintptr_t)((ucontext_t*)uc)->uc_mcontext.pc;
#endif
  if (st().fault_text)
    snprintf(st().fault_text, 3000, "%s in host code%s%s, address %p [pc_offset=0x%lx]",
             sig == SIGSEGV ? "memory fault" : sig == SIGBUS ? "bus error" : sig == SIGFPE ? "arithmetic fault" : "signal",
             st().in_kernel ? " during kernel " : "", st().in_kernel ? st().kernel_name.c_str() : "",
             si ? si->si_addr : nullptr, (unsigned long)ksim::code_offset(pc));
  _exit(4);
}
inline void on_alarm(int) {
  write_counts();
  const char* m = "{\"ev\":\"stop\",\"kind\":\"limit\",\"message\":\"time budget\"}\n";
  if (st().log) { fflush(st().log); (void)!write(fileno(st().log), m, strlen(m)); }
  fflush(stdout);
  _exit(124);
}

inline void ensure_fibers(int n) {
  State& S = st();
  if (n <= S.fiber_cap) return;
  size_t ps = (size_t)sysconf(_SC_PAGESIZE);
  size_t stack_kb = 256;
  if (const char* e = getenv("KSEARCH_SIM_STACK_KB")) stack_kb = (size_t)std::max(16L, atol(e));
  ksim::g.stack_size = stack_kb * 1024;
  ksim::g.stack_stride = ksim::g.stack_size + ps;
  char* s = (char*)mmap(nullptr, ksim::g.stack_stride * n + ps, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s == MAP_FAILED) stop("limit", "cannot map fiber stacks");
  for (int i = 0; i < n; i++) mprotect(s + (size_t)i * ksim::g.stack_stride, ps, PROT_NONE);
  ksim::g.stacks = s + ps;
  ksim::g.max_fibers = n;
  free(ksim::g.fibers);
  free(ksim::g.order);
  free(ksim::g.warps);
  ksim::g.fibers = (ksim::Fiber*)calloc((size_t)n, sizeof(ksim::Fiber));
  ksim::g.order = (int*)calloc((size_t)n + ksim::WARP, sizeof(int));
  ksim::g.warps = (ksim::Warp*)calloc((size_t)(n + ksim::WARP - 1) / ksim::WARP, sizeof(ksim::Warp));
  S.fiber_cap = n;
}

inline void trampoline() { st().invoke(st().thunk); }

inline void run_grid_here(dim3 grid, dim3 block, size_t smem) {
  State& S = st();
  int n = (int)(block.x * block.y * block.z);
  ensure_fibers(n);
  if (smem > S.dyn_cap) {
    if (S.dyn_base) munmap(S.dyn_base, S.dyn_len);
    size_t tot = 0;
    ksim::g.dyn_smem = (char*)ksim::map_guarded(smem, &tot);
    S.dyn_len = tot;
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    size_t data = (smem + ps - 1) / ps * ps;
    S.dyn_base = ksim::g.dyn_smem + ((smem + 15) / 16 * 16) - data;
    S.dyn_cap = smem;
  }
  auto& g = ksim::g;
  g.entry = trampoline;
  g.nblocks = ksim::u3(grid.x, grid.y, grid.z);
  g.tg_req = ksim::u3(block.x, block.y, block.z);
  g.total = ksim::u3(grid.x * block.x, grid.y * block.y, grid.z * block.z);
  g.partial = 0;
  g.dyn_smem_size = smem;
  g.reverse = 0;
  g.lenient = 1;  // threads that returned count as arrived at barriers, as on NVIDIA hardware
  S.in_kernel = true;
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        g.block = ksim::u3(bx, by, bz);
        g.bdim = g.tg_req;
        g.n = n;
        ksim::run_block();
        S.blocks_done++;
        if (S.launch_stoppable && cpu_s() - S.launch_t0 > S.slow_s) {
          S.in_kernel = false;
          stop_for_scaling("slow");
        }
      }
  S.in_kernel = false;
}

// ------------------------------------------------------------------------------------------------
// CUDA graphs by stream capture: between cudaStreamBeginCapture and cudaStreamEndCapture, the launches, async
// copies/memsets and host functions issued to the stream (and to streams that joined it by waiting on an event
// recorded in it) are kept in order instead of run; cudaGraphLaunch runs them, each launch recorded as usual.
// Serialised issue order is a valid order of the graph's dependencies.
// ------------------------------------------------------------------------------------------------
struct GraphOp { std::string what; std::function<void()> run; };
struct Graph { std::vector<GraphOp> ops; cudaStream_t origin = nullptr; };
inline std::map<cudaStream_t, Graph*>& capturing() { static std::map<cudaStream_t, Graph*> m; return m; }
inline std::map<const void*, Graph*>& event_graph() { static std::map<const void*, Graph*> m; return m; }
inline Graph* capture_of(cudaStream_t s) {
  auto& m = capturing();
  if (m.empty()) return nullptr;
  auto it = m.find(s);
  return it == m.end() ? nullptr : it->second;
}
// an operation issued to a capturing stream is kept for the graph (true), else the caller runs it now
inline bool captured(cudaStream_t s, const std::string& what, std::function<void()> run) {
  Graph* g = capture_of(s);
  if (!g) return false;
  g->ops.push_back(GraphOp{what, std::move(run)});
  return true;
}

// ------------------------------------------------------------------------------------------------
// Launches
// ------------------------------------------------------------------------------------------------
struct Site { const char* kernel; const char* targs; const char* file; int line; };
struct Cfg { dim3 grid, block; size_t smem; cudaStream_t stream; };
inline Cfg cfg(dim3 g, dim3 b, size_t smem = 0, cudaStream_t s = 0) { return Cfg{g, b, smem, s}; }

inline std::string dim_json(dim3 d) {
  return "[" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + "]";
}

inline std::string launch_json(long long index, const Site& s, const Cfg& c, std::vector<ArgInfo>& args,
                               bool recorded, bool too_large, const std::vector<std::pair<std::string, std::string>>& syms) {
  std::string o = "{\"index\":" + std::to_string(index) + ",\"kernel\":" + jstr(s.kernel) + ",\"targs\":" +
                  jstr(s.targs) + ",\"file\":" + jstr(s.file) + ",\"line\":" + std::to_string(s.line) +
                  ",\"grid\":" + dim_json(c.grid) + ",\"block\":" + dim_json(c.block) +
                  ",\"shared_mem\":" + std::to_string(c.smem) + ",\"recorded\":" + (recorded ? "true" : "false") +
                  ",\"too_large\":" + (too_large ? "true" : "false") + ",\"args\":[";
  for (size_t i = 0; i < args.size(); i++) {
    ArgInfo& a = args[i];
    if (i) o += ",";
    o += "{\"ctype\":" + jstr(a.ctype) + ",\"kind\":" + jstr(a.kind);
    if (a.of_arg >= 0) o += ",\"of_arg\":" + std::to_string(a.of_arg) + ",\"at\":" + std::to_string(a.at);
    if (a.kind == "scalar") o += ",\"value\":" + a.value;
    if (a.kind == "struct") o += ",\"raw_hex\":" + jstr(a.raw_hex);
    if (a.dtype && (a.kind == "buffer" || a.kind == "unknown_pointer" || a.kind == "null")) {
      o += ",\"dtype\":" + jstr(a.dtype) + ",\"elem_bytes\":" + std::to_string(a.elem);
    }
    if (a.alloc) {
      size_t off = (const char*)a.ptr - a.alloc->ptr;
      o += ",\"buffer\":" + std::to_string(a.alloc->id) + ",\"offset_bytes\":" + std::to_string(off) +
           ",\"nbytes\":" + std::to_string(a.alloc->n - off) + ",\"memory\":" + jstr(MEM_NAMES[a.alloc->mem]);
      if (a.alloc->mem == M_SYMBOL) o += ",\"symbol\":" + jstr(a.alloc->name);
    }
    if (!a.before_file.empty()) o += ",\"before\":" + jstr(a.before_file);
    if (!a.after_file.empty()) o += ",\"after\":" + jstr(a.after_file);
    if (!a.head_file.empty()) o += ",\"head\":" + jstr(a.head_file);
    if (!a.head_after_file.empty()) o += ",\"head_after\":" + jstr(a.head_after_file);
    o += std::string(",\"written\":") + (a.written ? "true" : "false") + "}";
  }
  o += "],\"symbols\":[";
  for (size_t i = 0; i < syms.size(); i++) o += (i ? "," : "") + syms[i].second;
  return o + "]}";
}

// called after each launch's grid has run (ksim_tex.h: the surfaces the launch wrote), with the launch's index
inline void (*&launch_end_hook())(long long) { static void (*h)(long long) = nullptr; return h; }

// set while a launch's grid runs: one flag for every kernel (a function-local static in run_launch would be one per
// instantiation, and a launch inside a kernel is another instantiation)
inline thread_local bool this_thread_in_kernel = false;

template <class Tup, class Invoke>
inline void run_launch(const Site& s, const Cfg& c, Tup& args, Invoke inv) {
  State& S = st();
  if (this_thread_in_kernel)
    gpu_only((std::string("dynamic parallelism (a launch of ") + s.kernel + " inside a kernel)").c_str(), s.file, s.line);
  static std::mutex one_launch_at_a_time;  // host threads launching at once: launches run one after another
  std::lock_guard<std::mutex> hold(one_launch_at_a_time);
  if (c.stream == cudaStreamPerThread || c.stream == cudaStreamLegacy || c.stream) {}  // serialised: no-op
  unsigned long long nt = (unsigned long long)c.block.x * c.block.y * c.block.z;
  if (nt == 0 || nt > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
      c.grid.y > 65535 || c.grid.z > 65535 || c.smem > 232448) {
    S.last_error = c.smem > 232448 ? cudaErrorLaunchOutOfResources : cudaErrorInvalidConfiguration;
    note("program", std::string("launch of ") + s.kernel + " with grid " + dim_json(c.grid) + ", block " +
         dim_json(c.block) + ", shared memory " + std::to_string(c.smem) +
         " bytes is invalid on the device: not run (cudaGetLastError reports it)", s.file, s.line);
    return;
  }
  std::string kname = std::string(s.kernel) + (s.targs[0] ? "<" + std::string(s.targs) + ">" : "");
  int& nrec = S.recorded_of[kname];
  long long index = S.launches;
  std::vector<ArgInfo> infos = describe_all(args, std::make_index_sequence<std::tuple_size<Tup>::value>{});
  std::string sig = std::string(s.kernel) + "|" + s.targs + dim_json(c.grid) + dim_json(c.block);
  for (auto& a : infos) if (a.kind == "scalar") sig += "|" + a.value;
  // a benchmark loop: once a kernel has run skip_after times and the run has taken a few seconds (a quarter of
  // the time budget at most), its further launches are not run (counted only) unless they bring a geometry or
  // scalars not seen yet and it has no launch recorded with contents: the program reaches its other kernels, and
  // a program run once per kernel-choosing option stays quick
  auto slow = S.slow_repeats.find(sig);
  bool slow_repeat = slow != S.slow_repeats.end() && slow->second && S.count_of[kname] >= 2;
  if (S.skip_after > 0 && (S.count_of[kname] >= S.skip_after || slow_repeat) && S.timeout_s > 0 &&
      now_s() - S.t0 > std::min(0.25 * S.timeout_s, 4.0) &&
      (S.usable_of[kname] >= 1 || nrec >= S.max_per_kernel || S.signatures.count(sig))) {
    int ran = S.ran_of.emplace(kname, S.count_of[kname]).first->second;   // launches run before the first skip
    S.count_of[kname]++;
    S.skipped++;
    note("skipped", "launches of " + kname + " after its first " + std::to_string(ran) +
         " were not run, to stay within the time budget (its recorded launches are kept); the program's own "
         "results after that point may be wrong", s.file, s.line);
    return;
  }
  S.launches++;
  bool is_new = S.signatures.insert(sig).second;
  bool record = nrec < 2 || (is_new && nrec < S.max_per_kernel);
  S.count_of[kname]++;
  bool too_large = false;
  std::vector<std::pair<std::string, std::string>> syms;
  std::vector<std::vector<char>> sym_before;
  long long need = 0;
  for (auto& a : infos) if (a.alloc) need += (long long)(a.alloc->n - ((const char*)a.ptr - a.alloc->ptr));
  bool first_usable = S.usable_of[kname] == 0;
  S.launch_t0 = cpu_s();
  S.blocks_done = 0;
  S.blocks_total = (long long)c.grid.x * c.grid.y * c.grid.z;
  if (S.stop_oversize && record && first_usable && 2 * need > S.byte_budget - S.bytes_used) {
    S.launch_desc = launch_json(index, s, c, infos, false, true, syms);
    stop_for_scaling("oversize");
  }
  // a kernel that already has a launch with its contents takes at most a quarter of what is left: the budget
  // stays for the kernels the program has not launched yet
  if (record && S.usable_of[kname] >= 1 && 4 * 2 * need > S.byte_budget - S.bytes_used) record = false;
  if (record) {
    nrec++;
    long long sym_need = 0;
    for (auto& sy : S.symbols) sym_need += (long long)sy.n;
    if (2 * need > S.byte_budget - S.bytes_used) too_large = true;
    else S.usable_of[kname]++;
    bool with_syms = !too_large && 2 * (need + sym_need) <= S.byte_budget - S.bytes_used;
    if (!too_large) {
      for (size_t i = 0; i < infos.size(); i++) {
        ArgInfo& a = infos[i];
        if (!a.alloc) continue;
        size_t nb = a.alloc->n - ((const char*)a.ptr - a.alloc->ptr);
        a.before.assign((const char*)a.ptr, (const char*)a.ptr + nb);
        a.before_file = "l" + std::to_string(index) + "_a" + std::to_string(i) + "_before.npy";
        write_npy(a.before_file, a.descr, a.item, a.ptr, nb);
        S.bytes_used += (long long)nb;
      }
      // interior pointers: the allocation from its start up to the pointer, while the budget allows (else as before:
      // from the pointer on only)
      for (size_t i = 0; i < infos.size(); i++) {
        ArgInfo& a = infos[i];
        if (!a.alloc || a.alloc->mem == M_SYMBOL) continue;
        size_t off = (const char*)a.ptr - a.alloc->ptr;
        if (off == 0 || off % (a.item ? a.item : 1) != 0) continue;
        if (2 * (long long)off > S.byte_budget - S.bytes_used) continue;
        a.head.assign(a.alloc->ptr, a.alloc->ptr + off);
        a.head_file = "l" + std::to_string(index) + "_a" + std::to_string(i) + "_head.npy";
        write_npy(a.head_file, a.descr, a.item, a.alloc->ptr, off);
        S.bytes_used += (long long)off;
      }
      if (with_syms)
        for (auto& sy : S.symbols) {
          sym_before.emplace_back(sy.ptr, sy.ptr + sy.n);
          std::string f = "l" + std::to_string(index) + "_s_" + sy.name + "_before.npy";
          write_npy(f, "|u1", 1, sy.ptr, sy.n);
          S.bytes_used += (long long)sy.n;
          syms.push_back({f, "{\"name\":" + jstr(sy.name) + ",\"nbytes\":" + std::to_string(sy.n) +
                                 ",\"before\":" + jstr(f) + "}"});
        }
    }
  }
  std::string begin = launch_json(index, s, c, infos, record, too_large, syms);
  if (record) log_line("{\"ev\":\"begin\",\"launch\":" + begin + "}");
  S.launch_stoppable = S.slow_s > 0 && first_usable && record && !too_large;
  if (S.launch_stoppable) S.launch_desc = begin;
  S.launch_t0 = cpu_s();
  if (S.current) {
    size_t n = std::min(begin.size(), CURRENT_BYTES - 1);
    memcpy(S.current + 1, begin.data(), n);
    S.current[1 + n] = 0;
    S.current[0] = '{';  // set last: the page holds a whole record
  }
  S.kernel_name = s.kernel;
  S.thunk = (void*)&inv;
  S.invoke = [](void* p) { (*(Invoke*)p)(); };
  auto pad_of = [](const Alloc* al) {   // the bytes between an allocation's size and its 16-byte rounding
    return std::string(al->ptr + al->n, (al->n + 15) / 16 * 16 - al->n);
  };
  std::vector<std::string> pads_before(infos.size());
  for (size_t i = 0; i < infos.size(); i++)
    if (infos[i].alloc && infos[i].alloc->mem != M_SYMBOL) pads_before[i] = pad_of(infos[i].alloc);
  this_thread_in_kernel = true;
  run_grid_here(c.grid, c.block, c.smem);
  this_thread_in_kernel = false;
  if (launch_end_hook()) launch_end_hook()(index);
  S.launch_stoppable = false;
  double seconds = cpu_s() - S.launch_t0;
  if (S.current) S.current[0] = 0;
  // writes past an allocation's requested size, into the padding up to its 16-byte rounding (no fault there, nor
  // on a GPU, whose allocator pads too): padding this launch changed. Said once per kernel and argument: a bug of
  // the program, which the ports reproduce
  static std::set<std::string> said_past_end;
  for (size_t i = 0; i < infos.size(); i++) {
    const Alloc* al = infos[i].alloc;
    if (!al || al->mem == M_SYMBOL) continue;
    std::string pad = pad_of(al);
    size_t k = 0;
    while (k < pad.size() && pad[k] == pads_before[i][k]) k++;
    if (k < pad.size() && said_past_end.insert(kname + "|" + std::to_string(i)).second)
      note("program", std::string("kernel ") + kname + " writes past the end of the allocation its argument #" +
           std::to_string(i + 1) + " points into (" + std::to_string(al->n) + " bytes allocated; byte " +
           std::to_string(al->n + k) + " changed): a bug of the program (a GPU's allocator pads allocations, so it "
           "shows nowhere); the ports reproduce what the original computed", s.file, s.line);
  }
  if (!record || too_large) S.slow_repeats[sig] = seconds > 0.5;
  if (!record) return;
  for (size_t i = 0; i < infos.size(); i++) {
    ArgInfo& a = infos[i];
    if (a.before_file.empty()) continue;
    bool head_changed = !a.head.empty() && memcmp(a.head.data(), a.alloc->ptr, a.head.size()) != 0;
    if (memcmp(a.before.data(), a.ptr, a.before.size()) != 0 || head_changed) {
      a.written = true;
      a.after_file = "l" + std::to_string(index) + "_a" + std::to_string(i) + "_after.npy";
      write_npy(a.after_file, a.descr, a.item, a.ptr, a.before.size());
      S.bytes_used += (long long)a.before.size();
    }
    if (head_changed) {   // the kernel wrote before its pointer
      a.head_after_file = "l" + std::to_string(index) + "_a" + std::to_string(i) + "_head_after.npy";
      write_npy(a.head_after_file, a.descr, a.item, a.alloc->ptr, a.head.size());
      S.bytes_used += (long long)a.head.size();
    }
    std::vector<char>().swap(a.before);
    std::vector<char>().swap(a.head);
  }
  for (size_t k = 0; k < sym_before.size(); k++) {
    const Alloc& sy = S.symbols[k];
    if (memcmp(sym_before[k].data(), sy.ptr, sy.n) != 0) {
      std::string f = "l" + std::to_string(index) + "_s_" + sy.name + "_after.npy";
      write_npy(f, "|u1", 1, sy.ptr, sy.n);
      S.bytes_used += (long long)sy.n;
      syms[k].second.pop_back();
      syms[k].second += ",\"after\":" + jstr(f) + ",\"written\":true}";
    }
  }
  std::string end = launch_json(index, s, c, infos, true, too_large, syms);
  char secs[48];
  snprintf(secs, sizeof secs, ",\"seconds\":%.4f}", seconds);
  end.pop_back();
  log_line("{\"ev\":\"end\",\"launch\":" + end + secs + "}");
}

// a launch's arguments and the call that runs the kernel on them (apply(args)); on a capturing stream the launch is
// kept, with copies of its arguments, for the graph
template <class Tup, class Apply>
inline void launch_tuple(const Site& s, const Cfg& c, Tup& args, Apply apply) {
  if (capture_of(c.stream)) {
    if constexpr (std::is_copy_constructible<Tup>::value) {
      auto kept = std::make_shared<Tup>(args);
      std::string kernel = s.kernel, targs = s.targs;   // (the site's text may be a temporary)
      const char* file = s.file;
      int line = s.line;
      captured(c.stream, std::string("launch of ") + s.kernel, [kernel, targs, file, line, c, kept, apply]() {
        Site rs{kernel.c_str(), targs.c_str(), file, line};
        auto inv = [&]() { apply(*kept); };
        run_launch(rs, c, *kept, inv);
      });
      return;
    } else {
      stop("gpu_only", std::string("a launch of ") + s.kernel + " captured into a CUDA graph with arguments that "
           "cannot be copied: the graph cannot be replayed on the CPU", s.file, s.line);
    }
  }
  auto inv = [&]() { apply(args); };
  run_launch(s, c, args, inv);
}

template <class F, class... A> inline void launch_g(const Site& s, const Cfg& c, F f, A&&... a);
// k<<<...>>>(args) with k's parameter types known: arguments convert to them, as in CUDA (when they
// do not, e.g. an overload or default arguments, the generic path runs the call as written).
template <class... P, class G, class... A>
inline void launch(const Site& s, const Cfg& c, void (*k)(P...), G generic, A&&... a) {
  if constexpr (sizeof...(P) == sizeof...(A) && std::is_constructible<std::tuple<std::decay_t<P>...>, A&&...>::value) {
    std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
    launch_tuple(s, c, args, [k](auto& t) { std::apply(k, t); });
  } else {
    launch_g(s, c, generic, std::forward<A>(a)...);
  }
}
// a kernel whose parameter types are not known here (deduced template arguments, overloads): the
// arguments are recorded with their own types.
template <class F, class... A>
inline void launch_g(const Site& s, const Cfg& c, F f, A&&... a) {
  std::tuple<std::decay_t<A>...> args(std::forward<A>(a)...);
  launch_tuple(s, c, args, [f](auto& t) { std::apply(f, t); });
}
// k<<<...>>>(args) where k is a function-pointer variable: the launch is named "k@fn=0x<code offset>", which
// capture.py turns into the name of the kernel it points to
inline const char* fn_site_name(const char* written, void* fn) {
  static std::map<void*, std::string> names;
  auto it = names.find(fn);
  if (it == names.end()) {
    char b[48];
    snprintf(b, sizeof b, "@fn=0x%lx", (unsigned long)ksim::code_offset((uintptr_t)fn));
    it = names.emplace(fn, std::string(written) + b).first;
  }
  return it->second.c_str();
}
template <class K, class G, class... A>
inline void launch_ptr(Site s, const Cfg& c, K k, G generic, A&&... a) {
  using D = std::decay_t<K>;
  if constexpr (std::is_pointer<D>::value && std::is_function<std::remove_pointer_t<D>>::value) {
    if (k) s.kernel = fn_site_name(s.kernel, (void*)k);
    launch(s, c, (D)k, generic, std::forward<A>(a)...);
  } else {
    launch_g(s, c, generic, std::forward<A>(a)...);
  }
}
// cudaLaunchKernel(func, grid, block, args, smem, stream): arguments through void* slots
template <class... P, size_t... I>
inline void launch_slots(const Site& s, const Cfg& c, void (*k)(P...), void** slots, std::index_sequence<I...>) {
  std::tuple<std::decay_t<P>...> args(*(std::decay_t<P>*)slots[I]...);
  launch_tuple(s, c, args, [k](auto& t) { std::apply(k, t); });
}

inline cudaDeviceProp device_prop() {
  cudaDeviceProp p;
  memset(&p, 0, sizeof p);
  snprintf(p.name, sizeof p.name, "NVIDIA H200 (ksearch CPU capture)");
  p.totalGlobalMem = 141ull << 30;
  p.sharedMemPerBlock = 48 * 1024;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.memPitch = 2147483647;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024; p.maxThreadsDim[1] = 1024; p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 2147483647; p.maxGridSize[1] = 65535; p.maxGridSize[2] = 65535;
  p.clockRate = 1980000;
  p.totalConstMem = 65536;
  p.major = 9; p.minor = 0;
  p.textureAlignment = 512; p.texturePitchAlignment = 32;
  p.deviceOverlap = 1; p.multiProcessorCount = 132; p.canMapHostMemory = 1;
  p.maxTexture1D = 131072; p.maxTexture2D[0] = 131072; p.maxTexture2D[1] = 65536;
  p.maxTexture3D[0] = p.maxTexture3D[1] = p.maxTexture3D[2] = 16384;
  p.concurrentKernels = 1; p.ECCEnabled = 1; p.pciBusID = 1; p.asyncEngineCount = 3; p.unifiedAddressing = 1;
  p.memoryClockRate = 2619000; p.memoryBusWidth = 6144; p.l2CacheSize = 50 * 1024 * 1024;
  p.persistingL2CacheMaxSize = 32 * 1024 * 1024;
  p.maxThreadsPerMultiProcessor = 2048; p.streamPrioritiesSupported = 1; p.globalL1CacheSupported = 1;
  p.localL1CacheSupported = 1; p.sharedMemPerMultiprocessor = 233472; p.regsPerMultiprocessor = 65536;
  p.managedMemory = 1; p.hostNativeAtomicSupported = 0; p.singleToDoublePrecisionPerfRatio = 2;
  p.pageableMemoryAccess = 0; p.concurrentManagedAccess = 1; p.computePreemptionSupported = 1;
  p.cooperativeLaunch = 1; p.cooperativeMultiDeviceLaunch = 1; p.sharedMemPerBlockOptin = 232448;
  p.maxBlocksPerMultiProcessor = 32; p.accessPolicyMaxWindowSize = 134213632; p.reservedSharedMemPerBlock = 1024;
  p.hostRegisterSupported = 1; p.memoryPoolsSupported = 1; p.clusterLaunch = 1;
  // a smaller device (capture_scale.device_plan): grids the program sizes from the SM count shrink with it
  if (const char* e = getenv("KSIM_CAPTURE_SMS")) {
    int n = atoi(e);
    if (n > 0) p.multiProcessorCount = n;
  }
  return p;
}

inline State& st() {
  static State* S = nullptr;
  if (S) return *S;
  S = new State();
  const char* dir = getenv("KSIM_CAPTURE_DIR");
  S->dir = dir ? dir : ".";
  if (const char* e = getenv("KSIM_CAPTURE_BUDGET")) S->byte_budget = atoll(e);
  if (const char* e = getenv("KSIM_CAPTURE_MAX_PER_KERNEL")) S->max_per_kernel = atoi(e);
  if (const char* e = getenv("KSIM_CAPTURE_SKIP_AFTER")) S->skip_after = atoi(e);
  if (const char* e = getenv("KSIM_CAPTURE_STOP_OVERSIZE")) S->stop_oversize = atoi(e) != 0;
  if (const char* e = getenv("KSIM_CAPTURE_SLOW_MS")) S->slow_s = atoll(e) / 1000.0;
  S->t0 = now_s();
  if (const char* e = getenv("KSIM_CAPTURE_DEVICE_LIMIT")) S->device_limit = (size_t)atoll(e);
  if (dir) {
    S->log = fopen((S->dir + "/launches.jsonl").c_str(), "w");
    int fd = open((S->dir + "/fault.txt").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0 && ftruncate(fd, 4096) == 0) {
      void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) S->fault_text = (char*)m;
    }
    if (fd >= 0) close(fd);
  }
  if (dir) {
    int fd = open((S->dir + "/current.json").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0 && ftruncate(fd, CURRENT_BYTES) == 0) {
      void* m = mmap(nullptr, CURRENT_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) S->current = (char*)m;
    }
    if (fd >= 0) close(fd);
    atexit(write_counts);
  }
  ksim::g.msg = S->fault_text;
  ksim::g.msglen = S->fault_text ? 3000 : 0;
  ksim::g.status = nullptr;
  static char altstack[1 << 16];
  stack_t ss;
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  ss.ss_flags = 0;
  sigaltstack(&ss, nullptr);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
  sigaction(SIGFPE, &sa, nullptr);
  if (const char* e = getenv("KSIM_CAPTURE_TIMEOUT_MS")) {
    long long ms = atoll(e);
    S->timeout_s = ms / 1000.0;
    if (ms > 0) {
      signal(SIGALRM, on_alarm);
      struct itimerval it;
      memset(&it, 0, sizeof it);
      it.it_value.tv_sec = ms / 1000;
      it.it_value.tv_usec = (ms % 1000) * 1000;
      setitimer(ITIMER_REAL, &it, nullptr);
    }
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return *S;
}
struct Init { Init() { st(); } };
#ifndef KSIM_KERNEL_ONLY  // a kernel file run without its program (ksim_cuda_host.h): no capture state at load
inline Init init_at_start;
#endif

// Input files the program could not open: the link wraps fopen (capture.py: -Wl,--wrap=fopen), and each
// failed open for reading is noted with the caller's address, so a capture that stops before its first launch
// can name the file it needed and the line that opened it.
inline int failed_opens = 0;
inline void note_failed_open(const char* path, const char* mode, void* caller) {
  if (!path || !mode || strchr(mode, 'w') || strchr(mode, 'a') || failed_opens >= 64) return;
  failed_opens++;
  char site[48];
  snprintf(site, sizeof site, " [site=0x%lx]", (unsigned long)ksim::code_offset((uintptr_t)caller));
  note("input", std::string("could not open ") + path + " for reading: " + strerror(errno) + site);
}
}  // namespace ksim_host
#ifndef KSIM_KERNEL_ONLY  // the link that wraps fopen is the capture's
extern "C" FILE* __real_fopen(const char*, const char*);
extern "C" __attribute__((used, noinline)) inline FILE* __wrap_fopen(const char* path, const char* mode) {
  FILE* f = __real_fopen(path, mode);
  if (!f) { int e = errno; ksim_host::note_failed_open(path, mode, __builtin_return_address(0)); errno = e; }
  return f;
}
extern "C" FILE* __real_fopen64(const char*, const char*);
extern "C" __attribute__((used, noinline)) inline FILE* __wrap_fopen64(const char* path, const char* mode) {
  FILE* f = __real_fopen64(path, mode);
  if (!f) { int e = errno; ksim_host::note_failed_open(path, mode, __builtin_return_address(0)); errno = e; }
  return f;
}
#endif
// time() returns one fixed instant in the capture (linked with --wrap=time): a program that seeds its data with
// the clock (`seed[i] = time(0) * i`) records the same launches on every run, so a port's verdict does not depend
// on the time of day. Elapsed-time measurements use other clocks and are unaffected.
constexpr long long KSIM_CAPTURE_EPOCH = 1700000000;   // 2023-11-14T22:13:20Z
extern "C" __attribute__((used, noinline)) inline time_t __wrap_time(time_t* t) {
  if (t) *t = (time_t)KSIM_CAPTURE_EPOCH;
  return (time_t)KSIM_CAPTURE_EPOCH;
}

// ================================================================================================
// The runtime API
// ================================================================================================
#define KSIM_OK(expr) ((void)(expr), cudaSuccess)
#define KSIM_GPU_ONLY(what) (ksim_host::gpu_only(what, __FILE__, __LINE__), cudaErrorNotSupported)
#define KSIM_STUB(what) (ksim_host::stub(what, __FILE__, __LINE__), cudaSuccess)

namespace ksim_host {
inline cudaError_t ret(cudaError_t e) { if (e != cudaSuccess) st().last_error = e; return e; }
inline cudaError_t device_malloc(void** p, size_t n, int mem) {
  if (!p) return ret(cudaErrorInvalidValue);
  *p = map_alloc(n, mem, nullptr);
  if (!*p) {
    note("limit", "an allocation of " + std::to_string(n) + " bytes is over the capture's device memory limit "
         "(KSIM_CAPTURE_DEVICE_LIMIT): cudaErrorMemoryAllocation returned; scale the program down (argv, -D)");
    return ret(cudaErrorMemoryAllocation);
  }
  return cudaSuccess;
}
}  // namespace ksim_host

template <class T> inline cudaError_t cudaMalloc(T** p, size_t n) { return ksim_host::device_malloc((void**)p, n, ksim_host::M_DEVICE); }
template <class T> inline cudaError_t cudaMallocManaged(T** p, size_t n, unsigned = cudaMemAttachGlobal) { return ksim_host::device_malloc((void**)p, n, ksim_host::M_MANAGED); }
template <class T> inline cudaError_t cudaMallocHost(T** p, size_t n, unsigned = 0) { return ksim_host::device_malloc((void**)p, n, ksim_host::M_HOST); }
template <class T> inline cudaError_t cudaHostAlloc(T** p, size_t n, unsigned) { return ksim_host::device_malloc((void**)p, n, ksim_host::M_HOST); }
template <class T> inline cudaError_t cudaMallocPitch(T** p, size_t* pitch, size_t w, size_t h) {
  size_t pt = (w + 511) / 512 * 512;
  *pitch = pt;
  return ksim_host::device_malloc((void**)p, pt * h, ksim_host::M_DEVICE);
}
inline cudaError_t cudaMalloc3D(cudaPitchedPtr* pp, cudaExtent e) {
  size_t pt = (e.width + 511) / 512 * 512;
  void* p = nullptr;
  cudaError_t r = ksim_host::device_malloc(&p, pt * e.height * e.depth, ksim_host::M_DEVICE);
  *pp = make_cudaPitchedPtr(p, pt, e.width, e.height);
  return r;
}
template <class T> inline cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
inline cudaError_t cudaFree(void* p) { if (p) ksim_host::free_alloc(p); return cudaSuccess; }
// freed inside a stream capture: a graph's free node; the memory is kept for the graph's replays
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s) { return ksim_host::capture_of(s) ? cudaSuccess : cudaFree(p); }
inline cudaError_t cudaFreeHost(void* p) { if (p) ksim_host::free_alloc(p); return cudaSuccess; }
inline cudaError_t cudaHostRegister(void*, size_t, unsigned) { return cudaSuccess; }
inline cudaError_t cudaHostUnregister(void*) { return cudaSuccess; }
template <class T> inline cudaError_t cudaHostGetDevicePointer(T** d, void* h, unsigned) { *d = (T*)h; return cudaSuccess; }
inline cudaError_t cudaHostGetFlags(unsigned* f, void*) { *f = 0; return cudaSuccess; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind = cudaMemcpyDefault) { if (n) memmove(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k = cudaMemcpyDefault, cudaStream_t st = 0) {
  if (ksim_host::captured(st, "cudaMemcpyAsync", [=]() { if (n) memmove(d, s, n); })) return cudaSuccess;
  return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemcpyPeer(void* d, int, const void* s, int, size_t n) { return cudaMemcpy(d, s, n); }
inline cudaError_t cudaMemcpyPeerAsync(void* d, int, const void* s, int, size_t n, cudaStream_t st = 0) { return cudaMemcpyAsync(d, s, n, cudaMemcpyDefault, st); }
inline cudaError_t cudaMemcpy2D(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h, cudaMemcpyKind = cudaMemcpyDefault) {
  for (size_t r = 0; r < h; r++) memmove((char*)d + r * dp, (const char*)s + r * sp, w);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h, cudaMemcpyKind k = cudaMemcpyDefault, cudaStream_t st = 0) {
  if (ksim_host::captured(st, "cudaMemcpy2DAsync", [=]() { cudaMemcpy2D(d, dp, s, sp, w, h, k); })) return cudaSuccess;
  return cudaMemcpy2D(d, dp, s, sp, w, h, k);
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) { if (n) memset(p, v, n); return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st = 0) {
  if (ksim_host::captured(st, "cudaMemsetAsync", [=]() { if (n) memset(p, v, n); })) return cudaSuccess;
  return cudaMemset(p, v, n);
}
inline cudaError_t cudaMemset2D(void* p, size_t pitch, int v, size_t w, size_t h) {
  for (size_t r = 0; r < h; r++) memset((char*)p + r * pitch, v, w);
  return cudaSuccess;
}
inline cudaError_t cudaMemPrefetchAsync(const void*, size_t, int, cudaStream_t = 0) { return cudaSuccess; }
inline cudaError_t cudaMemAdvise(const void*, size_t, cudaMemoryAdvise, int) { return cudaSuccess; }
inline cudaError_t cudaStreamAttachMemAsync(cudaStream_t, void*, size_t = 0, unsigned = cudaMemAttachSingle) { return cudaSuccess; }
inline cudaError_t cudaMemGetInfo(size_t* f, size_t* t) {
  *t = ksim_host::st().device_limit;
  *f = *t - ksim_host::st().device_bytes;
  return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  const ksim_host::Alloc* al = ksim_host::find_alloc(p);
  a->device = 0;
  a->devicePointer = (void*)p;
  a->hostPointer = (void*)p;
  a->type = !al ? cudaMemoryTypeUnregistered : al->mem == ksim_host::M_MANAGED ? cudaMemoryTypeManaged
          : al->mem == ksim_host::M_HOST ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  return cudaSuccess;
}
// __constant__ / __device__ variables: the variable itself is the symbol
template <class T> inline cudaError_t cudaMemcpyToSymbol(const T& sym, const void* s, size_t n, size_t off = 0, cudaMemcpyKind = cudaMemcpyHostToDevice) {
  memcpy((char*)&sym + off, s, n);
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMemcpyToSymbolAsync(const T& sym, const void* s, size_t n, size_t off = 0, cudaMemcpyKind = cudaMemcpyHostToDevice, cudaStream_t st = 0) {
  return cudaMemcpyAsync((char*)&sym + off, s, n, cudaMemcpyHostToDevice, st);
}
template <class T> inline cudaError_t cudaMemcpyFromSymbol(void* d, const T& sym, size_t n, size_t off = 0, cudaMemcpyKind = cudaMemcpyDeviceToHost) {
  memcpy(d, (const char*)&sym + off, n);
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMemcpyFromSymbolAsync(void* d, const T& sym, size_t n, size_t off = 0, cudaMemcpyKind = cudaMemcpyDeviceToHost, cudaStream_t st = 0) {
  return cudaMemcpyAsync(d, (const char*)&sym + off, n, cudaMemcpyDeviceToHost, st);
}
template <class P, class T> inline cudaError_t cudaGetSymbolAddress(P** p, const T& sym) { *p = (P*)(void*)&sym; return cudaSuccess; }
template <class T> inline cudaError_t cudaGetSymbolSize(size_t* n, const T&) { *n = sizeof(T); return cudaSuccess; }

// devices
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : ksim_host::ret(cudaErrorInvalidDevice); }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaChooseDevice(int* d, const cudaDeviceProp*) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaSetDeviceFlags(unsigned) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceFlags(unsigned* f) { *f = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return ksim_host::ret(cudaErrorInvalidDevice);
  *p = ksim_host::device_prop();
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  if (d != 0) return ksim_host::ret(cudaErrorInvalidDevice);
  cudaDeviceProp p = ksim_host::device_prop();
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *v = 1024; break;
    case cudaDevAttrMaxBlockDimY: *v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *v = 64; break;
    case cudaDevAttrMaxGridDimX: *v = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrTotalConstantMemory: *v = (int)p.totalConstMem; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMaxRegistersPerBlock: case cudaDevAttrMaxRegistersPerMultiprocessor: *v = 65536; break;
    case cudaDevAttrClockRate: *v = p.clockRate; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMemoryClockRate: *v = p.memoryClockRate; break;
    case cudaDevAttrGlobalMemoryBusWidth: *v = p.memoryBusWidth; break;
    case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)p.sharedMemPerMultiprocessor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = p.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrComputeMode: case cudaDevAttrIntegrated: case cudaDevAttrKernelExecTimeout:
    case cudaDevAttrTccDriver: case cudaDevAttrIsMultiGpuBoard: case cudaDevAttrPageableMemoryAccess:
    case cudaDevAttrDirectManagedMemAccessFromHost: *v = 0; break;
    case cudaDevAttrAsyncEngineCount: *v = 3; break;
    default: *v = 1; break;
  }
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaThreadSynchronize() { return cudaSuccess; }
inline cudaError_t cudaDeviceReset() { return cudaSuccess; }
inline cudaError_t cudaThreadExit() { return cudaSuccess; }
inline cudaError_t cudaFree(int) { return cudaSuccess; }  // cudaFree(0): initialises the context
inline cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) { return cudaSuccess; }
inline cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* c) { *c = cudaFuncCachePreferNone; return cudaSuccess; }
inline cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig) { return cudaSuccess; }
inline cudaError_t cudaDeviceGetSharedMemConfig(cudaSharedMemConfig* c) { *c = cudaSharedMemBankSizeFourByte; return cudaSuccess; }
// the pre-CUDA 4 spellings of the device-wide settings, still declared by CUDA 12
inline cudaError_t cudaThreadSetCacheConfig(cudaFuncCache) { return cudaSuccess; }
inline cudaError_t cudaThreadGetCacheConfig(cudaFuncCache* c) { *c = cudaFuncCachePreferNone; return cudaSuccess; }
inline cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceGetLimit(size_t* v, cudaLimit l) { *v = l == cudaLimitStackSize ? 1024 : 8 << 20; return cudaSuccess; }
inline cudaError_t cudaThreadSetLimit(cudaLimit l, size_t v) { return cudaDeviceSetLimit(l, v); }
inline cudaError_t cudaThreadGetLimit(size_t* v, cudaLimit l) { return cudaDeviceGetLimit(v, l); }
inline cudaError_t cudaDriverGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
inline cudaError_t cudaDeviceCanAccessPeer(int* can, int, int) { *can = 0; return cudaSuccess; }
inline cudaError_t cudaDeviceGetStreamPriorityRange(int* lo, int* hi) { if (lo) *lo = 0; if (hi) *hi = -5; return cudaSuccess; }
inline cudaError_t cudaDeviceGetPCIBusId(char* s, int n, int) { snprintf(s, n, "0000:01:00.0"); return cudaSuccess; }
inline cudaError_t cudaProfilerStart() { return cudaSuccess; }
inline cudaError_t cudaProfilerStop() { return cudaSuccess; }
#define cudaDeviceEnablePeerAccess(...) KSIM_GPU_ONLY("multi-GPU peer access (cudaDeviceEnablePeerAccess)")
#define cudaDeviceDisablePeerAccess(...) KSIM_GPU_ONLY("multi-GPU peer access (cudaDeviceDisablePeerAccess)")

// errors
inline cudaError_t cudaGetLastError() { cudaError_t e = ksim_host::st().last_error; ksim_host::st().last_error = cudaSuccess; return e; }
inline cudaError_t cudaPeekAtLastError() { return ksim_host::st().last_error; }
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define KSIM_EN(n) case n: return #n;
    KSIM_EN(cudaSuccess) KSIM_EN(cudaErrorInvalidValue) KSIM_EN(cudaErrorMemoryAllocation)
    KSIM_EN(cudaErrorInitializationError) KSIM_EN(cudaErrorInvalidConfiguration) KSIM_EN(cudaErrorInvalidSymbol)
    KSIM_EN(cudaErrorInvalidDevicePointer) KSIM_EN(cudaErrorInvalidDevice) KSIM_EN(cudaErrorNoDevice)
    KSIM_EN(cudaErrorNotReady) KSIM_EN(cudaErrorIllegalAddress) KSIM_EN(cudaErrorLaunchOutOfResources)
    KSIM_EN(cudaErrorLaunchFailure) KSIM_EN(cudaErrorNotSupported) KSIM_EN(cudaErrorUnknown)
    KSIM_EN(cudaErrorCooperativeLaunchTooLarge) KSIM_EN(cudaErrorInvalidDeviceFunction)
    KSIM_EN(cudaErrorPeerAccessNotEnabled) KSIM_EN(cudaErrorInvalidResourceHandle)
#undef KSIM_EN
    default: return "cudaErrorUnknown";
  }
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorNotSupported: return "operation not supported";
    default: return cudaGetErrorName(e);
  }
}

// streams and events: everything runs in order on the host
// each stream its own handle (stream capture records what is issued to one stream)
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = (cudaStream_t)new char; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned, int) { return cudaStreamCreate(s); }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
// waiting on an event recorded in a capturing stream: the stream joins that capture (fork/join of a graph)
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0) {
  auto it = ksim_host::event_graph().find(e);
  if (it != ksim_host::event_graph().end() && !ksim_host::capture_of(s)) ksim_host::capturing()[s] = it->second;
  return cudaSuccess;
}
inline cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t f, void* d, unsigned) {
  if (ksim_host::captured(s, "cudaStreamAddCallback", [=]() { f(s, cudaSuccess, d); })) return cudaSuccess;
  f(s, cudaSuccess, d);
  return cudaSuccess;
}
inline cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t f, void* d) {
  if (ksim_host::captured(s, "cudaLaunchHostFunc", [=]() { f(d); })) return cudaSuccess;
  f(d);
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st{ksim_host::now_s()}; return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { ksim_host::event_graph().erase(e); delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0) {
  if (ksim_host::Graph* g = ksim_host::capture_of(s)) {   // inside a capture: a point other streams may join at
    ksim_host::event_graph()[e] = g;
    g->ops.push_back(ksim_host::GraphOp{"cudaEventRecord", [e]() { e->t = ksim_host::now_s(); }});
    return cudaSuccess;
  }
  ksim_host::event_graph().erase(e);
  if (e) e->t = ksim_host::now_s();
  return cudaSuccess;
}
inline cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s = 0, unsigned = 0) { return cudaEventRecord(e, s); }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = (float)((b->t - a->t) * 1000.0);
  return cudaSuccess;
}

// kernels as functions
struct cudaFuncAttributesDefaults {};
template <class F> inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncSetCacheConfig(F, cudaFuncCache) { return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncSetSharedMemConfig(F, cudaSharedMemConfig) { return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F) {
  memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024; a->numRegs = 32; a->ptxVersion = 90; a->binaryVersion = 90;
  a->maxDynamicSharedSizeBytes = 48 * 1024;
  return cudaSuccess;
}
template <class F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int block, size_t smem) {
  int b = block > 0 ? 2048 / block : 1;
  if (smem) b = std::min<int>(b, (int)(233472 / std::max<size_t>(smem, 1)));
  *n = std::max(1, std::min(b, 32));
  return cudaSuccess;
}
template <class F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, F f, int block, size_t smem, unsigned) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, smem);
}
template <class F> inline cudaError_t cudaOccupancyMaxPotentialBlockSize(int* grid, int* block, F, size_t smem = 0, int limit = 0) {
  int b = limit > 0 ? std::min(limit, 1024) : 1024;
  if (block) *block = b;
  if (grid) *grid = 132 * (2048 / b);
  (void)smem;
  return cudaSuccess;
}
template <class F, class M> inline cudaError_t cudaOccupancyMaxPotentialBlockSizeVariableSMem(int* grid, int* block, F f, M, int limit = 0) {
  return cudaOccupancyMaxPotentialBlockSize(grid, block, f, 0, limit);
}
template <class... P> inline cudaError_t ksim_launch_kernel(const char* name, const char* file, int line, void (*k)(P...), dim3 g, dim3 b, void** args, size_t smem = 0, cudaStream_t s = 0) {
  ksim_host::launch_slots(ksim_host::Site{name, "", file, line}, ksim_host::cfg(g, b, smem, s), k, args,
                          std::index_sequence_for<P...>{});
  return cudaSuccess;
}
#define cudaLaunchKernel(k, ...) ksim_launch_kernel(#k, __FILE__, __LINE__, k, __VA_ARGS__)
#define cudaLaunchCooperativeKernel(k, ...) ksim_launch_kernel(#k, __FILE__, __LINE__, k, __VA_ARGS__)

// what only a GPU does: stops the capture naming the construct and the line
#define cudaCreateTextureObject(...) KSIM_GPU_ONLY("textures (cudaCreateTextureObject)")
#define cudaDestroyTextureObject(...) cudaSuccess
#define cudaCreateSurfaceObject(...) KSIM_GPU_ONLY("surfaces (cudaCreateSurfaceObject)")
#define cudaDestroySurfaceObject(...) cudaSuccess
#define cudaBindTexture(...) KSIM_GPU_ONLY("texture references (cudaBindTexture)")
#define cudaBindTexture2D(...) KSIM_GPU_ONLY("texture references (cudaBindTexture2D)")
#define cudaBindTextureToArray(...) KSIM_GPU_ONLY("texture references (cudaBindTextureToArray)")
#define cudaUnbindTexture(...) cudaSuccess
#define cudaMallocArray(...) KSIM_GPU_ONLY("CUDA arrays (cudaMallocArray)")
#define cudaMalloc3DArray(...) KSIM_GPU_ONLY("CUDA arrays (cudaMalloc3DArray)")
#define cudaMallocMipmappedArray(...) KSIM_GPU_ONLY("CUDA arrays (cudaMallocMipmappedArray)")
#define cudaMemcpyToArray(...) KSIM_GPU_ONLY("CUDA arrays (cudaMemcpyToArray)")
#define cudaMemcpy2DToArray(...) KSIM_GPU_ONLY("CUDA arrays (cudaMemcpy2DToArray)")
#define cudaMemcpy3D(...) KSIM_GPU_ONLY("3D copies (cudaMemcpy3D)")
#define cudaFreeArray(...) cudaSuccess
// CUDA graphs made by stream capture (ksim_host::Graph); graphs built node by node stay GPU only
struct CUgraph_st : ksim_host::Graph {};
struct CUgraphExec_st { std::vector<ksim_host::GraphOp> ops; };
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1,
                               cudaStreamCaptureStatusInvalidated = 2 };
enum cudaGraphInstantiateFlags { cudaGraphInstantiateFlagAutoFreeOnLaunch = 1, cudaGraphInstantiateFlagUpload = 2,
                                 cudaGraphInstantiateFlagDeviceLaunch = 4, cudaGraphInstantiateFlagUseNodePriority = 8 };
inline cudaError_t ksim_stream_begin_capture(cudaStream_t s, const char* file, int line) {
  if (!s || s == cudaStreamLegacy) {
    ksim_host::note("program", "cudaStreamBeginCapture on the legacy default stream (not allowed by CUDA): "
                    "cudaErrorStreamCaptureUnsupported returned", file, line);
    return ksim_host::ret(cudaErrorStreamCaptureUnsupported);
  }
  if (ksim_host::capture_of(s)) return ksim_host::ret(cudaErrorIllegalState);
  auto* g = new CUgraph_st();
  g->origin = s;
  ksim_host::capturing()[s] = g;
  return cudaSuccess;
}
#define cudaStreamBeginCapture(s, ...) ksim_stream_begin_capture(s, __FILE__, __LINE__)
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* out) {
  ksim_host::Graph* g = ksim_host::capture_of(s);
  if (!g || g->origin != s) return ksim_host::ret(cudaErrorIllegalState);
  auto& m = ksim_host::capturing();   // the streams that joined the capture leave it with the origin
  for (auto it = m.begin(); it != m.end();) it = it->second == g ? m.erase(it) : std::next(it);
  auto& ev = ksim_host::event_graph();
  for (auto it = ev.begin(); it != ev.end();) it = it->second == g ? ev.erase(it) : std::next(it);
  CUgraph_st* owner = static_cast<CUgraph_st*>(g);   // every capture's graph is made as one
  if (out) *out = owner;
  else delete owner;
  return cudaSuccess;
}
inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st) {
  *st = ksim_host::capture_of(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
inline cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* st, unsigned long long* id = nullptr, ...) {
  *st = ksim_host::capture_of(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  if (id) *id = (unsigned long long)(uintptr_t)ksim_host::capture_of(s);
  return cudaSuccess;
}
inline cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode*) { return cudaSuccess; }
inline cudaError_t ksim_graph_instantiate(cudaGraphExec_t* e, cudaGraph_t g) {
  if (!e || !g) return ksim_host::ret(cudaErrorInvalidValue);
  *e = new CUgraphExec_st{g->ops};
  return cudaSuccess;
}
// cudaGraphInstantiate(exec, graph, errorNode, logBuffer, size) (CUDA 11) or (exec, graph, flags) (CUDA 12)
#define cudaGraphInstantiate(e, g, ...) ksim_graph_instantiate(e, g)
#define cudaGraphInstantiateWithFlags(e, g, ...) ksim_graph_instantiate(e, g)
#define cudaGraphInstantiateWithParams(e, g, ...) ksim_graph_instantiate(e, g)
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  if (!e) return ksim_host::ret(cudaErrorInvalidValue);
  if (ksim_host::capture_of(s)) {   // a graph launched into a capture: a child graph node
    std::vector<ksim_host::GraphOp> ops = e->ops;
    return ksim_host::captured(s, "cudaGraphLaunch", [ops]() { for (auto& op : ops) op.run(); }), cudaSuccess;
  }
  for (auto& op : e->ops) op.run();
  return cudaSuccess;
}
inline cudaError_t cudaGraphUpload(cudaGraphExec_t, cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
inline cudaError_t cudaGraphClone(cudaGraph_t* out, cudaGraph_t g) { *out = new CUgraph_st(*g); return cudaSuccess; }
inline cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) {
  if (!nodes && n) { *n = g->ops.size(); return cudaSuccess; }
  return KSIM_GPU_ONLY("CUDA graph nodes (cudaGraphGetNodes with a node array)");
}
inline cudaError_t cudaGraphDebugDotPrint(cudaGraph_t, const char*, unsigned) { return cudaSuccess; }
#define cudaGraphCreate(...) KSIM_GPU_ONLY("CUDA graphs built node by node (cudaGraphCreate)")
#define cudaGraphAddKernelNode(...) KSIM_GPU_ONLY("CUDA graphs built node by node (cudaGraphAddKernelNode)")
#define cudaGraphAddMemcpyNode(...) KSIM_GPU_ONLY("CUDA graphs built node by node (cudaGraphAddMemcpyNode)")
#define cudaGraphAddMemcpyNode1D(...) KSIM_GPU_ONLY("CUDA graphs built node by node (cudaGraphAddMemcpyNode1D)")
#define cudaGraphAddMemsetNode(...) KSIM_GPU_ONLY("CUDA graphs built node by node (cudaGraphAddMemsetNode)")
#define cudaGraphAddHostNode(...) KSIM_GPU_ONLY("CUDA graphs built node by node (cudaGraphAddHostNode)")
#define cudaGraphAddChildGraphNode(...) KSIM_GPU_ONLY("CUDA graphs built node by node (cudaGraphAddChildGraphNode)")
#define cudaGraphAddEmptyNode(...) KSIM_GPU_ONLY("CUDA graphs built node by node (cudaGraphAddEmptyNode)")
#define cudaGraphAddDependencies(...) KSIM_GPU_ONLY("CUDA graphs built node by node (cudaGraphAddDependencies)")
#define cudaGraphExecUpdate(...) KSIM_GPU_ONLY("CUDA graph updates (cudaGraphExecUpdate)")
#define cudaGraphExecKernelNodeSetParams(...) KSIM_GPU_ONLY("CUDA graph updates (cudaGraphExecKernelNodeSetParams)")
#define cudaGraphKernelNodeGetParams(...) KSIM_GPU_ONLY("CUDA graph nodes (cudaGraphKernelNodeGetParams)")
#define cudaGraphKernelNodeSetParams(...) KSIM_GPU_ONLY("CUDA graph nodes (cudaGraphKernelNodeSetParams)")
#define cudaStreamBeginCaptureToGraph(...) KSIM_GPU_ONLY("CUDA graphs (cudaStreamBeginCaptureToGraph)")
#define cudaIpcGetMemHandle(...) KSIM_GPU_ONLY("inter-process memory (cudaIpcGetMemHandle)")
#define cudaIpcOpenMemHandle(...) KSIM_GPU_ONLY("inter-process memory (cudaIpcOpenMemHandle)")
#define cudaIpcGetEventHandle(...) KSIM_GPU_ONLY("inter-process events (cudaIpcGetEventHandle)")
#define cudaIpcOpenEventHandle(...) KSIM_GPU_ONLY("inter-process events (cudaIpcOpenEventHandle)")
#define cudaIpcCloseMemHandle(...) cudaSuccess
#define cudaStreamSetAttribute(...) cudaSuccess
#define cudaStreamGetAttribute(...) cudaSuccess
#define cudaCtxResetPersistingL2Cache() cudaSuccess
#define cudaMemcpy3DAsync(...) KSIM_GPU_ONLY("3D copies (cudaMemcpy3DAsync)")
#define cudaGraphicsGLRegisterBuffer(...) KSIM_GPU_ONLY("OpenGL interop (cudaGraphicsGLRegisterBuffer)")
#define cudaGraphicsGLRegisterImage(...) KSIM_GPU_ONLY("OpenGL interop (cudaGraphicsGLRegisterImage)")
#define cudaGLSetGLDevice(...) KSIM_GPU_ONLY("OpenGL interop (cudaGLSetGLDevice)")
template <class T> inline cudaChannelFormatDesc cudaCreateChannelDesc() {
  return cudaChannelFormatDesc{(int)sizeof(T) * 8, 0, 0, 0, std::is_floating_point<T>::value ? cudaChannelFormatKindFloat : cudaChannelFormatKindSigned};
}
inline cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) { return {x, y, z, w, f}; }
namespace ksim_host {
[[noreturn]] inline void tex_in_kernel(const char* what) {
  ksim::fail(9, "%s read in a kernel: textures and surfaces only run on a GPU", what);
}
}  // namespace ksim_host
template <class T, class... A> inline T tex1Dfetch(cudaTextureObject_t, A...) { ksim_host::tex_in_kernel("tex1Dfetch"); }
template <class T, class... A> inline T tex1D(cudaTextureObject_t, A...) { ksim_host::tex_in_kernel("tex1D"); }
template <class T, class... A> inline T tex2D(cudaTextureObject_t, A...) { ksim_host::tex_in_kernel("tex2D"); }
template <class T, class... A> inline T tex3D(cudaTextureObject_t, A...) { ksim_host::tex_in_kernel("tex3D"); }
template <class T, class... A> inline T tex2DLayered(cudaTextureObject_t, A...) { ksim_host::tex_in_kernel("tex2DLayered"); }
template <class T, int D, cudaTextureReadMode M, class... A> inline T tex1Dfetch(texture<T, D, M>, A...) { ksim_host::tex_in_kernel("tex1Dfetch"); }
template <class T, int D, cudaTextureReadMode M, class... A> inline T tex1D(texture<T, D, M>, A...) { ksim_host::tex_in_kernel("tex1D"); }
template <class T, int D, cudaTextureReadMode M, class... A> inline T tex2D(texture<T, D, M>, A...) { ksim_host::tex_in_kernel("tex2D"); }
template <class T, int D, cudaTextureReadMode M, class... A> inline T tex3D(texture<T, D, M>, A...) { ksim_host::tex_in_kernel("tex3D"); }
template <class T, class... A> inline T texCubemap(cudaTextureObject_t, A...) { ksim_host::tex_in_kernel("texCubemap"); }
template <class T, class... A> inline T tex1DLayered(cudaTextureObject_t, A...) { ksim_host::tex_in_kernel("tex1DLayered"); }
template <class T, class... A> inline T texCubemapLayered(cudaTextureObject_t, A...) { ksim_host::tex_in_kernel("texCubemapLayered"); }
template <class T, class... A> inline void surf1Dwrite(T, cudaSurfaceObject_t, A...) { ksim_host::tex_in_kernel("surf1Dwrite"); }
template <class T, class... A> inline void surf3Dwrite(T, cudaSurfaceObject_t, A...) { ksim_host::tex_in_kernel("surf3Dwrite"); }
template <class T, class... A> inline void surf2Dwrite(T, cudaSurfaceObject_t, A...) { ksim_host::tex_in_kernel("surf2Dwrite"); }
template <class T, class... A> inline void surf2Dread(T*, cudaSurfaceObject_t, A...) { ksim_host::tex_in_kernel("surf2Dread"); }

// device-side helpers host programs' kernels use
inline long long clock64() { return ksim::cur ? ksim::clock_reading() : (long long)(ksim_host::now_s() * 1e9); }
inline unsigned long long __globaltimer() { return (unsigned long long)(ksim_host::now_s() * 1e9); }

// system- and block-scoped atomics are the plain ones on one device
#define atomicSub_system atomicSub
#define atomicExch_system atomicExch
#define atomicMin_system atomicMin
#define atomicMax_system atomicMax
#define atomicInc_system atomicInc
#define atomicDec_system atomicDec
#define atomicCAS_system atomicCAS
#define atomicAnd_system atomicAnd
#define atomicOr_system atomicOr
#define atomicXor_system atomicXor
#define atomicSub_block atomicSub
#define atomicExch_block atomicExch
#define atomicMin_block atomicMin
#define atomicMax_block atomicMax
#define atomicCAS_block atomicCAS
#define atomicAnd_block atomicAnd
#define atomicOr_block atomicOr
#define atomicXor_block atomicXor
#define atomicInc_block atomicInc

// blockIdx / blockDim / gridDim as objects rather than macros, so host code may name a variable gridDim
namespace ksim_host {
struct DimRef {
  const unsigned &x, &y, &z;
  operator dim3() const { return dim3(x, y, z); }
  operator ksim::u3() const { return ksim::u3(x, y, z); }
};
}  // namespace ksim_host
#undef blockIdx
#undef blockDim
#undef gridDim
inline const ksim_host::DimRef blockIdx{ksim::g.block.x, ksim::g.block.y, ksim::g.block.z};
inline const ksim_host::DimRef blockDim{ksim::g.bdim.x, ksim::g.bdim.y, ksim::g.bdim.z};
inline const ksim_host::DimRef gridDim{ksim::g.nblocks.x, ksim::g.nblocks.y, ksim::g.nblocks.z};

// cooperative groups beyond ksim.h's: generic groups, coalesced groups, cg::sync
namespace cooperative_groups {
template <class G> inline void sync(const G& g) { g.sync(); }
struct thread_group {
  unsigned n;  // 0: the whole block; else a tile of n threads
  thread_group(const thread_block&) : n(0) {}
  template <unsigned N> thread_group(const thread_block_tile<N>&) : n(N) {}
  explicit thread_group(unsigned tile) : n(tile) {}
  unsigned long long thread_rank() const { return n ? ksim::cur->lin % n : ksim::cur->lin; }
  unsigned long long size() const { return n ? n : (unsigned long long)ksim::g.n; }
  unsigned long long num_threads() const { return size(); }
  void sync() const { if (n) ksim::warp_sync(); else ksim::barrier(0, KSIM_SITE); }
};
inline thread_group tiled_partition(const thread_group&, unsigned n) { return thread_group(n); }
inline thread_group tiled_partition(const thread_block&, unsigned n) { return thread_group(n); }
struct coalesced_group {
  unsigned mask;
  unsigned parent;  // the lanes that made the group together (labeled_partition splits them; all of them call)
  // the lanes that reach this point together (a ballot waits for the warp's other lanes to arrive or leave)
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
// labeled_partition: the lanes of g holding the same label (every lane of g calls it, as CUDA requires)
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
// reduce over a coalesced group: every lane of the parent takes part in the same shuffles
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
}  // namespace cooperative_groups

// Tiles of more than one warp (thread_block_tile<64..1024>, made with block_tile_memory's scratch on a GPU):
// ranks within the tile, sync as a block barrier (every tile of the block syncs at once, as CUDA requires of
// multi-warp tiles), and reduce/shfl through a block-wide scratch between two barriers.
namespace ksim_host {
alignas(16) inline char tile_scratch[1024 * 64];
template <class T> inline T* tile_slots() {
  static_assert(sizeof(T) <= 64, "a multi-warp tile collective on a value larger than 64 bytes");
  return reinterpret_cast<T*>(tile_scratch);
}
}  // namespace ksim_host
namespace cooperative_groups {
template <unsigned N = 1024, unsigned M = 0> struct block_tile_memory { char unused; };
template <unsigned N, unsigned M> inline thread_block this_thread_block(block_tile_memory<N, M>&) { return thread_block(); }
namespace experimental {
using cooperative_groups::block_tile_memory;
using cooperative_groups::this_thread_block;
using cooperative_groups::tiled_partition;
}  // namespace experimental
template <unsigned N> struct multi_warp_tile {
  unsigned long long thread_rank() const { return ksim::cur->lin % N; }
  unsigned long long size() const { return N; }
  unsigned long long num_threads() const { return N; }
  unsigned long long meta_group_rank() const { return ksim::cur->lin / N; }
  unsigned long long meta_group_size() const { return (ksim::g.n + N - 1) / N; }
  dim3 group_dim() const { return dim3(N, 1, 1); }
  void sync() const { ksim::barrier(0, 0); }
  template <class T> T shfl(T v, unsigned src) const {
    T* s = ksim_host::tile_slots<T>();
    unsigned lin = ksim::cur->lin;
    s[lin] = v;
    ksim::barrier(0, 0);
    unsigned from = lin - lin % N + src % N;
    T r = from < (unsigned)ksim::g.n ? s[from] : v;
    ksim::barrier(0, 0);
    return r;
  }
  template <class T, class Op> T reduce(T v, Op op) const {
    T* s = ksim_host::tile_slots<T>();
    unsigned lin = ksim::cur->lin, base = lin - lin % N;
    s[lin] = v;
    ksim::barrier(0, 0);
    T acc = s[base];
    for (unsigned i = 1; i < N && base + i < (unsigned)ksim::g.n; i++) acc = op(acc, s[base + i]);
    ksim::barrier(0, 0);
    return acc;
  }
  template <class T, class Op> T scan(T v, Op op, bool inclusive) const {
    T* s = ksim_host::tile_slots<T>();
    unsigned lin = ksim::cur->lin, base = lin - lin % N;
    s[lin] = v;
    ksim::barrier(0, 0);
    T acc{};
    bool first = true;
    for (unsigned i = base; i < lin + (inclusive ? 1u : 0u); i++) { acc = first ? s[i] : op(acc, s[i]); first = false; }
    ksim::barrier(0, 0);
    return acc;
  }
  int any(int p) const { return reduce(p ? 1 : 0, [](int a, int b) { return a | b; }); }
  int all(int p) const { return reduce(p ? 1 : 0, [](int a, int b) { return a & b; }); }
};
#define KSIM_MULTI_WARP_TILE(N)                                                                            \
  template <> struct thread_block_tile<N> : multi_warp_tile<N> {};                                       \
  template <class T, class Op> inline T reduce(const thread_block_tile<N>& t, T v, Op op) { return t.reduce(v, op); } \
  template <class T, class Op> inline T inclusive_scan(const thread_block_tile<N>& t, T v, Op op) { return t.scan(v, op, true); } \
  template <class T, class Op> inline T exclusive_scan(const thread_block_tile<N>& t, T v, Op op) { return t.scan(v, op, false); }
KSIM_MULTI_WARP_TILE(64)
KSIM_MULTI_WARP_TILE(128)
KSIM_MULTI_WARP_TILE(256)
KSIM_MULTI_WARP_TILE(512)
KSIM_MULTI_WARP_TILE(1024)
#undef KSIM_MULTI_WARP_TILE
}  // namespace cooperative_groups

// libcu++ asynchronous copies (<cuda/pipeline>, <cuda/barrier>): a copy is queued and done when the program may
// first rely on it (the stage's consumer_wait, the barrier phase's completion), the latest a GPU could finish it,
// so a kernel that reads a buffer before waiting, or refills one still being read, shows its race here too.
namespace ksim_host {
struct AsyncCopy { void* dst; const void* src; size_t n; };
// queued copies of block-scoped objects (barriers, shared pipeline stages), by the object's address
inline std::map<const void*, std::vector<AsyncCopy>>& async_lists() { static std::map<const void*, std::vector<AsyncCopy>> m; return m; }
inline void run_copies(std::vector<AsyncCopy>& v) {
  for (auto& c : v) memcpy(c.dst, c.src, c.n);
  v.clear();
}
inline void run_copies_of(const void* key) {
  auto it = async_lists().find(key);
  if (it != async_lists().end()) run_copies(it->second);
}
// a thread waiting for others of its block (a barrier phase, a pipeline stage): let them run
inline void spin_wait() {
  ksim::cur->state = ksim::F_RUN;
  ksim::yield_to_sched();
}
}  // namespace ksim_host
namespace cuda {   // (thread_scope: ksim.h)
template <size_t Align> struct aligned_size_t {
  size_t value;
  constexpr explicit aligned_size_t(size_t v) : value(v) {}
  constexpr operator size_t() const { return value; }
};
enum class pipeline_role { producer, consumer };

// cuda::barrier<thread_scope_block>: init(&bar, count) by one thread, arrive() -> token, wait(token)
template <thread_scope Scope, class F = void> struct barrier {
  long expected, arrived;
  unsigned long phase;
  typedef unsigned long arrival_token;
  arrival_token arrive(long n = 1) {
    arrival_token t = phase;
    arrived += n;
    if (arrived >= expected) {
      ksim_host::run_copies_of(this);
      arrived = 0;
      phase++;
    }
    return t;
  }
  void wait(arrival_token t) const {
    while (*(volatile unsigned long*)&phase == t) ksim_host::spin_wait();
  }
  void arrive_and_wait() { wait(arrive()); }
  void arrive_and_drop() { expected--; arrive(0); }
  static constexpr long max() { return 1L << 30; }
};
template <thread_scope Scope, class F> inline void init(barrier<Scope, F>* b, long count) {
  b->expected = count;
  b->arrived = 0;
  b->phase = 0;
  ksim_host::async_lists().erase(b);
}
template <thread_scope Scope, class F> inline void memcpy_async(void* dst, const void* src, size_t n, barrier<Scope, F>& b) {
  ksim_host::async_lists()[&b].push_back({dst, src, n});
}
template <class G, thread_scope Scope, class F> inline void memcpy_async(const G&, void* dst, const void* src, size_t n, barrier<Scope, F>& b) {
  memcpy_async(dst, src, n, b);   // a group's collective copy: queued once per calling thread, same bytes
}

// shared state of a block-scoped pipeline: a ring of stages (plain data: __shared__ objects start as garbage)
struct pipeline_stage { unsigned long gen; int commits, releases; bool done; };
template <thread_scope Scope, unsigned char Stages> struct pipeline_shared_state {
  pipeline_stage st[Stages];
  int producers, consumers;
};
template <thread_scope Scope> struct pipeline;
// a thread's own pipeline: stages are committed batches of copies, done at consumer_wait
template <> struct pipeline<thread_scope_thread> {
  std::vector<std::vector<ksim_host::AsyncCopy>> stages;
  std::vector<ksim_host::AsyncCopy> open;
  void producer_acquire() {}
  void producer_commit() { stages.push_back(std::move(open)); open.clear(); }
  void consumer_wait() {
    if (stages.empty()) ksim_host::run_copies(open);
    else ksim_host::run_copies(stages.front());
  }
  void consumer_release() { if (!stages.empty()) stages.erase(stages.begin()); }
  void wait_prior(size_t n) {
    for (size_t i = 0; i + n < stages.size(); i++) ksim_host::run_copies(stages[i]);
  }
  void add(void* d, const void* s, size_t n) { open.push_back({d, s, n}); }
  void quit() {}
};
inline pipeline<thread_scope_thread> make_pipeline() { return pipeline<thread_scope_thread>(); }
// a block's pipeline over shared state: producers fill stage k while consumers read stage k-1
template <> struct pipeline<thread_scope_block> {
  void* state;
  pipeline_stage* st;
  int nstages;
  int* producers;
  int* consumers;
  bool producer, consumer;
  unsigned long p_seq = 0, c_seq = 0;
  std::vector<ksim_host::AsyncCopy> open;
  const void* key(unsigned long seq) const { return (const char*)state + 1 + seq % nstages; }
  pipeline_stage& stage(unsigned long seq) const { return st[seq % nstages]; }
  void producer_acquire() {
    while (*(volatile unsigned long*)&stage(p_seq).gen != p_seq / nstages) ksim_host::spin_wait();
  }
  void add(void* d, const void* s, size_t n) { ksim_host::async_lists()[key(p_seq)].push_back({d, s, n}); }
  void producer_commit() {
    stage(p_seq).commits++;
    p_seq++;
  }
  void consumer_wait() {
    auto& s = stage(c_seq);
    while (*(volatile unsigned long*)&s.gen != c_seq / nstages || *(volatile int*)&s.commits < *producers)
      ksim_host::spin_wait();
    if (!s.done) {
      ksim_host::run_copies_of(key(c_seq));
      s.done = true;
    }
  }
  void wait_prior(size_t) { consumer_wait(); }
  void consumer_release() {
    auto& s = stage(c_seq);
    if (++s.releases >= *consumers) {
      s.commits = 0;
      s.releases = 0;
      s.done = false;
      s.gen++;
    }
    c_seq++;
  }
  void quit() {}
};
template <class G, unsigned char S>
inline pipeline<thread_scope_block> make_block_pipeline(const G& g, pipeline_shared_state<thread_scope_block, S>* ss,
                                                          bool producer, bool consumer, int nprod, int ncons) {
  if (g.thread_rank() == 0) {
    for (int i = 0; i < S; i++) ss->st[i] = {0, 0, 0, false};
    for (int i = 0; i < S; i++) ksim_host::async_lists().erase((const char*)ss + 1 + i);
    ss->producers = 0;
    ss->consumers = 0;
  }
  ksim::barrier(0, 0);
  if (nprod < 0) {   // roles given per thread: count them
    if (producer) ss->producers++;
    if (consumer) ss->consumers++;
  } else if (g.thread_rank() == 0) {
    ss->producers = nprod;
    ss->consumers = ncons;
  }
  ksim::barrier(0, 0);
  pipeline<thread_scope_block> p;
  p.state = ss;
  p.st = ss->st;
  p.nstages = S;
  p.producers = &ss->producers;
  p.consumers = &ss->consumers;
  p.producer = producer;
  p.consumer = consumer;
  return p;
}
template <class G, unsigned char S>
inline pipeline<thread_scope_block> make_pipeline(const G& g, pipeline_shared_state<thread_scope_block, S>* ss) {
  return make_block_pipeline(g, ss, true, true, (int)g.size(), (int)g.size());
}
template <class G, unsigned char S>
inline pipeline<thread_scope_block> make_pipeline(const G& g, pipeline_shared_state<thread_scope_block, S>* ss, pipeline_role r) {
  return make_block_pipeline(g, ss, r == pipeline_role::producer, r == pipeline_role::consumer, -1, -1);
}
template <class G, unsigned char S>
inline pipeline<thread_scope_block> make_pipeline(const G& g, pipeline_shared_state<thread_scope_block, S>* ss, size_t producer_count) {
  bool prod = g.thread_rank() < producer_count;
  return make_block_pipeline(g, ss, prod, !prod, (int)producer_count, (int)(g.size() - producer_count));
}
template <thread_scope Scope> inline void memcpy_async(void* dst, const void* src, size_t n, pipeline<Scope>& p) { p.add(dst, src, n); }
template <class G, thread_scope Scope> inline void memcpy_async(const G&, void* dst, const void* src, size_t n, pipeline<Scope>& p) { p.add(dst, src, n); }
template <unsigned char Prior, thread_scope Scope> inline void pipeline_consumer_wait_prior(pipeline<Scope>& p) { p.wait_prior(Prior); }
template <thread_scope Scope> inline void pipeline_producer_commit(pipeline<thread_scope_thread>& p, barrier<Scope>& b) {
  // the committed copies complete with the barrier's phase
  for (auto& c : p.open) ksim_host::async_lists()[&b].push_back(c);
  p.open.clear();
}
}  // namespace cuda
#include "ksim_tex.h"  // textures: arrays, references, objects, fetches (owned by the textures work)
#include "ksim_wmma.h"  // nvcuda::wmma (tensor-core fragments; owned by the wmma work)
