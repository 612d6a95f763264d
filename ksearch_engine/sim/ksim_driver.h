// The CUDA driver API and NVRTC on the CPU, for a captured program (host_headers.py serves this text as
// <cuda.h>; <nvrtc.h> includes it). Included after ksim_host.h, whose runtime it calls into.
//
// Kernels are never loaded from a module image here: the capture compiles the kernel files a program names into
// the executable (host_driver.py), and each kernel registers itself (ksim_drv::add) under its file's name, with a
// trampoline that reads cuLaunchKernel's parameter slots as the kernel's own parameter types and launches it
// through ksim_host::launch_slots, the path cudaLaunchKernel takes, so the launch is recorded as any other.
// A module (cuModuleLoad, cuModuleLoadData, an NVRTC program) resolves to the kernels of the kernel file it was
// built from: by the file name the program opened (the module names host_driver.module_names lists), by the
// marker text this stand-in wrote (NVRTC's "PTX"/"CUBIN", the files KSIM_DRIVER_OPEN_STAND_INS serves for
// modules that are not there), or by the .entry names of a PTX text.
// Texture, surface and array calls, JIT linking and graph calls stop the capture, naming the call and line.
#pragma once
#define __cuda_cuda_h__ 1
#include <dlfcn.h>
#include <errno.h>
#include <sys/stat.h>
#include <initializer_list>
#include <string>
#include <vector>

typedef int CUdevice;
typedef int CUdevice_v1;
typedef enum cudaError_enum {
  CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2, CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4, CUDA_ERROR_PROFILER_DISABLED = 5, CUDA_ERROR_PROFILER_NOT_INITIALIZED = 6,
  CUDA_ERROR_PROFILER_ALREADY_STARTED = 7, CUDA_ERROR_PROFILER_ALREADY_STOPPED = 8, CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_DEVICE_UNAVAILABLE = 46, CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_DEVICE_NOT_LICENSED = 102, CUDA_ERROR_INVALID_IMAGE = 200, CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_CONTEXT_ALREADY_CURRENT = 202, CUDA_ERROR_MAP_FAILED = 205, CUDA_ERROR_UNMAP_FAILED = 206,
  CUDA_ERROR_ARRAY_IS_MAPPED = 207, CUDA_ERROR_ALREADY_MAPPED = 208, CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_ALREADY_ACQUIRED = 210, CUDA_ERROR_NOT_MAPPED = 211, CUDA_ERROR_NOT_MAPPED_AS_ARRAY = 212,
  CUDA_ERROR_NOT_MAPPED_AS_POINTER = 213, CUDA_ERROR_ECC_UNCORRECTABLE = 214, CUDA_ERROR_UNSUPPORTED_LIMIT = 215,
  CUDA_ERROR_CONTEXT_ALREADY_IN_USE = 216, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217, CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_GRAPHICS_CONTEXT = 219, CUDA_ERROR_NVLINK_UNCORRECTABLE = 220,
  CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221, CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_JIT_COMPILATION_DISABLED = 223, CUDA_ERROR_INVALID_SOURCE = 300, CUDA_ERROR_FILE_NOT_FOUND = 301,
  CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND = 302, CUDA_ERROR_SHARED_OBJECT_INIT_FAILED = 303,
  CUDA_ERROR_OPERATING_SYSTEM = 304, CUDA_ERROR_INVALID_HANDLE = 400, CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500, CUDA_ERROR_NOT_READY = 600, CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701, CUDA_ERROR_LAUNCH_TIMEOUT = 702,
  CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING = 703, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705, CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE = 708,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709, CUDA_ERROR_ASSERT = 710, CUDA_ERROR_TOO_MANY_PEERS = 711,
  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
  CUDA_ERROR_HARDWARE_STACK_ERROR = 714, CUDA_ERROR_ILLEGAL_INSTRUCTION = 715, CUDA_ERROR_MISALIGNED_ADDRESS = 716,
  CUDA_ERROR_INVALID_ADDRESS_SPACE = 717, CUDA_ERROR_INVALID_PC = 718, CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720, CUDA_ERROR_NOT_PERMITTED = 800, CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_SYSTEM_NOT_READY = 802, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_TIMEOUT = 909, CUDA_ERROR_UNKNOWN = 999
} CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUdeviceptr_v2;
struct CUctx_st; typedef CUctx_st* CUcontext;
struct CUmod_st; typedef CUmod_st* CUmodule;
struct CUfunc_st; typedef CUfunc_st* CUfunction;
struct CUlinkState_st; typedef CUlinkState_st* CUlinkState;
struct CUarray_st; typedef CUarray_st* CUarray;
struct CUtexref_st; typedef CUtexref_st* CUtexref;
struct CUsurfref_st; typedef CUsurfref_st* CUsurfref;
typedef CUstream_st* CUstream;
typedef CUevent_st* CUevent;
typedef cudaTextureObject_t CUtexObject;
typedef cudaSurfaceObject_t CUsurfObject;
typedef enum CUdevice_attribute_enum { CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY = 9,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12, CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16, CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
  CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE = 20,
  CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS = 31, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
  CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED = 102
  } CUdevice_attribute;
typedef enum CUcomputemode_enum { CU_COMPUTEMODE_DEFAULT = 0, CU_COMPUTEMODE_PROHIBITED = 2,
  CU_COMPUTEMODE_EXCLUSIVE_PROCESS = 3 } CUcomputemode;
typedef enum CUfunction_attribute_enum { CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4, CU_FUNC_ATTRIBUTE_PTX_VERSION = 5, CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 } CUfunction_attribute;
typedef enum CUfunc_cache_enum { CU_FUNC_CACHE_PREFER_NONE = 0, CU_FUNC_CACHE_PREFER_SHARED = 1,
  CU_FUNC_CACHE_PREFER_L1 = 2, CU_FUNC_CACHE_PREFER_EQUAL = 3 } CUfunc_cache;
typedef enum CUjit_option_enum { CU_JIT_MAX_REGISTERS = 0, CU_JIT_THREADS_PER_BLOCK = 1, CU_JIT_WALL_TIME = 2,
  CU_JIT_INFO_LOG_BUFFER = 3, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4, CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6, CU_JIT_OPTIMIZATION_LEVEL = 7, CU_JIT_TARGET_FROM_CUCONTEXT = 8,
  CU_JIT_TARGET = 9, CU_JIT_FALLBACK_STRATEGY = 10, CU_JIT_GENERATE_DEBUG_INFO = 11, CU_JIT_LOG_VERBOSE = 12,
  CU_JIT_GENERATE_LINE_INFO = 13, CU_JIT_CACHE_MODE = 14 } CUjit_option;
typedef enum CUjitInputType_enum { CU_JIT_INPUT_CUBIN = 0, CU_JIT_INPUT_PTX = 1, CU_JIT_INPUT_FATBINARY = 2,
  CU_JIT_INPUT_OBJECT = 3, CU_JIT_INPUT_LIBRARY = 4 } CUjitInputType;
typedef enum CUctx_flags_enum { CU_CTX_SCHED_AUTO = 0, CU_CTX_SCHED_SPIN = 1, CU_CTX_SCHED_YIELD = 2,
  CU_CTX_SCHED_BLOCKING_SYNC = 4, CU_CTX_MAP_HOST = 8, CU_CTX_LMEM_RESIZE_TO_MAX = 16 } CUctx_flags;
typedef enum CUstream_flags_enum { CU_STREAM_DEFAULT = 0, CU_STREAM_NON_BLOCKING = 1 } CUstream_flags;
typedef enum CUevent_flags_enum { CU_EVENT_DEFAULT = 0, CU_EVENT_BLOCKING_SYNC = 1, CU_EVENT_DISABLE_TIMING = 2,
  CU_EVENT_INTERPROCESS = 4 } CUevent_flags;
typedef enum CUmemorytype_enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_ARRAY = 3,
  CU_MEMORYTYPE_UNIFIED = 4 } CUmemorytype;
typedef enum CUarray_format_enum { CU_AD_FORMAT_UNSIGNED_INT8 = 1, CU_AD_FORMAT_UNSIGNED_INT16 = 2,
  CU_AD_FORMAT_UNSIGNED_INT32 = 3, CU_AD_FORMAT_SIGNED_INT8 = 8, CU_AD_FORMAT_SIGNED_INT16 = 9,
  CU_AD_FORMAT_SIGNED_INT32 = 10, CU_AD_FORMAT_HALF = 16, CU_AD_FORMAT_FLOAT = 32 } CUarray_format;
typedef enum CUaddress_mode_enum { CU_TR_ADDRESS_MODE_WRAP = 0, CU_TR_ADDRESS_MODE_CLAMP = 1,
  CU_TR_ADDRESS_MODE_MIRROR = 2, CU_TR_ADDRESS_MODE_BORDER = 3 } CUaddress_mode;
typedef enum CUfilter_mode_enum { CU_TR_FILTER_MODE_POINT = 0, CU_TR_FILTER_MODE_LINEAR = 1 } CUfilter_mode;
typedef enum CUresourcetype_enum { CU_RESOURCE_TYPE_ARRAY = 0, CU_RESOURCE_TYPE_MIPMAPPED_ARRAY = 1,
  CU_RESOURCE_TYPE_LINEAR = 2, CU_RESOURCE_TYPE_PITCH2D = 3 } CUresourcetype;
#define CU_TRSF_READ_AS_INTEGER 0x01
#define CU_TRSF_NORMALIZED_COORDINATES 0x02
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
#define CU_MEM_ATTACH_GLOBAL 0x1
typedef struct CUDA_MEMCPY2D_st { size_t srcXInBytes, srcY; CUmemorytype srcMemoryType; const void* srcHost;
  CUdeviceptr srcDevice; CUarray srcArray; size_t srcPitch; size_t dstXInBytes, dstY; CUmemorytype dstMemoryType;
  void* dstHost; CUdeviceptr dstDevice; CUarray dstArray; size_t dstPitch; size_t WidthInBytes, Height; } CUDA_MEMCPY2D;
typedef struct CUDA_ARRAY_DESCRIPTOR_st { size_t Width, Height; CUarray_format Format; unsigned NumChannels; }
  CUDA_ARRAY_DESCRIPTOR;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_st { size_t Width, Height, Depth; CUarray_format Format; unsigned NumChannels;
  unsigned Flags; } CUDA_ARRAY3D_DESCRIPTOR;
typedef struct CUDA_RESOURCE_DESC_st { CUresourcetype resType;
  union { struct { CUarray hArray; } array; struct { CUdeviceptr devPtr; CUarray_format format; unsigned numChannels;
    size_t sizeInBytes; } linear; struct { CUdeviceptr devPtr; CUarray_format format; unsigned numChannels;
    size_t width, height, pitchInBytes; } pitch2D; int reserved[32]; } res; unsigned flags; } CUDA_RESOURCE_DESC;
typedef struct CUDA_TEXTURE_DESC_st { CUaddress_mode addressMode[3]; CUfilter_mode filterMode; unsigned flags;
  unsigned maxAnisotropy; CUfilter_mode mipmapFilterMode; float mipmapLevelBias, minMipmapLevelClamp,
  maxMipmapLevelClamp; float borderColor[4]; int reserved[12]; } CUDA_TEXTURE_DESC;
typedef struct CUexecAffinityParam_st { int type; union { struct { unsigned val; } smCount; } param; } CUexecAffinityParam;
typedef struct CUctxCigParam_st { int sharedDataType; void* sharedData; } CUctxCigParam;
typedef struct CUctxCreateParams_st { CUexecAffinityParam* execAffinityParams; int numExecAffinityParams;
  CUctxCigParam* cigParams; } CUctxCreateParams;
typedef size_t (*CUoccupancyB2DSize)(int);
#define CU_LAUNCH_PARAM_END ((void*)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void*)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void*)0x02)

typedef unsigned long long CUmemGenericAllocationHandle;
typedef enum { CU_MEM_ALLOCATION_TYPE_INVALID = 0, CU_MEM_ALLOCATION_TYPE_PINNED = 1 } CUmemAllocationType;
typedef enum { CU_MEM_LOCATION_TYPE_INVALID = 0, CU_MEM_LOCATION_TYPE_DEVICE = 1 } CUmemLocationType;
typedef enum { CU_MEM_HANDLE_TYPE_NONE = 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1 } CUmemAllocationHandleType;
typedef enum { CU_MEM_ACCESS_FLAGS_PROT_NONE = 0, CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
  CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 } CUmemAccess_flags;
typedef enum { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1 }
  CUmemAllocationGranularity_flags;
typedef struct { CUmemLocationType type; int id; } CUmemLocation;
typedef struct { CUmemAllocationType type; CUmemAllocationHandleType requestedHandleTypes; CUmemLocation location;
                 void* win32HandleMetaData; struct { unsigned char compressionType, gpuDirectRDMACapable;
                 unsigned short usage; unsigned char reserved[4]; } allocFlags; } CUmemAllocationProp;
typedef struct { CUmemLocation location; CUmemAccess_flags flags; } CUmemAccessDesc;
// virtual memory management (cuMemCreate, cuMemMap ...): its types compile; each call stops the capture, naming it
#define KSIM_VMM(name) (ksim_host::gpu_only("the CUDA driver's virtual memory management (" name ")", __FILE__, __LINE__), CUDA_ERROR_NOT_SUPPORTED)
#define cuMemGetAllocationGranularity(...) KSIM_VMM("cuMemGetAllocationGranularity")
#define cuMemAddressReserve(...) KSIM_VMM("cuMemAddressReserve")
#define cuMemCreate(...) KSIM_VMM("cuMemCreate")
#define cuMemMap(...) KSIM_VMM("cuMemMap")
#define cuMemSetAccess(...) KSIM_VMM("cuMemSetAccess")
#define cuMemUnmap(...) KSIM_VMM("cuMemUnmap")
#define cuMemAddressFree(...) KSIM_VMM("cuMemAddressFree")
#define cuMemRelease(...) KSIM_VMM("cuMemRelease")

// what only a GPU does: textures, surfaces and arrays (the runtime stand-in has none through the driver's calls),
// linking modules at run time, graphs
#define KSIM_DRV_GPU_ONLY(what) (ksim_host::gpu_only(what, __FILE__, __LINE__), CUDA_ERROR_NOT_SUPPORTED)
#define cuArrayCreate(...) KSIM_DRV_GPU_ONLY("CUDA arrays through the driver API (cuArrayCreate)")
#define cuArray3DCreate(...) KSIM_DRV_GPU_ONLY("CUDA arrays through the driver API (cuArray3DCreate)")
#define cuArrayDestroy(...) CUDA_SUCCESS
#define cuTexObjectCreate(...) KSIM_DRV_GPU_ONLY("texture objects through the driver API (cuTexObjectCreate)")
#define cuTexObjectDestroy(...) CUDA_SUCCESS
#define cuSurfObjectCreate(...) KSIM_DRV_GPU_ONLY("surface objects through the driver API (cuSurfObjectCreate)")
#define cuSurfObjectDestroy(...) CUDA_SUCCESS
#define cuModuleGetTexRef(...) KSIM_DRV_GPU_ONLY("texture references through the driver API (cuModuleGetTexRef)")
#define cuModuleGetSurfRef(...) KSIM_DRV_GPU_ONLY("surface references through the driver API (cuModuleGetSurfRef)")
#define cuTexRefSetArray(...) KSIM_DRV_GPU_ONLY("texture references through the driver API (cuTexRefSetArray)")
#define cuTexRefSetAddress(...) KSIM_DRV_GPU_ONLY("texture references through the driver API (cuTexRefSetAddress)")
#define cuMemcpy3D(...) KSIM_DRV_GPU_ONLY("CUDA arrays through the driver API (cuMemcpy3D)")
#define cuMemcpyHtoA(...) KSIM_DRV_GPU_ONLY("CUDA arrays through the driver API (cuMemcpyHtoA)")
#define cuMemcpyAtoH(...) KSIM_DRV_GPU_ONLY("CUDA arrays through the driver API (cuMemcpyAtoH)")
#define cuLinkCreate(...) KSIM_DRV_GPU_ONLY("linking modules at run time (cuLinkCreate)")
#define cuLinkAddData(...) KSIM_DRV_GPU_ONLY("linking modules at run time (cuLinkAddData)")
#define cuLinkAddFile(...) KSIM_DRV_GPU_ONLY("linking modules at run time (cuLinkAddFile)")
#define cuLinkComplete(...) KSIM_DRV_GPU_ONLY("linking modules at run time (cuLinkComplete)")
#define cuLinkDestroy(...) CUDA_SUCCESS
#define cuGraphCreate(...) KSIM_DRV_GPU_ONLY("CUDA graphs through the driver API (cuGraphCreate)")
#define cuStreamBeginCapture(...) KSIM_DRV_GPU_ONLY("CUDA graphs through the driver API (cuStreamBeginCapture)")
#define cuLibraryLoadData(...) KSIM_DRV_GPU_ONLY("CUDA libraries through the driver API (cuLibraryLoadData)")
#define cuLibraryLoadFromFile(...) KSIM_DRV_GPU_ONLY("CUDA libraries through the driver API (cuLibraryLoadFromFile)")

// ------------------------------------------------------------------------------------------------
// Kernels compiled into the capture, and the modules that stand for them
// ------------------------------------------------------------------------------------------------
struct CUfunc_st {
  std::string unit;                  // the file defining the kernel ("vectorAdd_kernel.cu")
  std::string name;                  // as a module names it: the declared name, or a name expression "k<float>"
  std::string kernel, targs;         // what the launch is recorded under
  void* fn;
  void (*run)(void* fn, const ksim_host::Site&, const ksim_host::Cfg&, void** params, void** extra);
  int nparams;
};
struct CUmod_st { std::string unit; };   // the kernel file the module was built from
struct CUctx_st { int device; };

namespace ksim_drv {
inline std::vector<CUfunc_st*>& kernels() { static std::vector<CUfunc_st*> v; return v; }

struct ModuleFile {                  // a kernel file compiled in, and the names a program may open it by
  std::string unit, shown;
  std::vector<std::string> names;    // modules built from it (x.ptx, x64.fatbin ...), the file itself first
  std::vector<std::string> headers;  // CUDA headers it includes (an NVRTC program looks for them)
};
inline std::vector<ModuleFile>& module_files() { static std::vector<ModuleFile> v; return v; }
inline int add_module_file(const char* unit, const char* shown, std::initializer_list<const char*> names,
                           std::initializer_list<const char*> headers) {
  ModuleFile m{unit, shown, {}, {}};
  for (const char* n : names) m.names.push_back(n);
  for (const char* h : headers) m.headers.push_back(h);
  module_files().push_back(m);
  return 0;
}
inline std::string base_name(const char* path) {
  std::string p = path ? path : "";
  size_t s = p.find_last_of("/\\");
  return s == std::string::npos ? p : p.substr(s + 1);
}
inline std::string units_list() {
  std::string s;
  for (auto& m : module_files()) s += (s.empty() ? "" : ", ") + m.shown;
  return s.empty() ? std::string("none") : s;
}

// the parameter slots of cuLaunchKernel (kernelParams: one pointer per parameter; extra: one buffer holding the
// parameters one after another at their alignment) read as the kernel's own parameter types
template <class... P> struct Trampoline {
  static void run(void* fn, const ksim_host::Site& s, const ksim_host::Cfg& c, void** params, void** extra) {
    auto k = (void (*)(P...))fn;
    constexpr size_t n = sizeof...(P);
    if (params || n == 0) {
      void* none[1] = {nullptr};
      ksim_host::launch_slots(s, c, k, params ? params : none, std::index_sequence_for<P...>{});
      return;
    }
    char* buf = nullptr;
    size_t size = 0;
    bool sized = false;
    for (int i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = (char*)extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) { size = *(size_t*)extra[i + 1]; sized = true; }
      else ksim_host::stop("program", std::string("cuLaunchKernel of ") + s.kernel + ": an option of `extra` other "
                           "than CU_LAUNCH_PARAM_BUFFER_POINTER / CU_LAUNCH_PARAM_BUFFER_SIZE", s.file, s.line);
    }
    if (!buf)
      ksim_host::stop("program", std::string("cuLaunchKernel of ") + s.kernel + " passes neither kernelParams nor a "
                      "CU_LAUNCH_PARAM_BUFFER_POINTER in `extra` for its parameters", s.file, s.line);
    void* slots[n];
    size_t at = 0, i = 0;
    ((at = (at + alignof(std::decay_t<P>) - 1) / alignof(std::decay_t<P>) * alignof(std::decay_t<P>),
      slots[i++] = buf + at, at += sizeof(std::decay_t<P>)), ...);
    if (sized && at > size)
      ksim_host::stop("program", std::string("cuLaunchKernel of ") + s.kernel + ": its parameter buffer holds " +
                      std::to_string(size) + " bytes, the kernel's parameters take " + std::to_string(at), s.file, s.line);
    ksim_host::launch_slots(s, c, k, slots, std::index_sequence_for<P...>{});
  }
};
// a kernel of the file `unit`, known to modules as `name` (host_driver.py writes one per kernel)
template <class... P>
inline int add(const char* unit, const char* name, const char* kernel, const char* targs, void (*k)(P...)) {
  kernels().push_back(new CUfunc_st{unit, name, kernel, targs, (void*)k, &Trampoline<P...>::run, (int)sizeof...(P)});
  return 0;
}

inline std::string squeeze(const std::string& s) {
  std::string o;
  for (char c : s) if (c != ' ' && c != '\t') o += c;
  return o;
}
// a name as cuModuleGetFunction may be given it: as declared, a name expression, or a mangled C++ name (the form
// nvrtcGetLoweredName gives on a GPU), demangled and stripped of its return type and parameters
inline std::string plain_name(const char* name) {
  std::string n = name ? name : "";
  if (n.rfind("_Z", 0) != 0) return squeeze(n);
  int status = 0;
  char* d = abi::__cxa_demangle(n.c_str(), nullptr, nullptr, &status);
  if (!d || status != 0) return n;
  std::string s = d;
  free(d);
  int depth = 0;
  size_t end = s.size();
  for (size_t i = 0; i < s.size(); i++) {   // the parameter list: the first '(' outside template arguments
    if (s[i] == '<') depth++;
    else if (s[i] == '>') depth--;
    else if (s[i] == '(' && depth == 0) { end = i; break; }
  }
  s = s.substr(0, end);
  depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); i++) {   // the return type: up to the last space outside template arguments
    if (s[i] == '<') depth++;
    else if (s[i] == '>') depth--;
    else if (s[i] == ' ' && depth == 0) start = i + 1;
  }
  s = s.substr(start);
  size_t colon = std::string::npos;
  depth = 0;
  for (size_t i = 0; i + 1 < s.size(); i++) {   // namespaces: the kernels are registered by their own names
    if (s[i] == '<') depth++;
    else if (s[i] == '>') depth--;
    else if (depth == 0 && s[i] == ':' && s[i + 1] == ':') colon = i + 1;
  }
  if (colon != std::string::npos) s = s.substr(colon + 1);
  return squeeze(s);
}

inline const ModuleFile* file_of_unit(const std::string& unit) {
  for (auto& m : module_files()) if (m.unit == unit) return &m;
  return nullptr;
}
inline const ModuleFile* file_named(const std::string& base) {
  for (auto& m : module_files())
    for (auto& n : m.names) if (n == base) return &m;
  return nullptr;
}
static const char MARK[] = "KSIM-MODULE ";
// the kernel file an image stands for: the stand-in's own marker, or the .entry names of a PTX text
inline const ModuleFile* file_of_image(const void* image) {
  if (!image) return nullptr;
  const char* t = (const char*)image;
  if (strncmp(t, MARK, sizeof MARK - 1) == 0) {
    const char* e = strchr(t, '\n');
    std::string unit = e ? std::string(t + sizeof MARK - 1, e) : std::string(t + sizeof MARK - 1);
    return file_of_unit(unit);
  }
  size_t len = strnlen(t, 1 << 24);
  std::string text(t, len);
  std::vector<std::string> entries;
  for (size_t at = text.find(".entry"); at != std::string::npos; at = text.find(".entry", at + 6)) {
    size_t b = text.find_first_not_of(" \t", at + 6), e = text.find_first_of(" \t(\n", b);
    if (b != std::string::npos && e != std::string::npos) entries.push_back(plain_name(text.substr(b, e - b).c_str()));
  }
  for (auto& m : module_files()) {
    size_t hit = 0;
    for (auto& en : entries)
      for (auto* k : kernels()) if (k->unit == m.unit && squeeze(k->name) == en) { hit++; break; }
    if (!entries.empty() && hit == entries.size()) return &m;
  }
  return nullptr;
}
// a module whose kernel file cannot be told: the only kernel file compiled in, else the capture stops
inline const ModuleFile* only_file(const std::string& what, const char* file, int line) {
  if (module_files().size() == 1) {
    ksim_host::note("module", what + ": the capture cannot tell which kernel file it was built from; it stands for "
                    "the kernels of " + module_files()[0].shown + ", the only kernel file the program names", file, line);
    return &module_files()[0];
  }
  ksim_host::stop("program", what + ": the capture cannot tell which kernel file it was built from (kernel files the "
                  "program names, compiled into the capture: " + units_list() + "); name the module after its kernel "
                  "file (x.cu -> x.ptx, x.cubin, x.fatbin)", file, line);
}
inline CUresult module_of(CUmodule* m, const ModuleFile* mf) {
  if (!m) return CUDA_ERROR_INVALID_VALUE;
  *m = new CUmod_st{mf->unit};
  return CUDA_SUCCESS;
}
inline CUresult module_load(CUmodule* m, const char* path, const char* file, int line) {
  const ModuleFile* mf = file_named(base_name(path));
  struct stat sb;
  if (mf && path && stat(path, &sb) != 0)
    ksim_host::note("module", base_name(path) + " is not there (cuModuleLoad(\"" + path + "\")): the module stands for "
                    "the kernels of " + mf->shown + " compiled into the capture (no module file is ever loaded)", file, line);
  if (!mf) {
    std::string text;
    if (FILE* f = ::fopen(path, "rb")) {
      char b[4096];
      size_t n;
      while ((n = fread(b, 1, sizeof b, f)) > 0 && text.size() < (16u << 20)) text.append(b, n);
      fclose(f);
      mf = file_of_image(text.c_str());
    } else {
      return CUDA_ERROR_FILE_NOT_FOUND;
    }
  }
  if (!mf) mf = only_file(std::string("cuModuleLoad(\"") + (path ? path : "") + "\")", file, line);
  return module_of(m, mf);
}
inline CUresult module_load_data(CUmodule* m, const void* image, const char* call, const char* file, int line) {
  const ModuleFile* mf = file_of_image(image);
  if (!mf) mf = only_file(std::string(call) + " of a module image", file, line);
  return module_of(m, mf);
}
inline CUresult get_function(CUfunction* f, CUmodule m, const char* name, const char* file, int line) {
  if (!f || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  std::string want = plain_name(name), have;
  for (auto* k : kernels()) {
    if (k->unit != m->unit) continue;
    if (squeeze(k->name) == want || (k->name == name)) { *f = k; return CUDA_SUCCESS; }
    have += (have.empty() ? "" : ", ") + k->name;
  }
  const ModuleFile* mf = file_of_unit(m->unit);
  ksim_host::stop("program", std::string("cuModuleGetFunction(\"") + name + "\"): the module stands for " +
                  (mf ? mf->shown : m->unit) + ", which has no kernel of that name compiled into the capture (" +
                  (have.empty() ? std::string("none") : have) + "); a template kernel is found by the name expression "
                  "the program gives nvrtcAddNameExpression", file, line);
}
inline CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, CUstream stream, void** params, void** extra, const char* file, int line) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (!params && !extra && f->nparams > 0)
    ksim_host::stop("program", "cuLaunchKernel of " + f->kernel + " without kernelParams or extra for its " +
                    std::to_string(f->nparams) + " parameter(s)", file, line);
  ksim_host::Site s{f->kernel.c_str(), f->targs.c_str(), file, line};
  cudaError_t& last = ksim_host::st().last_error;
  cudaError_t before = last;
  last = cudaSuccess;
  f->run(f->fn, s, ksim_host::cfg(dim3(gx, gy, gz), dim3(bx, by, bz), smem, (cudaStream_t)stream), params, extra);
  cudaError_t got = last;   // an invalid geometry: not run, and the driver's error returned (not cudaGetLastError's)
  last = before;
  return got == cudaErrorInvalidConfiguration ? CUDA_ERROR_INVALID_VALUE
       : got == cudaErrorLaunchOutOfResources ? CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES : CUDA_SUCCESS;
}

// A file the program opens that is not there: a module built from a kernel file compiled in (x64.fatbin), or a
// CUDA header such a kernel file includes (an NVRTC program looks for cooperative_groups.h to pass its folder):
// the capture's marker file of that name, in the capture's folder, opened instead (a note says so). Nothing else
// is made up. Called by the fopen/fopen64 that KSIM_DRIVER_OPEN_STAND_INS defines.
inline FILE* stand_in_open(const char* path, const char* mode, FILE* (*real)(const char*, const char*)) {
  if (!path || !mode || strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+')) return nullptr;
  std::string base = base_name(path);
  const ModuleFile* mf = nullptr;
  bool header = false;
  for (auto& m : module_files()) {
    for (size_t i = 1; i < m.names.size() && !mf; i++) if (m.names[i] == base) mf = &m;
    for (auto& h : m.headers) if (h == base && !mf) { mf = &m; header = true; }
    if (mf) break;
  }
  if (!mf) return nullptr;
  std::string dir = ksim_host::st().dir + "/modules";
  mkdir(dir.c_str(), 0755);
  std::string marker = dir + "/" + base;
  struct stat sb;
  if (stat(marker.c_str(), &sb) != 0) {
    if (FILE* w = real(marker.c_str(), "wb")) {
      std::string body = header ? std::string("// ksearch CPU capture: stands for CUDA's ") + base +
                                      " (the kernel is compiled with the capture's own CUDA headers)\n"
                                : std::string(MARK) + mf->unit + "\n// ksearch CPU capture: stands for a module built "
                                      "from " + mf->shown + ", whose kernels are compiled into the capture\n";
      fwrite(body.data(), 1, body.size(), w);
      fclose(w);
    }
  }
  FILE* f = real(marker.c_str(), mode);
  if (f)
    ksim_host::note("module", header
        ? base + " is not where the program looks for it (" + path + "): the capture opened a marker file of that name "
          "instead (" + mf->shown + " includes it; the capture compiles that file with its own CUDA headers)"
        : base + " is not there (the program opened " + path + "): the capture opened a marker file of that name "
          "instead, which stands for the kernels of " + mf->shown + " compiled into the capture (no module file is "
          "ever loaded)");
  return f;
}
}  // namespace ksim_drv

// the definitions the capture's driver unit holds (host_driver.py): libstdc++'s streams open through fopen64
#define KSIM_DRIVER_OPEN_STAND_INS \
  extern "C" FILE* fopen(const char* path, const char* mode) { \
    static FILE* (*real)(const char*, const char*) = (FILE* (*)(const char*, const char*))dlsym(RTLD_NEXT, "fopen"); \
    FILE* f = real(path, mode); \
    if (!f) { int e = errno; f = ksim_drv::stand_in_open(path, mode, real); if (!f) errno = e; } \
    return f; } \
  extern "C" FILE* fopen64(const char* path, const char* mode) { \
    static FILE* (*real)(const char*, const char*) = (FILE* (*)(const char*, const char*))dlsym(RTLD_NEXT, "fopen64"); \
    FILE* f = real(path, mode); \
    if (!f) { int e = errno; f = ksim_drv::stand_in_open(path, mode, real); if (!f) errno = e; } \
    return f; }

// ------------------------------------------------------------------------------------------------
// The driver API's calls
// ------------------------------------------------------------------------------------------------
inline CUresult ksim_drv_ok(cudaError_t e) { return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
inline CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
inline CUresult cuDriverGetVersion(int* v) { *v = CUDA_VERSION; return CUDA_SUCCESS; }
inline CUresult cuDeviceGetCount(int* n) { *n = 1; return CUDA_SUCCESS; }
inline CUresult cuDeviceGet(CUdevice* d, int i) { if (i != 0) return CUDA_ERROR_INVALID_DEVICE; *d = i; return CUDA_SUCCESS; }
inline CUresult cuDeviceGetName(char* s, int n, CUdevice) { snprintf(s, n, "NVIDIA H200 (ksearch CPU capture)"); return CUDA_SUCCESS; }
inline CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  return cudaDeviceGetAttribute(v, (cudaDeviceAttr)a, d) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
inline CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice) {
  cudaDeviceProp p = ksim_host::device_prop();
  *major = p.major; *minor = p.minor;
  return CUDA_SUCCESS;
}
inline CUresult cuDeviceTotalMem(size_t* b, CUdevice) { *b = 141ull << 30; return CUDA_SUCCESS; }
inline CUresult cuDeviceCanAccessPeer(int* can, CUdevice, CUdevice) { *can = 0; return CUDA_SUCCESS; }
inline CUresult cuCtxCreate(CUcontext* c, unsigned, CUdevice d) { *c = new CUctx_st{d}; return CUDA_SUCCESS; }
inline CUresult cuCtxCreate(CUcontext* c, CUctxCreateParams*, unsigned, CUdevice d) { *c = new CUctx_st{d}; return CUDA_SUCCESS; }
inline CUresult cuCtxDestroy(CUcontext c) { delete c; return CUDA_SUCCESS; }
inline CUresult cuCtxGetDevice(CUdevice* d) { *d = 0; return CUDA_SUCCESS; }
inline CUresult cuCtxGetCurrent(CUcontext* c) { static CUctx_st one{0}; *c = &one; return CUDA_SUCCESS; }
inline CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
inline CUresult cuCtxPushCurrent(CUcontext) { return CUDA_SUCCESS; }
inline CUresult cuCtxPopCurrent(CUcontext* c) { if (c) *c = nullptr; return CUDA_SUCCESS; }
inline CUresult cuCtxSynchronize() { return cudaDeviceSynchronize() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN; }
inline CUresult cuCtxSetCacheConfig(CUfunc_cache) { return CUDA_SUCCESS; }
inline CUresult cuCtxGetApiVersion(CUcontext, unsigned* v) { *v = 3020; return CUDA_SUCCESS; }
inline CUresult cuCtxEnablePeerAccess(CUcontext, unsigned) { return CUDA_SUCCESS; }
inline CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) { return cuCtxGetCurrent(c); }
inline CUresult cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
inline CUresult cuDevicePrimaryCtxReset(CUdevice) { return CUDA_SUCCESS; }
inline CUresult cuMemAlloc(CUdeviceptr* p, size_t n) {
  void* q = nullptr;
  cudaError_t e = ksim_host::device_malloc(&q, n, ksim_host::M_DEVICE);
  *p = (CUdeviceptr)q;
  return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
inline CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned) {
  void* q = nullptr;
  cudaError_t e = ksim_host::device_malloc(&q, n, ksim_host::M_MANAGED);
  *p = (CUdeviceptr)q;
  return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
inline CUresult cuMemAllocPitch(CUdeviceptr* p, size_t* pitch, size_t w, size_t h, unsigned) {
  *pitch = (w + 511) / 512 * 512;
  return cuMemAlloc(p, *pitch * h);
}
inline CUresult cuMemFree(CUdeviceptr p) { return ksim_drv_ok(cudaFree((void*)p)); }
// the allocation holding p; a pointer into no allocation is a string of the program's image (a device-side
// `__FILE__`): its bytes up to the terminating zero
inline CUresult cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (const ksim_host::Alloc* a = ksim_host::find_alloc((const void*)p)) {
    if (base) *base = (CUdeviceptr)a->ptr;
    if (size) *size = a->n;
    return CUDA_SUCCESS;
  }
  if (base) *base = p;
  if (size) *size = strlen((const char*)p) + 1;
  return CUDA_SUCCESS;
}
#define cuMemGetAddressRange_v2 cuMemGetAddressRange
inline CUresult cuMemAllocHost(void** p, size_t n) { return ksim_drv_ok(ksim_host::device_malloc(p, n, ksim_host::M_HOST)); }
inline CUresult cuMemHostAlloc(void** p, size_t n, unsigned) { return cuMemAllocHost(p, n); }
inline CUresult cuMemFreeHost(void* p) { return ksim_drv_ok(cudaFreeHost(p)); }
inline CUresult cuMemHostGetDevicePointer(CUdeviceptr* d, void* h, unsigned) { *d = (CUdeviceptr)h; return CUDA_SUCCESS; }
inline CUresult cuMemHostRegister(void*, size_t, unsigned) { return CUDA_SUCCESS; }
inline CUresult cuMemHostUnregister(void*) { return CUDA_SUCCESS; }
inline CUresult cuMemGetInfo(size_t* f, size_t* t) { return ksim_drv_ok(cudaMemGetInfo(f, t)); }
inline CUresult cuMemcpyHtoD(CUdeviceptr d, const void* s, size_t n) { return ksim_drv_ok(cudaMemcpy((void*)d, s, n)); }
inline CUresult cuMemcpyDtoH(void* d, CUdeviceptr s, size_t n) { return ksim_drv_ok(cudaMemcpy(d, (const void*)s, n)); }
inline CUresult cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) { return ksim_drv_ok(cudaMemcpy((void*)d, (const void*)s, n)); }
inline CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpyDtoD(d, s, n); }
inline CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, CUstream) { return cuMemcpyHtoD(d, s, n); }
inline CUresult cuMemcpyDtoHAsync(void* d, CUdeviceptr s, size_t n, CUstream) { return cuMemcpyDtoH(d, s, n); }
inline CUresult cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) { return cuMemcpyDtoD(d, s, n); }
inline CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) { return cuMemcpyDtoD(d, s, n); }
namespace ksim_drv {
inline CUresult memcpy2d(const CUDA_MEMCPY2D* c, const char* file, int line) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
    ksim_host::gpu_only("CUDA arrays through the driver API (cuMemcpy2D to or from a CUarray)", file, line);
  const char* s = (c->srcMemoryType == CU_MEMORYTYPE_HOST ? (const char*)c->srcHost : (const char*)c->srcDevice) +
                  c->srcY * c->srcPitch + c->srcXInBytes;
  char* d = (c->dstMemoryType == CU_MEMORYTYPE_HOST ? (char*)c->dstHost : (char*)c->dstDevice) +
            c->dstY * c->dstPitch + c->dstXInBytes;
  for (size_t r = 0; r < c->Height; r++) memmove(d + r * c->dstPitch, s + r * c->srcPitch, c->WidthInBytes);
  return CUDA_SUCCESS;
}
}  // namespace ksim_drv
#define cuMemcpy2D(c) ksim_drv::memcpy2d(c, __FILE__, __LINE__)
#define cuMemcpy2DUnaligned(c) ksim_drv::memcpy2d(c, __FILE__, __LINE__)
#define cuMemcpy2DAsync(c, s) ksim_drv::memcpy2d(c, __FILE__, __LINE__)
inline CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) { memset((void*)d, v, n); return CUDA_SUCCESS; }
inline CUresult cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n) {
  for (size_t i = 0; i < n; i++) ((unsigned short*)d)[i] = v;
  return CUDA_SUCCESS;
}
inline CUresult cuMemsetD32(CUdeviceptr d, unsigned v, size_t n) {
  for (size_t i = 0; i < n; i++) ((unsigned*)d)[i] = v;
  return CUDA_SUCCESS;
}
inline CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream) { return cuMemsetD8(d, v, n); }
inline CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream) { return cuMemsetD16(d, v, n); }
inline CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream) { return cuMemsetD32(d, v, n); }
inline CUresult cuStreamCreate(CUstream* s, unsigned) { return ksim_drv_ok(cudaStreamCreate(s)); }
inline CUresult cuStreamCreateWithPriority(CUstream* s, unsigned, int) { return ksim_drv_ok(cudaStreamCreate(s)); }
inline CUresult cuStreamDestroy(CUstream) { return CUDA_SUCCESS; }
inline CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
inline CUresult cuStreamQuery(CUstream) { return CUDA_SUCCESS; }
inline CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned) { return CUDA_SUCCESS; }
inline CUresult cuEventCreate(CUevent* e, unsigned) { return ksim_drv_ok(cudaEventCreate(e)); }
inline CUresult cuEventDestroy(CUevent e) { return ksim_drv_ok(cudaEventDestroy(e)); }
inline CUresult cuEventRecord(CUevent e, CUstream s) { return ksim_drv_ok(cudaEventRecord(e, s)); }
inline CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
inline CUresult cuEventQuery(CUevent) { return CUDA_SUCCESS; }
inline CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) { return ksim_drv_ok(cudaEventElapsedTime(ms, a, b)); }
// one table for the driver's error names and texts (the codes this stand-in returns)
struct ksim_drv_error { CUresult code; const char* name; const char* text; };
inline const ksim_drv_error* ksim_drv_error_of(CUresult r) {
  static const ksim_drv_error table[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
  };
  for (const auto& e : table) if (e.code == r) return &e;
  return nullptr;
}
inline CUresult cuGetErrorName(CUresult r, const char** s) {
  const ksim_drv_error* e = ksim_drv_error_of(r);
  *s = e ? e->name : "CUDA_ERROR_UNKNOWN";
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
inline CUresult cuGetErrorString(CUresult r, const char** s) {
  const ksim_drv_error* e = ksim_drv_error_of(r);
  *s = e ? e->text : "unknown error";
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
#define cuModuleLoad(m, path) ksim_drv::module_load(m, path, __FILE__, __LINE__)
#define cuModuleLoadData(m, image) ksim_drv::module_load_data(m, image, "cuModuleLoadData", __FILE__, __LINE__)
#define cuModuleLoadDataEx(m, image, ...) ksim_drv::module_load_data(m, image, "cuModuleLoadDataEx", __FILE__, __LINE__)
#define cuModuleLoadFatBinary(m, image) ksim_drv::module_load_data(m, image, "cuModuleLoadFatBinary", __FILE__, __LINE__)
inline CUresult cuModuleUnload(CUmodule m) { delete m; return CUDA_SUCCESS; }
#define cuModuleGetFunction(f, m, name) ksim_drv::get_function(f, m, name, __FILE__, __LINE__)
// a module's __device__ / __constant__ variable: the one of that name the capture registered (file-scope variables
// of the program's units, the kernel files among them)
inline CUresult cuModuleGetGlobal(CUdeviceptr* p, size_t* bytes, CUmodule m, const char* name) {
  if (!m || !name) return CUDA_ERROR_INVALID_VALUE;
  for (auto& a : ksim_host::st().symbols)
    if (a.name == name) {
      if (p) *p = (CUdeviceptr)a.ptr;
      if (bytes) *bytes = a.n;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}
#define cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra) \
  ksim_drv::launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra, __FILE__, __LINE__)
#define cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params) \
  ksim_drv::launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, nullptr, __FILE__, __LINE__)
inline CUresult cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction) {
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = 48 * 1024; break;
    default: *v = 0;
  }
  return CUDA_SUCCESS;
}
inline CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; }
inline CUresult cuFuncSetCacheConfig(CUfunction, CUfunc_cache) { return CUDA_SUCCESS; }
inline CUresult cuOccupancyMaxPotentialBlockSize(int* grid, int* block, CUfunction, CUoccupancyB2DSize, size_t, int limit) {
  int b = limit > 0 ? std::min(limit, 1024) : 1024;
  if (block) *block = b;
  if (grid) *grid = 132 * (2048 / b);
  return CUDA_SUCCESS;
}
inline CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction, int block, size_t) {
  *n = block > 0 ? std::max(1, 2048 / block) : 0;
  return CUDA_SUCCESS;
}

// ------------------------------------------------------------------------------------------------
// NVRTC: a program stands for the kernel file it was created from (by name); compiling it gives a marker image
// (as PTX and as CUBIN) that cuModuleLoadData resolves to that file's kernels, compiled into the capture
// ------------------------------------------------------------------------------------------------
typedef enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_OUT_OF_MEMORY = 1, NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
  NVRTC_ERROR_INVALID_INPUT = 3, NVRTC_ERROR_INVALID_PROGRAM = 4, NVRTC_ERROR_INVALID_OPTION = 5,
  NVRTC_ERROR_COMPILATION = 6, NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
  NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8, NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9,
  NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10, NVRTC_ERROR_INTERNAL_ERROR = 11 } nvrtcResult;
struct _nvrtcProgram {
  std::string unit, name, log, image;
  std::vector<std::string> exprs;
  bool compiled;
};
typedef _nvrtcProgram* nvrtcProgram;
namespace ksim_drv {
inline nvrtcResult nvrtc_create(nvrtcProgram* p, const char* src, const char* name, const char* file, int line) {
  if (!p || !src) return NVRTC_ERROR_INVALID_INPUT;
  const ModuleFile* mf = file_named(base_name(name));
  if (!mf)
    ksim_host::stop("program", std::string("nvrtcCreateProgram of a source named \"") + (name ? name : "(none)") +
                    "\": no kernel file of that name is compiled into the capture (it compiles the kernel files the "
                    "program names in a string: " + units_list() + "); a kernel source the program builds in memory "
                    "cannot be captured", file, line);
  *p = new _nvrtcProgram{mf->unit, name ? name : "", "", "", {}, false};
  return NVRTC_SUCCESS;
}
inline nvrtcResult nvrtc_compile(nvrtcProgram p, int n, const char* const* opts, const char* file, int line) {
  if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
  std::string macros;
  for (int i = 0; i < n && opts; i++) {
    std::string o = opts[i] ? opts[i] : "";
    if (o.rfind("-D", 0) == 0 || o.rfind("--define-macro", 0) == 0) macros += (macros.empty() ? "" : " ") + o;
  }
  if (!macros.empty())
    ksim_host::note("stubbed", "NVRTC options " + macros + " were not applied: " + p->name + " is compiled into the "
                    "capture as the file reads, without them", file, line);
  p->image = std::string(MARK) + p->unit + "\n// ksearch CPU capture: stands for NVRTC's compilation of " + p->name +
             ", whose kernels are compiled into the capture\n";
  p->compiled = true;
  return NVRTC_SUCCESS;
}
inline nvrtcResult nvrtc_code_size(nvrtcProgram p, size_t* n) {
  if (!p || !n) return NVRTC_ERROR_INVALID_INPUT;
  if (!p->compiled) return NVRTC_ERROR_INVALID_PROGRAM;
  *n = p->image.size() + 1;
  return NVRTC_SUCCESS;
}
inline nvrtcResult nvrtc_code(nvrtcProgram p, char* out) {
  if (!p || !out) return NVRTC_ERROR_INVALID_INPUT;
  if (!p->compiled) return NVRTC_ERROR_INVALID_PROGRAM;
  memcpy(out, p->image.c_str(), p->image.size() + 1);
  return NVRTC_SUCCESS;
}
}  // namespace ksim_drv
#define nvrtcCreateProgram(p, src, name, ...) ksim_drv::nvrtc_create(p, src, name, __FILE__, __LINE__)
#define nvrtcCompileProgram(p, n, opts) ksim_drv::nvrtc_compile(p, n, opts, __FILE__, __LINE__)
inline nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t* n) { return ksim_drv::nvrtc_code_size(p, n); }
inline nvrtcResult nvrtcGetPTX(nvrtcProgram p, char* out) { return ksim_drv::nvrtc_code(p, out); }
inline nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t* n) { return ksim_drv::nvrtc_code_size(p, n); }
inline nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char* out) { return ksim_drv::nvrtc_code(p, out); }
#define nvrtcGetLTOIRSize(...) (ksim_host::gpu_only("NVRTC's LTO IR (nvrtcGetLTOIRSize)", __FILE__, __LINE__), NVRTC_ERROR_INVALID_OPTION)
#define nvrtcGetLTOIR(...) (ksim_host::gpu_only("NVRTC's LTO IR (nvrtcGetLTOIR)", __FILE__, __LINE__), NVRTC_ERROR_INVALID_OPTION)
inline nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t* n) {
  if (!p || !n) return NVRTC_ERROR_INVALID_INPUT;
  *n = p->log.size() + 1;
  return NVRTC_SUCCESS;
}
inline nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char* out) {
  if (!p || !out) return NVRTC_ERROR_INVALID_INPUT;
  memcpy(out, p->log.c_str(), p->log.size() + 1);
  return NVRTC_SUCCESS;
}
inline nvrtcResult nvrtcAddNameExpression(nvrtcProgram p, const char* expr) {
  if (!p || !expr) return NVRTC_ERROR_INVALID_INPUT;
  if (p->compiled) return NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION;
  p->exprs.push_back(expr);
  return NVRTC_SUCCESS;
}
// the lowered name is the name expression itself: cuModuleGetFunction finds a kernel by it
inline nvrtcResult nvrtcGetLoweredName(nvrtcProgram p, const char* expr, const char** lowered) {
  if (!p || !expr || !lowered) return NVRTC_ERROR_INVALID_INPUT;
  if (!p->compiled) return NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION;
  for (auto& e : p->exprs) if (e == expr) { *lowered = e.c_str(); return NVRTC_SUCCESS; }
  return NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID;
}
inline nvrtcResult nvrtcDestroyProgram(nvrtcProgram* p) {
  if (!p) return NVRTC_ERROR_INVALID_INPUT;
  delete *p;
  *p = nullptr;
  return NVRTC_SUCCESS;
}
inline const char* nvrtcGetErrorString(nvrtcResult r) {
  switch (r) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_INVALID_OPTION: return "NVRTC_ERROR_INVALID_OPTION";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    case NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION: return "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION";
    case NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION: return "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION";
    case NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID: return "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID";
    default: return "NVRTC_ERROR_INTERNAL_ERROR";
  }
}
inline nvrtcResult nvrtcVersion(int* major, int* minor) { *major = 12; *minor = 4; return NVRTC_SUCCESS; }
inline nvrtcResult nvrtcGetNumSupportedArchs(int* n) { *n = 1; return NVRTC_SUCCESS; }
inline nvrtcResult nvrtcGetSupportedArchs(int* a) { a[0] = 90; return NVRTC_SUCCESS; }
