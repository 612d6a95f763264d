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

// how many leading `delimiter` characters `arg` starts with ("--n=4" -> 2)
inline int stringRemoveDelimiter(char delimiter, const char* arg) {
  int k = 0;
  while (arg[k] != '\0' && arg[k] == delimiter) ++k;
  return arg[k] == '\0' ? 0 : k;
}
// the part of `path` after its last dot, and where it starts (0 and NULL without a dot)
inline int getFileExtension(char* path, char** ext) {
  char* dot = strrchr(path, '.');
  *ext = dot ? dot + 1 : NULL;
  return dot ? (int)(dot - path) + 1 : 0;
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
inline bool checkCmdLineFlag(const int argc, const char** argv, const char* name) {
  for (int i = 1; i < argc; i++)
    if (argv[i] && argv[i][0] == '-' && ksim_helpers::named(argv[i], name)) return true;
  return false;
}
template <class T>
inline bool getCmdLineArgumentValue(const int argc, const char** argv, const char* name, T* value) {
  for (int i = 1; i < argc; i++) {
    const char* v = argv[i] && argv[i][0] == '-' ? ksim_helpers::named(argv[i], name) : NULL;
    if (v) { *value = (T)atof(v); return true; }
  }
  return false;
}
inline int getCmdLineArgumentInt(const int argc, const char** argv, const char* name) {
  for (int i = 1; i < argc; i++) {
    const char* v = argv[i] && argv[i][0] == '-' ? ksim_helpers::named(argv[i], name) : NULL;
    if (v) return atoi(v);
  }
  return 0;
}
inline float getCmdLineArgumentFloat(const int argc, const char** argv, const char* name) {
  for (int i = 1; i < argc; i++) {
    const char* v = argv[i] && argv[i][0] == '-' ? ksim_helpers::named(argv[i], name) : NULL;
    if (v) return (float)atof(v);
  }
  return 0.0f;
}
inline bool getCmdLineArgumentString(const int argc, const char** argv, const char* name, char** out) {
  for (int i = 1; i < argc; i++) {
    const char* v = argv[i] && argv[i][0] == '-' ? ksim_helpers::named(argv[i], name) : NULL;
    if (v && *v) { *out = (char*)v; return true; }
  }
  *out = NULL;
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
// ksim capture: stand-in for the CUDA samples' helper_cuda.h, used because none is on the include path. The names and
// signatures are the ones programs call; the bodies and every message are ksearch's own (a capture has one device).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "helper_string.h"
#ifndef EXIT_WAIVED
#define EXIT_WAIVED 2
#endif
#ifndef MAX
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#endif
#ifndef MIN
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#endif
#ifndef DEVICE_RESET
#define DEVICE_RESET cudaDeviceReset();
#endif
inline const char* _cudaGetErrorEnum(cudaError_t status) { return cudaGetErrorName(status); }
template <class S> inline const char* _cudaGetErrorEnum(S) { return "(not a runtime status)"; }
// checkCudaErrors(call): a call that returns non-zero ends the program, naming the call and where it was made
template <class S> void check(S status, char const* const call, const char* const file, int const line) {
  if (!status) return;
  fprintf(stderr, "[ksim stand-in helper_cuda.h] %s:%d: %s gave %d, %s\n", file, line, call, (int)status,
          _cudaGetErrorEnum(status));
  exit(EXIT_FAILURE);
}
#define checkCudaErrors(val) check((val), #val, __FILE__, __LINE__)
namespace ksim_helpers {
inline void last_error(const char* what, const char* file, int line, bool fatal) {
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return;
  fprintf(stderr, "[ksim stand-in helper_cuda.h] %s:%d: after %s: %s (%d)\n", file, line, what,
          cudaGetErrorString(status), (int)status);
  if (fatal) exit(EXIT_FAILURE);
}
}  // namespace ksim_helpers
#define getLastCudaError(msg) ksim_helpers::last_error((msg), __FILE__, __LINE__, true)
#define printLastCudaError(msg) ksim_helpers::last_error((msg), __FILE__, __LINE__, false)
inline int ftoi(float x) { return x < 0 ? (int)(x - 0.5f) : (int)(x + 0.5f); }
// FP32 lanes per multiprocessor, by architecture generation (NVIDIA's public specifications)
inline int _ConvertSMVer2Cores(int major, int minor) {
  switch (major) {
    case 3: return 192;
    case 5: return 128;
    case 6: return minor == 0 ? 64 : 128;
    case 7: return 64;
    case 8: return minor == 0 ? 64 : 128;
    default: return major >= 9 ? 128 : 64;
  }
}
inline const char* _ConvertSMVer2ArchName(int major, int minor) {
  switch (major) {
    case 3: return "Kepler";
    case 5: return "Maxwell";
    case 6: return "Pascal";
    case 7: return minor >= 5 ? "Turing" : "Volta";
    case 8: return minor == 9 ? "Ada" : "Ampere";
    case 9: return "Hopper";
    default: return major >= 10 ? "Blackwell" : "an older GPU";
  }
}
// make device `dev` current (0 for a negative one); a number past the last device is returned negated
inline int gpuDeviceInit(int dev) {
  int n = 0;
  checkCudaErrors(cudaGetDeviceCount(&n));
  if (n < 1) {
    fprintf(stderr, "[ksim stand-in helper_cuda.h] the capture's runtime reports no device\n");
    exit(EXIT_FAILURE);
  }
  dev = dev < 0 ? 0 : dev;
  if (dev >= n) return -dev;
  checkCudaErrors(cudaSetDevice(dev));
  return dev;
}
// the device with the most FP32 lanes times clock (the capture's runtime has one)
inline int gpuGetMaxGflopsDeviceId() {
  int n = 0, pick = 0;
  double most = -1.0;
  checkCudaErrors(cudaGetDeviceCount(&n));
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop;
    checkCudaErrors(cudaGetDeviceProperties(&prop, d));
    double rate = (double)prop.multiProcessorCount * _ConvertSMVer2Cores(prop.major, prop.minor) * prop.clockRate;
    if (rate > most) {
      most = rate;
      pick = d;
    }
  }
  return pick;
}
// -device=N where given, else the fastest device; made current
inline int findCudaDevice(int argc, const char** argv) {
  bool named = checkCmdLineFlag(argc, argv, "device");
  int dev = named ? getCmdLineArgumentInt(argc, argv, "device") : gpuGetMaxGflopsDeviceId();
  if (dev < 0 || gpuDeviceInit(dev) < 0) {
    fprintf(stderr, "[ksim stand-in helper_cuda.h] -device=%d names no device of the capture's runtime\n", dev);
    exit(EXIT_FAILURE);
  }
  return dev;
}
// an integrated GPU made current, or -1 (the capture's runtime models a discrete one)
inline int findIntegratedGPU() {
  int n = 0;
  checkCudaErrors(cudaGetDeviceCount(&n));
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop;
    checkCudaErrors(cudaGetDeviceProperties(&prop, d));
    if (prop.integrated) {
      checkCudaErrors(cudaSetDevice(d));
      return d;
    }
  }
  return -1;
}
// whether the current device's compute capability is major.minor or newer
inline bool checkCudaCapabilities(int major, int minor) {
  int dev = 0, have_major = 0, have_minor = 0;
  checkCudaErrors(cudaGetDevice(&dev));
  checkCudaErrors(cudaDeviceGetAttribute(&have_major, cudaDevAttrComputeCapabilityMajor, dev));
  checkCudaErrors(cudaDeviceGetAttribute(&have_minor, cudaDevAttrComputeCapabilityMinor, dev));
  return have_major > major || (have_major == major && have_minor >= minor);
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
