"""Stand-ins for the helper headers of NVIDIA's CUDA samples (``helper_cuda.h``, ``helper_functions.h``,
``helper_string.h``, ``helper_timer.h``, ``helper_image.h``, ``helper_math.h``), which much public CUDA code includes
without shipping (it expects the samples' ``Common/`` folder on the include path).

Used by the capture ONLY where the program's include path has no such header (host_source.build_program asks
host_source._find first: a real ``helper_cuda.h`` in the file's folder, include_dirs, a folder the build files name or
an ancestor's ``Common/`` always wins). Written here from the functions' documented behaviour (names, arguments,
return values), not from NVIDIA's text: checkCudaErrors prints the failing call and exits, findCudaDevice picks the
device named by ``-device=N`` or device 0, the command-line readers take ``-name=value`` arguments (one or two leading
dashes, names compared without case), sdkFindFilePath returns a malloc'ed path to an existing file or NULL, timers
measure milliseconds. In the capture's CPU runtime ``float3`` and the other vector types are ksim::vec, whose
arithmetic operators (vector with vector and with scalar) ksim.h already defines; helper_math.h adds the functions
(dot, length, normalize, cross, lerp, clamp, ...) and the converting ``make_`` overloads.

A name a program uses that these lack ends the capture with one line naming it (capture._explain_compile)."""
from __future__ import annotations

HELPER_STRING = r"""#pragma once
// ksim capture: stand-in for the CUDA samples' helper_string.h (the real one was not on the include path)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <string>
#include <unistd.h>
#ifndef STRCASECMP
#define STRCASECMP strcasecmp
#endif
#ifndef STRNCASECMP
#define STRNCASECMP strncasecmp
#endif
#ifndef STRCPY
#define STRCPY(dst, size, src) strcpy(dst, src)
#endif
#ifndef FOPEN
#define FOPEN(fHandle, filename, mode) (fHandle = fopen(filename, mode))
#endif
#ifndef FOPEN_FAIL
#define FOPEN_FAIL(result) (result == NULL)
#endif
#ifndef SSCANF
#define SSCANF sscanf
#endif
#ifndef SPRINTF
#define SPRINTF sprintf
#endif
#ifndef EXIT_WAIVED
#define EXIT_WAIVED 2
#endif

// the argument without its leading delimiters ("--n=4" -> "n=4")
inline int stringRemoveDelimiter(char delimiter, const char* string) {
  int k = 0;
  while (string[k] == delimiter) k++;
  if (k >= (int)strlen(string) - 1) return 0;
  return k;
}
inline int getFileExtension(char* filename, char** extension) {
  int n = (int)strlen(filename);
  while (n > 0 && filename[n - 1] != '.') n--;
  if (n == 0) { *extension = NULL; return 0; }
  *extension = &filename[n];
  return n;
}
namespace ksim_helpers {
// the argument `arg` (delimiters removed) names `ref`: its name (up to '=') equals ref, without case
inline const char* named(const char* arg, const char* ref) {
  const char* a = arg + stringRemoveDelimiter('-', arg);
  size_t n = strlen(ref);
  const char* eq = strchr(a, '=');
  size_t an = eq ? (size_t)(eq - a) : strlen(a);
  if (an != n || STRNCASECMP(a, ref, n) != 0) return NULL;
  return eq ? eq + 1 : a + an;
}
}  // namespace ksim_helpers
inline bool checkCmdLineFlag(const int argc, const char** argv, const char* string_ref) {
  for (int i = 1; i < argc; i++)
    if (argv[i] && argv[i][0] == '-' && ksim_helpers::named(argv[i], string_ref)) return true;
  return false;
}
template <class T>
inline bool getCmdLineArgumentValue(const int argc, const char** argv, const char* string_ref, T* value) {
  for (int i = 1; i < argc; i++) {
    const char* v = argv[i] && argv[i][0] == '-' ? ksim_helpers::named(argv[i], string_ref) : NULL;
    if (v) { *value = (T)atof(v); return true; }
  }
  return false;
}
inline int getCmdLineArgumentInt(const int argc, const char** argv, const char* string_ref) {
  for (int i = 1; i < argc; i++) {
    const char* v = argv[i] && argv[i][0] == '-' ? ksim_helpers::named(argv[i], string_ref) : NULL;
    if (v) return atoi(v);
  }
  return 0;
}
inline float getCmdLineArgumentFloat(const int argc, const char** argv, const char* string_ref) {
  for (int i = 1; i < argc; i++) {
    const char* v = argv[i] && argv[i][0] == '-' ? ksim_helpers::named(argv[i], string_ref) : NULL;
    if (v) return (float)atof(v);
  }
  return 0.0f;
}
inline bool getCmdLineArgumentString(const int argc, const char** argv, const char* string_ref, char** string_retval) {
  for (int i = 1; i < argc; i++) {
    const char* v = argv[i] && argv[i][0] == '-' ? ksim_helpers::named(argv[i], string_ref) : NULL;
    if (v && *v) { *string_retval = (char*)v; return true; }
  }
  *string_retval = NULL;
  return false;
}
// a path to an existing file `filename` (in the working folder, the executable's folder, their data/ folders and
// those of a few ancestors), malloc'ed; NULL where there is none
inline char* sdkFindFilePath(const char* filename, const char* executable_path) {
  if (!filename) return NULL;
  std::string exe_dir = ".";
  if (executable_path) {
    std::string e(executable_path);
    size_t s = e.find_last_of('/');
    if (s != std::string::npos) exe_dir = e.substr(0, s);
  }
  const char* rel[] = {"", "data/", "../data/", "../../data/", "../../../data/", "../", "../../",
                       "../../../Samples/data/", "../../../../Samples/data/"};
  std::string bases[] = {std::string(""), exe_dir + "/"};
  for (const std::string& b : bases)
    for (const char* r : rel) {
      std::string p = (filename[0] == '/') ? std::string(filename) : b + r + filename;
      FILE* f = fopen(p.c_str(), "rb");
      if (f) {
        fclose(f);
        char* out = (char*)malloc(p.size() + 1);
        memcpy(out, p.c_str(), p.size() + 1);
        return out;
      }
      if (filename[0] == '/') return NULL;
    }
  return NULL;
}
"""

HELPER_TIMER = r"""#pragma once
// ksim capture: stand-in for the CUDA samples' helper_timer.h (the real one was not on the include path)
#include <chrono>
#include <stdio.h>
class StopWatchInterface {
 public:
  StopWatchInterface() {}
  virtual ~StopWatchInterface() {}
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual void reset() = 0;
  virtual float getTime() = 0;          // ms, the running session included
  virtual float getAverageTime() = 0;   // ms per completed start/stop session
};
class StopWatchLinux : public StopWatchInterface {
 public:
  StopWatchLinux() {}
  ~StopWatchLinux() override {}
  void start() override { t0_ = clock::now(); running_ = true; }
  void stop() override {
    if (!running_) return;
    diff_ = ms(clock::now() - t0_);
    total_ += diff_;
    running_ = false;
    sessions_++;
  }
  void reset() override {
    diff_ = total_ = 0.0f;
    sessions_ = 0;
    if (running_) t0_ = clock::now();
  }
  float getTime() override { return total_ + (running_ ? ms(clock::now() - t0_) : 0.0f); }
  float getAverageTime() override { return sessions_ > 0 ? total_ / (float)sessions_ : 0.0f; }
 private:
  typedef std::chrono::steady_clock clock;
  static float ms(clock::duration d) { return std::chrono::duration<float, std::milli>(d).count(); }
  clock::time_point t0_;
  float diff_ = 0.0f, total_ = 0.0f;
  int sessions_ = 0;
  bool running_ = false;
};
typedef StopWatchLinux StopWatchWin;
inline bool sdkCreateTimer(StopWatchInterface** t) { *t = (StopWatchInterface*)new StopWatchLinux(); return *t != NULL; }
inline bool sdkDeleteTimer(StopWatchInterface** t) { if (*t) { delete *t; *t = NULL; } return true; }
inline bool sdkStartTimer(StopWatchInterface** t) { if (*t) (*t)->start(); return true; }
inline bool sdkStopTimer(StopWatchInterface** t) { if (*t) (*t)->stop(); return true; }
inline bool sdkResetTimer(StopWatchInterface** t) { if (*t) (*t)->reset(); return true; }
inline float sdkGetAverageTimerValue(StopWatchInterface** t) { return *t ? (*t)->getAverageTime() : 0.0f; }
inline float sdkGetTimerValue(StopWatchInterface** t) { return *t ? (*t)->getTime() : 0.0f; }
"""

HELPER_IMAGE = r"""#pragma once
// ksim capture: stand-in for the CUDA samples' helper_image.h (the real one was not on the include path):
// binary PGM (P5) and PPM (P6) files of 8-bit samples, and comparisons of arrays
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "helper_string.h"
namespace ksim_helpers {
// the image's bytes (malloc'ed where *data is NULL), its size and channel count; false where it cannot be read
inline bool read_pnm(const char* file, unsigned char** data, unsigned int* w, unsigned int* h, unsigned int* channels) {
  FILE* f = fopen(file, "rb");
  if (!f) { fprintf(stderr, "sdkLoadPPM: cannot open %s\n", file); return false; }
  char magic[3] = {0, 0, 0};
  unsigned int width = 0, height = 0, maxval = 0;
  if (fscanf(f, "%2s", magic) != 1 || (strcmp(magic, "P5") && strcmp(magic, "P6"))) { fclose(f); return false; }
  unsigned int* fields[3] = {&width, &height, &maxval};
  for (int i = 0; i < 3; i++) {
    int c;
    while ((c = fgetc(f)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '#'))
      if (c == '#') while ((c = fgetc(f)) != EOF && c != '\n') {}
    if (c == EOF) { fclose(f); return false; }
    ungetc(c, f);
    if (fscanf(f, "%u", fields[i]) != 1) { fclose(f); return false; }
  }
  fgetc(f);
  unsigned int ch = magic[1] == '5' ? 1 : 3;
  if (*data != NULL && (*w != width || *h != height)) { fclose(f); return false; }
  if (*data == NULL) *data = (unsigned char*)malloc((size_t)width * height * ch);
  size_t n = fread(*data, 1, (size_t)width * height * ch, f);
  fclose(f);
  *w = width; *h = height; *channels = ch;
  return n == (size_t)width * height * ch;
}
inline bool write_pnm(const char* file, const unsigned char* data, unsigned int w, unsigned int h, unsigned int ch) {
  FILE* f = fopen(file, "wb");
  if (!f) return false;
  fprintf(f, "%s\n%u %u\n255\n", ch == 1 ? "P5" : "P6", w, h);
  size_t n = fwrite(data, 1, (size_t)w * h * ch, f);
  fclose(f);
  return n == (size_t)w * h * ch;
}
}  // namespace ksim_helpers
inline bool __loadPPM(const char* file, unsigned char** data, unsigned int* w, unsigned int* h, unsigned int* channels) {
  return ksim_helpers::read_pnm(file, data, w, h, channels);
}
template <class T>
inline bool sdkLoadPGM(const char* file, T** data, unsigned int* w, unsigned int* h) {
  unsigned char* bytes = NULL;
  unsigned int ch = 0;
  if (!ksim_helpers::read_pnm(file, &bytes, w, h, &ch)) return false;
  size_t n = (size_t)*w * *h;
  if (*data == NULL) *data = (T*)malloc(n * sizeof(T));
  for (size_t i = 0; i < n; i++) (*data)[i] = (T)bytes[i * ch];
  free(bytes);
  return true;
}
template <class T>
inline bool sdkSavePGM(const char* file, T* data, unsigned int w, unsigned int h) {
  size_t n = (size_t)w * h;
  unsigned char* bytes = (unsigned char*)malloc(n);
  for (size_t i = 0; i < n; i++) bytes[i] = (unsigned char)data[i];
  bool ok = ksim_helpers::write_pnm(file, bytes, w, h, 1);
  free(bytes);
  return ok;
}
inline bool sdkLoadPPM4ub(const char* file, unsigned char** data, unsigned int* w, unsigned int* h) {
  unsigned char* bytes = NULL;
  unsigned int ch = 0;
  if (!ksim_helpers::read_pnm(file, &bytes, w, h, &ch)) return false;
  size_t n = (size_t)*w * *h;
  if (*data == NULL) *data = (unsigned char*)malloc(n * 4);
  for (size_t i = 0; i < n; i++)
    for (int c = 0; c < 4; c++) (*data)[i * 4 + c] = c < 3 ? bytes[i * ch + (ch == 3 ? c : 0)] : 0;
  free(bytes);
  return true;
}
inline bool sdkLoadPPM4(const char* file, unsigned char** data, unsigned int* w, unsigned int* h) {
  return sdkLoadPPM4ub(file, data, w, h);
}
inline bool sdkSavePPM4ub(const char* file, unsigned char* data, unsigned int w, unsigned int h) {
  size_t n = (size_t)w * h;
  unsigned char* bytes = (unsigned char*)malloc(n * 3);
  for (size_t i = 0; i < n; i++)
    for (int c = 0; c < 3; c++) bytes[i * 3 + c] = data[i * 4 + c];
  bool ok = ksim_helpers::write_pnm(file, bytes, w, h, 3);
  free(bytes);
  return ok;
}
// whether every element of `data` is within `epsilon` of `reference`
template <class T, class S>
inline bool compareData(const T* reference, const T* data, const unsigned int len, const S epsilon,
                        const float threshold) {
  unsigned int bad = 0;
  for (unsigned int i = 0; i < len; i++) {
    double d = (double)reference[i] - (double)data[i];
    if (!(fabs(d) <= (double)epsilon)) bad++;
  }
  return threshold == 0.0f ? bad == 0 : (float)bad <= threshold * (float)len;
}
// relative L2 error of `data` against `reference` below `epsilon`
inline bool sdkCompareL2fe(const float* reference, const float* data, const unsigned int len, const float epsilon) {
  double err = 0.0, ref = 0.0;
  for (unsigned int i = 0; i < len; i++) {
    double d = (double)reference[i] - (double)data[i];
    err += d * d;
    ref += (double)reference[i] * (double)reference[i];
  }
  if (fabs(ref) < 1e-7) return false;
  return sqrt(err / ref) < epsilon;
}
template <class T>
inline bool sdkWriteFile(const char* filename, const T* data, unsigned int len, const T epsilon, bool verbose,
                         bool append = false) {
  FILE* f = fopen(filename, append ? "a" : "w");
  if (!f) return false;
  fprintf(f, "# %g\n", (double)epsilon);
  for (unsigned int i = 0; i < len; i++) fprintf(f, "%.8g ", (double)data[i]);
  fclose(f);
  return true;
}
"""

HELPER_FUNCTIONS = r"""#pragma once
// ksim capture: stand-in for the CUDA samples' helper_functions.h (the real one was not on the include path)
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
#include "helper_string.h"
#include "helper_image.h"
#include "helper_timer.h"
"""

HELPER_CUDA = r"""#pragma once
// ksim capture: stand-in for the CUDA samples' helper_cuda.h (the real one was not on the include path)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "helper_string.h"
#ifndef EXIT_WAIVED
#define EXIT_WAIVED 2
#endif
#ifndef MAX
#define MAX(a, b) (a > b ? a : b)
#endif
#ifndef MIN
#define MIN(a, b) (a < b ? a : b)
#endif
#ifndef DEVICE_RESET
#define DEVICE_RESET cudaDeviceReset();
#endif
template <class T> inline const char* _cudaGetErrorEnum(T) { return "<unknown error>"; }
inline const char* _cudaGetErrorEnum(cudaError_t e) { return cudaGetErrorName(e); }
// a failed call: its name, file and line, and the program ends (as the samples' check() does)
template <class T> void check(T result, char const* const func, const char* const file, int const line) {
  if (result) {
    fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\" \n", file, line, (int)result,
            _cudaGetErrorEnum(result), func);
    exit(EXIT_FAILURE);
  }
}
#define checkCudaErrors(val) check((val), #val, __FILE__, __LINE__)
#define getLastCudaError(msg) __getLastCudaError(msg, __FILE__, __LINE__)
#define printLastCudaError(msg) __printLastCudaError(msg, __FILE__, __LINE__)
inline void __getLastCudaError(const char* errorMessage, const char* file, const int line) {
  cudaError_t err = cudaGetLastError();
  if (cudaSuccess != err) {
    fprintf(stderr, "%s(%i) : getLastCudaError() CUDA error : %s : (%d) %s.\n", file, line, errorMessage, (int)err,
            cudaGetErrorString(err));
    exit(EXIT_FAILURE);
  }
}
inline void __printLastCudaError(const char* errorMessage, const char* file, const int line) {
  cudaError_t err = cudaGetLastError();
  if (cudaSuccess != err)
    fprintf(stderr, "%s(%i) : getLastCudaError() CUDA error : %s : (%d) %s.\n", file, line, errorMessage, (int)err,
            cudaGetErrorString(err));
}
inline int ftoi(float value) { return value >= 0 ? (int)(value + 0.5f) : (int)(value - 0.5f); }
// CUDA cores per multiprocessor of compute capability major.minor (the newest known where it is not listed)
inline int _ConvertSMVer2Cores(int major, int minor) {
  static const struct { int sm, cores; } table[] = {
      {0x30, 192}, {0x32, 192}, {0x35, 192}, {0x37, 192}, {0x50, 128}, {0x52, 128}, {0x53, 128}, {0x60, 64},
      {0x61, 128}, {0x62, 128}, {0x70, 64},  {0x72, 64},  {0x75, 64},  {0x80, 64},  {0x86, 128}, {0x87, 128},
      {0x89, 128}, {0x90, 128}, {0xa0, 128}, {0xa1, 128}, {0xc0, 128}, {-1, -1}};
  int sm = (major << 4) + minor, i = 0;
  for (; table[i].sm != -1; i++)
    if (table[i].sm == sm) return table[i].cores;
  printf("MapSMtoCores for SM %d.%d is undefined.  Default to use %d Cores/SM\n", major, minor, table[i - 1].cores);
  return table[i - 1].cores;
}
// the architecture's name for compute capability major.minor
inline const char* _ConvertSMVer2ArchName(int major, int minor) {
  static const struct { int sm; const char* name; } table[] = {
      {0x30, "Kepler"}, {0x32, "Kepler"}, {0x35, "Kepler"}, {0x37, "Kepler"}, {0x50, "Maxwell"}, {0x52, "Maxwell"},
      {0x53, "Maxwell"}, {0x60, "Pascal"}, {0x61, "Pascal"}, {0x62, "Pascal"}, {0x70, "Volta"}, {0x72, "Xavier"},
      {0x75, "Turing"}, {0x80, "Ampere"}, {0x86, "Ampere"}, {0x87, "Ampere"}, {0x89, "Ada"}, {0x90, "Hopper"},
      {0xa0, "Blackwell"}, {0xa1, "Blackwell"}, {0xc0, "Blackwell"}, {-1, "Graphics Device"}};
  int sm = (major << 4) + minor, i = 0;
  for (; table[i].sm != -1; i++)
    if (table[i].sm == sm) return table[i].name;
  printf("MapSMtoArchName for SM %d.%d is undefined.  Default to use %s\n", major, minor, table[i - 1].name);
  return table[i - 1].name;
}
// select device `devID` (0 where negative); exits where there is no such device
inline int gpuDeviceInit(int devID) {
  int count = 0;
  checkCudaErrors(cudaGetDeviceCount(&count));
  if (count == 0) {
    fprintf(stderr, "gpuDeviceInit() CUDA error: no devices supporting CUDA.\n");
    exit(EXIT_FAILURE);
  }
  if (devID < 0) devID = 0;
  if (devID > count - 1) {
    fprintf(stderr, "\n>> %d CUDA capable GPU device(s) detected. <<\n", count);
    fprintf(stderr, ">> gpuDeviceInit (-device=%d) is not a valid GPU device. <<\n\n", devID);
    return -devID;
  }
  cudaDeviceProp prop;
  checkCudaErrors(cudaGetDeviceProperties(&prop, devID));
  if (prop.computeMode == cudaComputeModeProhibited) {
    fprintf(stderr, "Error: device is running in <Compute Mode Prohibited>, no threads can use cudaSetDevice().\n");
    return -1;
  }
  if (prop.major < 1) {
    fprintf(stderr, "gpuDeviceInit(): GPU device does not support CUDA.\n");
    exit(EXIT_FAILURE);
  }
  checkCudaErrors(cudaSetDevice(devID));
  printf("gpuDeviceInit() CUDA Device [%d]: \"%s\n", devID, _ConvertSMVer2ArchName(prop.major, prop.minor));
  return devID;
}
// the device of most cores times clock rate (the capture's runtime has one)
inline int gpuGetMaxGflopsDeviceId() {
  int count = 0, best = 0;
  unsigned long long best_perf = 0;
  checkCudaErrors(cudaGetDeviceCount(&count));
  for (int d = 0; d < count; d++) {
    cudaDeviceProp p;
    checkCudaErrors(cudaGetDeviceProperties(&p, d));
    if (p.computeMode == cudaComputeModeProhibited) continue;
    unsigned long long perf = (unsigned long long)p.multiProcessorCount * _ConvertSMVer2Cores(p.major, p.minor) *
                              (unsigned long long)p.clockRate;
    if (perf > best_perf) { best_perf = perf; best = d; }
  }
  return best;
}
// the device named by -device=N, or the fastest; made current
inline int findCudaDevice(int argc, const char** argv) {
  int devID = 0;
  if (checkCmdLineFlag(argc, argv, "device")) {
    devID = getCmdLineArgumentInt(argc, argv, "device=");
    devID = getCmdLineArgumentInt(argc, argv, "device");
    if (devID < 0) {
      printf("Invalid command line parameter\n ");
      exit(EXIT_FAILURE);
    }
    devID = gpuDeviceInit(devID);
    if (devID < 0) {
      printf("exiting...\n");
      exit(EXIT_FAILURE);
    }
  } else {
    devID = gpuGetMaxGflopsDeviceId();
    checkCudaErrors(cudaSetDevice(devID));
    cudaDeviceProp p;
    checkCudaErrors(cudaGetDeviceProperties(&p, devID));
    printf("GPU Device %d: \"%s\" with compute capability %d.%d\n\n", devID,
           _ConvertSMVer2ArchName(p.major, p.minor), p.major, p.minor);
  }
  return devID;
}
inline int findIntegratedGPU() {
  int count = 0;
  checkCudaErrors(cudaGetDeviceCount(&count));
  for (int d = 0; d < count; d++) {
    cudaDeviceProp p;
    checkCudaErrors(cudaGetDeviceProperties(&p, d));
    if (p.integrated && p.computeMode != cudaComputeModeProhibited) {
      checkCudaErrors(cudaSetDevice(d));
      return d;
    }
  }
  fprintf(stderr, "CUDA error: No GPU found that supports integrated memory.\n");
  return -1;
}
// whether the current device's compute capability is at least major.minor
inline bool checkCudaCapabilities(int major_version, int minor_version) {
  int dev = 0, major = 0, minor = 0;
  checkCudaErrors(cudaGetDevice(&dev));
  checkCudaErrors(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  checkCudaErrors(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major > major_version || (major == major_version && minor >= minor_version)) {
    printf("  Device %d: <%16s >, Compute SM %d.%d detected\n", dev, _ConvertSMVer2ArchName(major, minor), major, minor);
    return true;
  }
  printf("  No GPU device was found that can support CUDA compute capability %d.%d.\n", major_version, minor_version);
  return false;
}
"""

# float2/3/4 (ksim::vec) already have + - * / with vectors and scalars, unary minus and the compound assignments
_VEC_FUNCS = r"""
inline __host__ __device__ float dot(float2 a, float2 b) { return a.x * b.x + a.y * b.y; }
inline __host__ __device__ float dot(float3 a, float3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
inline __host__ __device__ float dot(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
inline __host__ __device__ int dot(int2 a, int2 b) { return a.x * b.x + a.y * b.y; }
inline __host__ __device__ int dot(int3 a, int3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
inline __host__ __device__ int dot(int4 a, int4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
inline __host__ __device__ float length(float2 v) { return sqrtf(dot(v, v)); }
inline __host__ __device__ float length(float3 v) { return sqrtf(dot(v, v)); }
inline __host__ __device__ float length(float4 v) { return sqrtf(dot(v, v)); }
inline __host__ __device__ float2 normalize(float2 v) { return v * rsqrtf(dot(v, v)); }
inline __host__ __device__ float3 normalize(float3 v) { return v * rsqrtf(dot(v, v)); }
inline __host__ __device__ float4 normalize(float4 v) { return v * rsqrtf(dot(v, v)); }
inline __host__ __device__ float3 cross(float3 a, float3 b) {
  return make_float3(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
inline __host__ __device__ float lerp(float a, float b, float t) { return a + t * (b - a); }
inline __host__ __device__ float2 lerp(float2 a, float2 b, float t) { return a + t * (b - a); }
inline __host__ __device__ float3 lerp(float3 a, float3 b, float t) { return a + t * (b - a); }
inline __host__ __device__ float4 lerp(float4 a, float4 b, float t) { return a + t * (b - a); }
inline __host__ __device__ float clamp(float f, float a, float b) { return fmaxf(a, fminf(f, b)); }
inline __host__ __device__ int clamp(int f, int a, int b) { return f < a ? a : (f > b ? b : f); }
inline __host__ __device__ unsigned int clamp(unsigned int f, unsigned int a, unsigned int b) {
  return f < a ? a : (f > b ? b : f);
}
inline __host__ __device__ float smoothstep(float a, float b, float x) {
  float y = clamp((x - a) / (b - a), 0.0f, 1.0f);
  return y * y * (3.0f - 2.0f * y);
}
inline __host__ __device__ float3 reflect(float3 i, float3 n) { return i - 2.0f * n * dot(n, i); }
inline __host__ __device__ float fracf(float v) { return v - floorf(v); }
"""

_PER_COMPONENT = [   # (name, body on one component `a`, or `a`/`b`)
    ("fminf", "fminf(a.{c}, b.{c})", 2), ("fmaxf", "fmaxf(a.{c}, b.{c})", 2), ("fmodf", "fmodf(a.{c}, b.{c})", 2),
    ("floorf", "floorf(a.{c})", 1), ("fracf", "fracf(a.{c})", 1), ("fabs", "fabsf(a.{c})", 1),
]


def _helper_math() -> str:
    out = [r"""#pragma once
// ksim capture: stand-in for the CUDA samples' helper_math.h (the real one was not on the include path); float2/3/4
// are ksim::vec, whose arithmetic operators ksim.h defines: this adds the functions and the converting make_ overloads
#include <math.h>
typedef unsigned int uint;
typedef unsigned short ushort;
"""]
    for t in ("float", "int", "uint"):
        tt = "unsigned int" if t == "uint" else t
        out.append(
            f"inline __host__ __device__ {t}2 make_{t}2({tt} s) {{ return make_{t}2(s, s); }}\n"
            f"inline __host__ __device__ {t}2 make_{t}2({t}3 a) {{ return make_{t}2(a.x, a.y); }}\n"
            f"inline __host__ __device__ {t}3 make_{t}3({tt} s) {{ return make_{t}3(s, s, s); }}\n"
            f"inline __host__ __device__ {t}3 make_{t}3({t}2 a) {{ return make_{t}3(a.x, a.y, 0); }}\n"
            f"inline __host__ __device__ {t}3 make_{t}3({t}2 a, {tt} s) {{ return make_{t}3(a.x, a.y, s); }}\n"
            f"inline __host__ __device__ {t}3 make_{t}3({t}4 a) {{ return make_{t}3(a.x, a.y, a.z); }}\n"
            f"inline __host__ __device__ {t}4 make_{t}4({tt} s) {{ return make_{t}4(s, s, s, s); }}\n"
            f"inline __host__ __device__ {t}4 make_{t}4({t}3 a) {{ return make_{t}4(a.x, a.y, a.z, 0); }}\n"
            f"inline __host__ __device__ {t}4 make_{t}4({t}3 a, {tt} w) {{ return make_{t}4(a.x, a.y, a.z, w); }}\n")
    for t, o in (("float", "int"), ("float", "uint"), ("int", "float"), ("uint", "int")):
        for n in (2, 3, 4):
            comps = ", ".join(f"({'unsigned int' if t == 'uint' else t})a.{c}" for c in "xyzw"[:n])
            out.append(f"inline __host__ __device__ {t}{n} make_{t}{n}({o}{n} a) {{ return make_{t}{n}({comps}); }}\n")
    out.append(_VEC_FUNCS)
    for name, body, arity in _PER_COMPONENT:
        for n in (2, 3, 4):
            args = f"float{n} a, float{n} b" if arity == 2 else f"float{n} a"
            comps = ", ".join(body.format(c=c) for c in "xyzw"[:n])
            out.append(f"inline __host__ __device__ float{n} {name}({args}) {{ return make_float{n}({comps}); }}\n")
    for n in (2, 3, 4):
        comps = ", ".join(f"clamp(v.{c}, a, b)" for c in "xyzw"[:n])
        comps2 = ", ".join(f"clamp(v.{c}, a.{c}, b.{c})" for c in "xyzw"[:n])
        out.append(f"inline __host__ __device__ float{n} clamp(float{n} v, float a, float b) "
                   f"{{ return make_float{n}({comps}); }}\n"
                   f"inline __host__ __device__ float{n} clamp(float{n} v, float{n} a, float{n} b) "
                   f"{{ return make_float{n}({comps2}); }}\n")
    return "".join(out)


HELPER_MATH = _helper_math()

# header name -> stand-in text; consulted only where the program's include path has no file of that name
FILES: dict[str, str] = {
    "helper_cuda.h": HELPER_CUDA, "helper_functions.h": HELPER_FUNCTIONS, "helper_string.h": HELPER_STRING,
    "helper_timer.h": HELPER_TIMER, "helper_image.h": HELPER_IMAGE, "helper_math.h": HELPER_MATH,
}
