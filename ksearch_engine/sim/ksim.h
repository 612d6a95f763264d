// ksim.h - lets g++ compile CUDA and Metal (MSL) kernel bodies and run them on the CPU.
//
// Every GPU thread of a threadgroup/block is a user-space fiber (ucontext) with its own stack. A
// round-robin scheduler runs the fibers of one block until each one blocks on a collective:
//   * a block barrier (__syncthreads, threadgroup_barrier) releases when every thread of the block
//     has arrived: real barrier semantics, and a barrier that some threads never reach is reported;
//   * a warp/simdgroup collective (shuffles, simd_sum, ballots, __syncwarp, simdgroup_barrier)
//     releases when every live lane of its group of 32 has arrived, so lanes exchange values at the
//     same point of execution (lockstep).
// Blocks run one after another, so `__shared__` / `threadgroup` arrays become function-static
// storage shared by the fibers of the running block (the Python side rewrites those declarations).
// The grid runs in a forked child process with a time limit; faults, deadlocks and timeouts come
// back as a status code and a message (see ksim_run at the end of this file).
// Dialect: define KSIM_CUDA or KSIM_METAL before including.
#pragma once
#pragma GCC system_header
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#if defined(__APPLE__)
#define _XOPEN_SOURCE 700  // macOS only declares the ucontext functions with it
#define _DARWIN_C_SOURCE 1
#endif
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <cstdarg>
#include <cerrno>
#include <signal.h>
#include <unistd.h>
#include <dlfcn.h>
#include <ucontext.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <sys/wait.h>
#include <sys/types.h>
#include <cmath>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <algorithm>
#include <cassert>
#include <array>
#include <atomic>
#ifdef KSIM_CUDA
#include <math.h>
#endif

#if !defined(KSIM_CUDA) && !defined(KSIM_METAL)
#error "define KSIM_CUDA or KSIM_METAL"
#endif

namespace ksim {

// ------------------------------------------------------------------------------------------------
// 16-bit floats
// ------------------------------------------------------------------------------------------------
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return (uint16_t)(u >> 16);
}
inline float bf16_bits_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

template <class T> struct is_scalar_num : std::is_arithmetic<T> {};
template <> struct is_scalar_num<_Float16> : std::true_type {};

// Metal's bfloat: a real arithmetic type. bfloat op bfloat/int -> bfloat, bfloat op float -> float.
struct mbf16 {
  uint16_t bits;
  mbf16() = default;
  template <class U, class = std::enable_if_t<is_scalar_num<U>::value>>
  mbf16(U v) : bits(f32_to_bf16_bits((float)v)) {}
  operator float() const { return bf16_bits_to_f32(bits); }
  mbf16& operator+=(float o) { return *this = mbf16(float(*this) + o); }
  mbf16& operator-=(float o) { return *this = mbf16(float(*this) - o); }
  mbf16& operator*=(float o) { return *this = mbf16(float(*this) * o); }
  mbf16& operator/=(float o) { return *this = mbf16(float(*this) / o); }
  mbf16 operator-() const { return mbf16(-float(*this)); }
};
template <> struct is_scalar_num<mbf16> : std::true_type {};
#define KSIM_MBF_OP(op)                                                                     \
  inline mbf16 operator op(mbf16 a, mbf16 b) { return mbf16(float(a) op float(b)); }        \
  template <class U, std::enable_if_t<std::is_integral<U>::value, int> = 0>                 \
  inline mbf16 operator op(mbf16 a, U b) { return mbf16(float(a) op float(b)); }            \
  template <class U, std::enable_if_t<std::is_integral<U>::value, int> = 0>                 \
  inline mbf16 operator op(U a, mbf16 b) { return mbf16(float(a) op float(b)); }            \
  template <class U, std::enable_if_t<std::is_floating_point<U>::value, int> = 0>           \
  inline U operator op(mbf16 a, U b) { return U(float(a)) op b; }                           \
  template <class U, std::enable_if_t<std::is_floating_point<U>::value, int> = 0>           \
  inline U operator op(U a, mbf16 b) { return a op U(float(b)); }                           \
  inline float operator op(mbf16 a, _Float16 b) { return float(a) op float(b); }            \
  inline float operator op(_Float16 a, mbf16 b) { return float(a) op float(b); }
KSIM_MBF_OP(+) KSIM_MBF_OP(-) KSIM_MBF_OP(*) KSIM_MBF_OP(/)
#define KSIM_MBF_CMP(op)                                                                    \
  inline bool operator op(mbf16 a, mbf16 b) { return float(a) op float(b); }                \
  template <class U, std::enable_if_t<is_scalar_num<U>::value, int> = 0>                    \
  inline bool operator op(mbf16 a, U b) { return float(a) op float(b); }                    \
  template <class U, std::enable_if_t<is_scalar_num<U>::value, int> = 0>                    \
  inline bool operator op(U a, mbf16 b) { return float(a) op float(b); }
KSIM_MBF_CMP(<) KSIM_MBF_CMP(>) KSIM_MBF_CMP(<=) KSIM_MBF_CMP(>=) KSIM_MBF_CMP(==) KSIM_MBF_CMP(!=)

// CUDA's __half / __nv_bfloat16: classes with implicit conversions both ways and operators only
// between two values of the class, so `float * __half` is ambiguous exactly as under nvcc.
template <int Kind>  // 0: half, 1: bfloat16
struct cu16 {
  uint16_t bits;
  cu16() = default;
  template <class U, class = std::enable_if_t<is_scalar_num<U>::value>>
  cu16(U v) { set((float)v); }
  void set(float f) {
    if (Kind == 0) { _Float16 h = (_Float16)f; memcpy(&bits, &h, 2); }
    else bits = f32_to_bf16_bits(f);
  }
  float get() const {
    if (Kind == 0) { _Float16 h; memcpy(&h, &bits, 2); return (float)h; }
    return bf16_bits_to_f32(bits);
  }
  operator float() const { return get(); }
  cu16& operator+=(cu16 o) { set(get() + o.get()); return *this; }
  cu16& operator-=(cu16 o) { set(get() - o.get()); return *this; }
  cu16& operator*=(cu16 o) { set(get() * o.get()); return *this; }
  cu16& operator/=(cu16 o) { set(get() / o.get()); return *this; }
  cu16 operator-() const { return cu16(-get()); }
  cu16 operator+() const { return *this; }
  cu16& operator++() { set(get() + 1.0f); return *this; }
};
template <int K> struct is_scalar_num<cu16<K>> : std::true_type {};
#define KSIM_CU16_OP(op) \
  template <int K> inline cu16<K> operator op(cu16<K> a, cu16<K> b) { return cu16<K>(a.get() op b.get()); }
KSIM_CU16_OP(+) KSIM_CU16_OP(-) KSIM_CU16_OP(*) KSIM_CU16_OP(/)
#define KSIM_CU16_CMP(op) \
  template <int K> inline bool operator op(cu16<K> a, cu16<K> b) { return a.get() op b.get(); }
KSIM_CU16_CMP(<) KSIM_CU16_CMP(>) KSIM_CU16_CMP(<=) KSIM_CU16_CMP(>=) KSIM_CU16_CMP(==) KSIM_CU16_CMP(!=)

}  // namespace ksim
namespace std {
template <int K> struct numeric_limits<ksim::cu16<K>> {
  typedef ksim::cu16<K> T;
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  static T max() { return T(K == 0 ? 65504.0f : 3.38953139e38f); }
  static T min() { return T(K == 0 ? 6.103515625e-05f : 1.17549435e-38f); }
  static T lowest() { return T(K == 0 ? -65504.0f : -3.38953139e38f); }
  static T infinity() { return T(__builtin_inff()); }
  static T quiet_NaN() { return T(__builtin_nanf("")); }
  static T epsilon() { return T(K == 0 ? 0.0009765625f : 0.0078125f); }
};
}  // namespace std
namespace ksim {

// ------------------------------------------------------------------------------------------------
// Vectors: float2/3/4, half4, uint3 ... with .x .y .z .w, [i], elementwise arithmetic.
// Metal: 3-vectors take the size of 4; CUDA: 3-vectors are packed.
// ------------------------------------------------------------------------------------------------
template <class T> struct ident { typedef T type; };
#ifdef KSIM_METAL
#define KSIM_VALIGN(T, N) (sizeof(T) * ((N) == 3 ? 4 : (N)))
#else
#define KSIM_VALIGN(T, N) ((N) == 3 ? alignof(T) : sizeof(T) * (N))
#endif

template <class T, int N> struct vec;
// A swizzle such as v.xy or v.zyx: a view of the parent's storage, readable as a vector and
// assignable from one.
template <class T, int N, int... I> struct swz {
  T d[N];
  typedef vec<T, (int)sizeof...(I)> V;
  V get() const { return V(d[I]...); }
  operator V() const { return get(); }
  swz& operator=(const V& v) {
    int k = 0;
    ((d[I] = v[k++]), ...);
    return *this;
  }
  T operator[](int i) const { return get()[i]; }
};
template <class T> struct is_swz : std::false_type {};
template <class T, int N, int... I> struct is_swz<swz<T, N, I...>> : std::true_type {};

template <class T> struct alignas(KSIM_VALIGN(T, 2)) vec<T, 2> {
  union {
    struct { T x, y; };
    struct { T r, g; };
    T v_[2];
    swz<T, 2, 0, 0> xx;
    swz<T, 2, 0, 1> xy;
    swz<T, 2, 1, 0> yx;
    swz<T, 2, 1, 1> yy;
  };
  vec() = default;
  vec(T s) { x = s; y = s; }
  vec(T a, T b) { x = a; y = b; }
  template <class U> explicit vec(const vec<U, 2>& o) { x = T(o.x); y = T(o.y); }
  T& operator[](int i) { return v_[i]; }
  const T& operator[](int i) const { return v_[i]; }
};
template <class T> struct alignas(KSIM_VALIGN(T, 3)) vec<T, 3> {
  union {
    struct { T x, y, z; };
    struct { T r, g, b; };
    T v_[3];
    swz<T, 3, 0, 0> xx;
    swz<T, 3, 0, 1> xy;
    swz<T, 3, 0, 2> xz;
    swz<T, 3, 1, 0> yx;
    swz<T, 3, 1, 1> yy;
    swz<T, 3, 1, 2> yz;
    swz<T, 3, 2, 0> zx;
    swz<T, 3, 2, 1> zy;
    swz<T, 3, 2, 2> zz;
    swz<T, 3, 0, 1, 2> xyz;
    swz<T, 3, 2, 1, 0> zyx;
  };
  vec() = default;
  vec(T s) { x = s; y = s; z = s; }
  vec(T a, T b, T c) { x = a; y = b; z = c; }
  vec(const vec<T, 2>& a, T c) { x = a.x; y = a.y; z = c; }
  vec(T a, const vec<T, 2>& b) { x = a; y = b.x; z = b.y; }
  template <class U> explicit vec(const vec<U, 3>& o) { x = T(o.x); y = T(o.y); z = T(o.z); }
  T& operator[](int i) { return v_[i]; }
  const T& operator[](int i) const { return v_[i]; }
};
template <class T> struct alignas(KSIM_VALIGN(T, 4)) vec<T, 4> {
  union {
    struct { T x, y, z, w; };
    struct { T r, g, b, a; };
    T v_[4];
    swz<T, 4, 0, 0> xx;
    swz<T, 4, 0, 1> xy;
    swz<T, 4, 0, 2> xz;
    swz<T, 4, 0, 3> xw;
    swz<T, 4, 1, 0> yx;
    swz<T, 4, 1, 1> yy;
    swz<T, 4, 1, 2> yz;
    swz<T, 4, 1, 3> yw;
    swz<T, 4, 2, 0> zx;
    swz<T, 4, 2, 1> zy;
    swz<T, 4, 2, 2> zz;
    swz<T, 4, 2, 3> zw;
    swz<T, 4, 3, 0> wx;
    swz<T, 4, 3, 1> wy;
    swz<T, 4, 3, 2> wz;
    swz<T, 4, 3, 3> ww;
    swz<T, 4, 0, 1, 2> xyz;
    swz<T, 4, 0, 1, 3> xyw;
    swz<T, 4, 0, 2, 3> xzw;
    swz<T, 4, 1, 2, 3> yzw;
    swz<T, 4, 2, 1, 0> zyx;
    swz<T, 4, 0, 1, 2, 3> xyzw;
    swz<T, 4, 3, 2, 1, 0> wzyx;
  };
  vec() = default;
  vec(T s) { x = s; y = s; z = s; w = s; }
  vec(T a_, T b_, T c_, T d_) { x = a_; y = b_; z = c_; w = d_; }
  vec(const vec<T, 2>& a_, const vec<T, 2>& b_) { x = a_.x; y = a_.y; z = b_.x; w = b_.y; }
  vec(const vec<T, 2>& a_, T c_, T d_) { x = a_.x; y = a_.y; z = c_; w = d_; }
  vec(const vec<T, 3>& a_, T d_) { x = a_.x; y = a_.y; z = a_.z; w = d_; }
  vec(T a_, const vec<T, 3>& b_) { x = a_; y = b_.x; z = b_.y; w = b_.z; }
  template <class U> explicit vec(const vec<U, 4>& o) { x = T(o.x); y = T(o.y); z = T(o.z); w = T(o.w); }
  T& operator[](int i) { return v_[i]; }
  const T& operator[](int i) const { return v_[i]; }
};
template <class T, int N> struct is_scalar_num<vec<T, N>> : std::false_type {};

#define KSIM_VEC_BINOP(op)                                                                    \
  template <class T, int N> inline vec<T, N> operator op(const vec<T, N>& a, const vec<T, N>& b) { \
    vec<T, N> r;                                                                            \
    for (int i = 0; i < N; i++) r[i] = T(a[i] op b[i]);                                      \
    return r;                                                                               \
  }                                                                                         \
  template <class T, int N>                                                                 \
  inline vec<T, N> operator op(const vec<T, N>& a, typename ident<T>::type b) {             \
    vec<T, N> r;                                                                            \
    for (int i = 0; i < N; i++) r[i] = T(a[i] op b);                                         \
    return r;                                                                               \
  }                                                                                         \
  template <class T, int N>                                                                 \
  inline vec<T, N> operator op(typename ident<T>::type a, const vec<T, N>& b) {             \
    vec<T, N> r;                                                                            \
    for (int i = 0; i < N; i++) r[i] = T(a op b[i]);                                         \
    return r;                                                                               \
  }                                                                                         \
  template <class T, int N, class U>                                                        \
  inline vec<T, N>& operator op##=(vec<T, N>& a, const U& b) { return a = a op b; }
KSIM_VEC_BINOP(+) KSIM_VEC_BINOP(-) KSIM_VEC_BINOP(*) KSIM_VEC_BINOP(/)
KSIM_VEC_BINOP(%) KSIM_VEC_BINOP(&) KSIM_VEC_BINOP(|) KSIM_VEC_BINOP(^)
KSIM_VEC_BINOP(<<) KSIM_VEC_BINOP(>>)
#define KSIM_SWZ_BINOP(op)                                                                      \
  template <class S, class U, std::enable_if_t<is_swz<S>::value, int> = 0>                       \
  inline auto operator op(const S& a, const U& b) { return a.get() op b; }                        \
  template <class U, class S, std::enable_if_t<is_swz<S>::value && !is_swz<U>::value, int> = 0>   \
  inline auto operator op(const U& a, const S& b) { return a op b.get(); }
KSIM_SWZ_BINOP(+) KSIM_SWZ_BINOP(-) KSIM_SWZ_BINOP(*) KSIM_SWZ_BINOP(/)
template <class T, int N> inline vec<T, N> operator-(const vec<T, N>& a) {
  vec<T, N> r;
  for (int i = 0; i < N; i++) r[i] = -a[i];
  return r;
}
template <class T, int N> inline bool operator==(const vec<T, N>& a, const vec<T, N>& b) {
  for (int i = 0; i < N; i++) if (!(a[i] == b[i])) return false;
  return true;
}
template <class T, int N> inline bool operator!=(const vec<T, N>& a, const vec<T, N>& b) { return !(a == b); }

// ------------------------------------------------------------------------------------------------
// The scheduler
// ------------------------------------------------------------------------------------------------
// Context switch: a few instructions on x86-64 Linux (callee-saved registers + stack pointer),
// ucontext elsewhere (it also saves the signal mask, a system call per switch).
}  // namespace ksim
#if defined(__x86_64__) && defined(__linux__) && !defined(KSIM_USE_UCONTEXT)
#define KSIM_ASM_SWITCH 1
extern "C" void ksim_swap_impl(void** save_sp, void* new_sp);
asm(R"(
  .text
  .p2align 4
  .hidden ksim_swap_impl
  .globl ksim_swap_impl
  .type ksim_swap_impl, @function
ksim_swap_impl:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ksim_swap_impl, .-ksim_swap_impl
)");
#endif
namespace ksim {
#ifdef KSIM_ASM_SWITCH
struct Ctx { void* sp; };
inline void ctx_switch(Ctx* from, Ctx* to) { ksim_swap_impl(&from->sp, to->sp); }
inline void ctx_make(Ctx* c, char* stack, size_t size, void (*fn)()) {
  uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
  uint64_t* sp = (uint64_t*)top;
  *--sp = 0;                  // fake return address of fn: fn never returns
  *--sp = (uint64_t)fn;       // popped by ret
  for (int i = 0; i < 6; i++) *--sp = 0;  // rbp rbx r12 r13 r14 r15
  --sp;                       // mxcsr + x87 control word
  uint32_t mx; uint16_t cw;
  asm volatile("stmxcsr %0" : "=m"(mx));
  asm volatile("fnstcw %0" : "=m"(cw));
  memcpy((char*)sp, &mx, 4);
  memcpy((char*)sp + 4, &cw, 2);
  c->sp = sp;
}
#else
struct Ctx { ucontext_t uc; };
inline void ctx_switch(Ctx* from, Ctx* to) { swapcontext(&from->uc, &to->uc); }
inline void ctx_make(Ctx* c, char* stack, size_t size, void (*fn)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, fn, 0);
}
#endif

typedef vec<unsigned, 3> u3;
enum { F_RUN = 0, F_BAR = 1, F_WARP = 2, F_DONE = 3 };
constexpr int WARP = 32;
constexpr int MAX_LANE_BYTES = 64;

struct Fiber {
  Ctx ctx;
  int state;
  uintptr_t site;  // where it waits (the barrier's call site)
  u3 tid;
  unsigned lin, lane, warp;
};
struct Warp {
  int nlanes, arrived, done;
  unsigned arrived_mask;
  unsigned gen;
  unsigned masks[2];           // lanes that took part in the collective of each slot
  unsigned gmask[2][WARP];     // per lane: the lanes of its group (same call site, Metal)
  uintptr_t site[2][WARP];     // per lane: the call site of its collective (0: any)
  alignas(16) unsigned char vals[2][WARP][MAX_LANE_BYTES];
};
struct Grid {
  void** args;
  void (*entry)();
  u3 nblocks, tg_req, total;  // total threads per dim (Metal) or nblocks*tg (CUDA)
  int partial;
  u3 block, bdim;
  int n, done, bar_arrived;
  long bar_acc, bar_result;
  Fiber* fibers;
  Warp* warps;
  int nwarps;
  char* stacks;
  size_t stack_size, stack_stride;
  int max_fibers;
  char* dyn_smem;
  size_t dyn_smem_size;
  Ctx sched;
  char* msg;
  int msglen;
  volatile int* status;  // shared with the parent: the exit code, written before exiting
  unsigned long atomic_ops;
  int reverse;  // the race check's other schedules: 1 warps in reverse order, 2 threadgroups, 3 both
  int lenient;  // threads that returned count as arrived at barriers (what NVIDIA hardware does)
  int* order;   // fiber indices in scheduling order
  int clock_mode;  // which clock the kernel reads (the race check's timing-data run uses 1)
};
inline Grid g;
inline Fiber* cur;

// The address a collective was called from: KSIM_SITE in an always-inlined wrapper gives the
// position of the call in the kernel's own code.
__attribute__((noinline)) inline uintptr_t call_site() {
  uintptr_t r = (uintptr_t)__builtin_return_address(0);
  asm volatile("" ::: "memory");  // keep it a real call
  return r;
}
#define KSIM_AI __attribute__((always_inline)) inline
#define KSIM_SITE ksim::call_site()

// Offset of a code address in this library (for addr2line), 0 if elsewhere.
inline uintptr_t code_offset(uintptr_t pc) {
  static int here;
  Dl_info info, self;
  if (pc && dladdr((void*)pc, &info) && dladdr((void*)&here, &self) && info.dli_fbase == self.dli_fbase)
    return pc - (uintptr_t)info.dli_fbase;
  return 0;
}

[[noreturn]] inline void fail(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (g.msg) vsnprintf(g.msg, g.msglen, fmt, ap);
  va_end(ap);
  if (g.status) *g.status = code;
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}

inline void yield_to_sched() { ctx_switch(&cur->ctx, &g.sched); }

inline void release_barrier() {
  for (int i = 0; i < g.n; i++)
    if (g.fibers[i].state == F_BAR) g.fibers[i].state = F_RUN;
  g.bar_arrived = 0;
  g.bar_result = g.bar_acc;
  g.bar_acc = 0;
}

// Block barrier. `contrib` is summed over the block (for __syncthreads_count and friends).
inline long barrier(long contrib = 0, uintptr_t site = 0) {
  cur->site = site;
  g.bar_acc += contrib;
  g.bar_arrived++;
  if (g.bar_arrived == g.n) {
    release_barrier();
  } else {
    cur->state = F_BAR;
    yield_to_sched();
  }
  return g.bar_result;
}

inline void release_warp(Warp* w) {
  unsigned slot = w->gen & 1u;
  w->masks[slot] = w->arrived_mask;
  // Lanes at different call sites are different collectives (divergent branches of a SIMD group
  // run one after the other on Apple GPUs); site 0 joins everyone (barriers, CUDA's *_sync).
  for (int l = 0; l < WARP; l++) {
    if (!(w->arrived_mask & (1u << l))) continue;
    uintptr_t s = w->site[slot][l];
    unsigned m = 0;
    for (int k = 0; k < WARP; k++)
      if ((w->arrived_mask & (1u << k)) && (s == 0 || w->site[slot][k] == s || w->site[slot][k] == 0)) m |= 1u << k;
    w->gmask[slot][l] = m;
  }
  unsigned base = (unsigned)((w - g.warps) * WARP);
  for (int l = 0; l < WARP; l++)
    if (w->arrived_mask & (1u << l)) g.fibers[base + l].state = F_RUN;
  w->arrived = 0;
  w->arrived_mask = 0;
  w->gen++;
}

// Warp collective: deposit this lane's value, wait for the other live lanes, return the slot
// that holds every participant's value (and masks[slot]: who took part).
inline unsigned warp_arrive(const void* val, size_t sz, uintptr_t site = 0) {
  Warp* w = &g.warps[cur->warp];
  unsigned slot = w->gen & 1u;
  if (sz) memcpy(w->vals[slot][cur->lane], val, sz);
  w->site[slot][cur->lane] = site;
  w->arrived++;
  w->arrived_mask |= 1u << cur->lane;
  if (w->arrived + w->done == w->nlanes) {
    release_warp(w);
  } else {
    cur->state = F_WARP;
    yield_to_sched();
  }
  return slot;
}

template <class T> inline T lane_val(unsigned slot, unsigned lane, const T& own) {
  Warp* w = &g.warps[cur->warp];
  if (lane >= WARP || !(w->gmask[slot][cur->lane] & (1u << lane))) return own;
  T r;
  memcpy(&r, w->vals[slot][lane], sizeof(T));
  return r;
}
inline unsigned slot_mask(unsigned slot) { return g.warps[cur->warp].gmask[slot][cur->lane]; }


// Shuffle: every lane reads lane `src(lane)`'s value.
template <class T, class F> inline T shuffle(T v, F src_of, uintptr_t site = 0) {
  static_assert(sizeof(T) <= MAX_LANE_BYTES, "shuffle of a value larger than 64 bytes");
  unsigned slot = warp_arrive(&v, sizeof(T), site);
  int src = src_of((int)cur->lane);
  if (src < 0) return v;
  return lane_val<T>(slot, (unsigned)src, v);
}
template <class T, class Op> inline T warp_reduce(T v, Op op, uintptr_t site = 0) {
  unsigned slot = warp_arrive(&v, sizeof(T), site);
  unsigned m = slot_mask(slot);
  bool first = true;
  T acc = v;
  for (unsigned l = 0; l < WARP; l++)
    if (m & (1u << l)) {
      T x = lane_val<T>(slot, l, v);
      acc = first ? x : op(acc, x);
      first = false;
    }
  return acc;
}
template <class T, class Op> inline T warp_scan(T v, Op op, bool inclusive, T identity, uintptr_t site = 0) {
  unsigned slot = warp_arrive(&v, sizeof(T), site);
  unsigned m = slot_mask(slot);
  T acc = identity;
  for (unsigned l = 0; l < cur->lane + (inclusive ? 1u : 0u); l++)
    if (m & (1u << l)) acc = op(acc, lane_val<T>(slot, l, v));
  return acc;
}
inline unsigned warp_ballot(bool p, unsigned* participants = nullptr, uintptr_t site = 0) {
  int pv = p ? 1 : 0;
  unsigned slot = warp_arrive(&pv, sizeof(int), site);
  unsigned m = slot_mask(slot), r = 0;
  if (participants) *participants = m;
  for (unsigned l = 0; l < WARP; l++)
    if ((m & (1u << l)) && lane_val<int>(slot, l, 0)) r |= 1u << l;
  return r;
}
inline void warp_sync() { warp_arrive(nullptr, 0); }

// Atomics never race here (one OS thread), but a spin-wait on another thread of the same block
// must let that thread run: every 64th atomic operation yields.
inline void atomic_tick() {
  if ((++g.atomic_ops & 63u) == 0 && cur) {
    cur->state = F_RUN;
    yield_to_sched();
  }
}

// What makes a result legitimately depend on the thread order, reported to the race check (runtime.py):
// addresses that an order-dependent atomic (exchange, compare-and-swap) wrote or tried, whether the
// kernel read the clock (clock(), clock64()) and how many atomics ran. The table lives in a shared
// mapping made before the grid's child process forks, so the parent reads it after the run.
constexpr int ND_CAP = 1 << 14;
struct NdInfo {
  int clock_reads, overflow, n, pad;
  unsigned long long atomic_ops;
  unsigned long long addr[ND_CAP];
  unsigned size[ND_CAP];
};
inline NdInfo* nd_info;
inline unsigned long long* nd_seen;  // the child's hash set of addresses already in the table
inline void note_order_dependent(const void* p, unsigned size) {
  if (!nd_info || nd_info->overflow) return;  // a full table: the rest are not allowed (reported as races)
  if (!nd_seen) nd_seen = (unsigned long long*)calloc(4 * ND_CAP, sizeof(unsigned long long));
  if (!nd_seen) return;
  unsigned long long a = (unsigned long long)(uintptr_t)p;
  size_t h = (size_t)(((a >> 2) * 0x9E3779B97F4A7C15ull) >> 48) & (4 * ND_CAP - 1);
  for (size_t k = 0; k < 4 * ND_CAP; k++) {  // at most a quarter full: short probes
    unsigned long long& e = nd_seen[(h + k) & (4 * ND_CAP - 1)];
    if (e == a) return;
    if (e != 0) continue;
    if (nd_info->n >= ND_CAP) {
      nd_info->overflow = 1;
      return;
    }
    e = a;
    nd_info->addr[nd_info->n] = a;
    nd_info->size[nd_info->n] = size;
    nd_info->n++;
    return;
  }
}

// The clock kernels read (clock(), clock64()): a count of reads, so that one schedule gives the same
// readings every time; the race check runs once more with another base and rate (clock_mode 1) and
// takes what changed as timing data, not results.
inline long long clock_reading() {
  static long long ticks;
  if (nd_info) nd_info->clock_reads++;
  ++ticks;
  return g.clock_mode ? 7777777 + 37 * ticks : 100000 + 8 * ticks;
}

// Float atomic adds are summed per address in double precision and stored rounded, so the result
// does not depend on the order of the adds (on a GPU it does, by rounding only). The accumulator
// restarts whenever the memory holds something other than what it last stored.
struct FloatAcc {
  const void* addr;
  double acc;
  float last;
};
constexpr size_t FACC_CAP = 1 << 16;
inline FloatAcc* facc_tab;
inline float float_atomic_add(float* p, float v) {
  atomic_tick();
  float old = *p;
  if (!facc_tab) facc_tab = (FloatAcc*)calloc(FACC_CAP, sizeof(FloatAcc));
  size_t h = (size_t)((((uintptr_t)p >> 2) * 0x9E3779B97F4A7C15ull) >> 48);
  for (size_t k = 0; facc_tab && k < 64; k++) {
    FloatAcc& e = facc_tab[(h + k) & (FACC_CAP - 1)];
    if (e.addr != p && e.addr != nullptr) continue;
    if (e.addr == nullptr || memcmp(&e.last, &old, sizeof(float)) != 0) {
      e.addr = p;
      e.acc = old;
    }
    e.acc += v;
    float nv = (float)e.acc;
    *p = nv;
    e.last = nv;
    return old;
  }
  *p = old + v;  // table full: plain float add
  return old;
}

inline void* dyn_smem() { return g.dyn_smem; }

// Threadgroup/__shared__ variables are function statics; the first thread of each threadgroup
// that reaches the declaration fills them with 0xFF bytes (NaN, -1), as real threadgroup memory
// holds garbage: a kernel that reads shared memory it never wrote gets visibly wrong results.
inline unsigned long block_gen;
inline size_t smem_static_bytes;  // threadgroup/__shared__ bytes seen in the running threadgroup
#ifdef KSIM_METAL
constexpr size_t SMEM_STATIC_LIMIT = 32768;  // Apple GPUs: 32 KB of threadgroup memory
#else
constexpr size_t SMEM_STATIC_LIMIT = 49152;  // CUDA: 48 KB of static __shared__ per block
#endif
struct PoisonEntry {
  void* p;
  unsigned long gen;
};
inline PoisonEntry poison_tab[512];
inline int poison_n;
template <class T> inline void poison(T& obj) {
  if constexpr (std::is_trivially_copyable<T>::value) {
    void* p = (void*)&obj;
    int i = 0;
    while (i < poison_n && poison_tab[i].p != p) i++;
    if (i == poison_n) {
      if (poison_n == 512) return;
      poison_tab[poison_n++] = PoisonEntry{p, 0};
    }
    if (poison_tab[i].gen != block_gen) {
      poison_tab[i].gen = block_gen;
      memset(p, 0xff, sizeof(T));
      smem_static_bytes += sizeof(T);
      if (smem_static_bytes > SMEM_STATIC_LIMIT)
        fail(10, "the kernel declares %zu bytes of %s memory; the limit is %zu bytes%s", smem_static_bytes,
#ifdef KSIM_METAL
             "threadgroup", SMEM_STATIC_LIMIT, " on Apple GPUs (32 KB)"
#else
             "static __shared__", SMEM_STATIC_LIMIT, " (48 KB; more needs dynamic shared memory)"
#endif
        );
    }
  }
}

inline void fiber_main() {
  g.entry();
  cur->state = F_DONE;
  g.done++;
  Warp* w = &g.warps[cur->warp];
  w->done++;
  if (w->arrived > 0 && w->arrived + w->done == w->nlanes) release_warp(w);
  ctx_switch(&cur->ctx, &g.sched);  // never resumed
  abort();
}

inline void describe_block(char* buf, size_t len) {
  int nb = 0, nw = 0, nd = 0, firstb = -1, firstw = -1, firstd = -1;
  for (int i = 0; i < g.n; i++) {
    int s = g.fibers[i].state;
    if (s == F_BAR) { nb++; if (firstb < 0) firstb = i; }
    if (s == F_WARP) { nw++; if (firstw < 0) firstw = i; }
    if (s == F_DONE) { nd++; if (firstd < 0) firstd = i; }
  }
  uintptr_t off = nb ? code_offset(g.fibers[firstb].site) : 0;
  char site[64] = "";
  if (off) snprintf(site, sizeof site, " [site=0x%lx]", (unsigned long)off);
  snprintf(buf, len,
           "%d of %d threads wait at a threadgroup barrier (__syncthreads/threadgroup_barrier)%s%d%s, "
           "%d wait at a warp/simdgroup operation, %d already returned%s%d",
           nb, g.n, nb ? " e.g. thread " : "", nb ? firstb : 0, site, nw, nd,
           nd ? " e.g. thread " : "", nd ? firstd : 0);
}

inline void run_block() {
  int n = g.n;
  g.done = 0;
  g.bar_arrived = 0;
  g.bar_acc = 0;
  g.nwarps = (n + WARP - 1) / WARP;
  for (int w = 0; w < g.nwarps; w++) {
    Warp& wp = g.warps[w];
    wp.nlanes = std::min(WARP, n - w * WARP);
    wp.arrived = wp.done = 0;
    wp.arrived_mask = 0;
    wp.gen = 0;
    wp.masks[0] = wp.masks[1] = 0;
  }
  for (int i = 0; i < n; i++) {
    Fiber& f = g.fibers[i];
    f.state = F_RUN;
    f.lin = (unsigned)i;
    f.lane = (unsigned)(i % WARP);
    f.warp = (unsigned)(i / WARP);
    f.tid = u3((unsigned)i % g.bdim.x, ((unsigned)i / g.bdim.x) % g.bdim.y,
               (unsigned)i / (g.bdim.x * g.bdim.y));
    ctx_make(&f.ctx, g.stacks + (size_t)i * g.stack_stride, g.stack_size, fiber_main);
  }
  // scheduling order: threads in order, or (race check) warps last-to-first, lanes in order
  for (int k = 0, m = 0; k < g.nwarps * WARP; k++) {
    int i = (g.reverse & 1) ? (g.nwarps - 1 - k / WARP) * WARP + k % WARP : k;
    if (i < n) g.order[m++] = i;
  }
  block_gen++;
  smem_static_bytes = 0;
  if (g.dyn_smem_size) memset(g.dyn_smem, 0xff, g.dyn_smem_size);  // garbage, like real memory
  while (g.done < n) {
    bool ran = false;
    for (int k = 0; k < n; k++) {
      int i = g.order[k];
      if (g.fibers[i].state == F_RUN) {
        ran = true;
        cur = &g.fibers[i];
        ctx_switch(&g.sched, &cur->ctx);
      }
    }
    if (ran || g.done == n) continue;
    // Nothing can run. Warps whose missing lanes are parked elsewhere (at a barrier, or exited)
    // proceed with the lanes present: those are the active lanes of a divergent warp.
    bool released = false;
    for (int w = 0; w < g.nwarps; w++)
      if (g.warps[w].arrived > 0) {
        release_warp(&g.warps[w]);
        released = true;
      }
    if (released) continue;
    if (g.lenient && g.bar_arrived > 0 && g.bar_arrived + g.done == n) {
      release_barrier();
      continue;
    }
    char what[400];
    describe_block(what, sizeof what);
    fail(3,
         "deadlock in threadgroup (%u,%u,%u): %s. A barrier must be reached by every thread of the "
         "threadgroup; on a GPU this hangs or corrupts results.",
         g.block.x, g.block.y, g.block.z, what);
  }
  cur = nullptr;
}

inline void on_fault(int sig, siginfo_t* si, void* uctx) {
  uintptr_t pc = 0;
#if defined(__x86_64__) && defined(__linux__)
  pc = (uintptr_t)((ucontext_t*)uctx)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__) && defined(__linux__)
  pc = (uintptr_t)((ucontext_t*)uctx)->uc_mcontext.pc;
#elif defined(__APPLE__) && defined(__aarch64__)
  pc = (uintptr_t)((ucontext_t*)uctx)->uc_mcontext->__ss.__pc;
#elif defined(__APPLE__) && defined(__x86_64__)
  pc = (uintptr_t)((ucontext_t*)uctx)->uc_mcontext->__ss.__rip;
#endif
  uintptr_t off = code_offset(pc);
  const char* what = sig == SIGFPE ? "arithmetic fault (integer division by zero?)"
                     : sig == SIGBUS ? "bus error (misaligned or invalid address)"
                                     : "memory fault (out-of-bounds access)";
  uintptr_t a = si ? (uintptr_t)si->si_addr : 0;
  uintptr_t lo = (uintptr_t)g.stacks - (size_t)sysconf(_SC_PAGESIZE);
  if (sig == SIGSEGV && g.stacks && a >= lo && a < (uintptr_t)g.stacks + g.stack_stride * g.max_fibers)
    what = "stack overflow: the kernel's thread-local variables (arrays, recursion) exceed the "
           "simulator's per-thread stack (KSEARCH_SIM_STACK_KB, default 256)";
  char where[128] = "";
  if (cur)
    snprintf(where, sizeof where, " in thread (%u,%u,%u)", cur->tid.x, cur->tid.y, cur->tid.z);
  fail(4, "%s%s of threadgroup (%u,%u,%u), address %p [pc_offset=0x%lx]", what, where, g.block.x,
       g.block.y, g.block.z, si ? si->si_addr : nullptr, (unsigned long)off);
}

inline void* map_guarded(size_t bytes, size_t* out_total) {
  size_t ps = (size_t)sysconf(_SC_PAGESIZE);
  size_t data = (bytes + ps - 1) / ps * ps;
  if (!data) data = ps;
  size_t total = data + ps;
  char* p = (char*)mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  mprotect(p + data, ps, PROT_NONE);
  *out_total = total;
  return p + data - ((bytes + 15) / 16 * 16);
}

// cfg: nblocks[3], tg[3], total[3], partial, dyn_smem_bytes, timeout_ms, stack_kb, reverse, lenient,
// clock_mode
inline int run_grid_child(void** args, const long long* cfg) {
  g.args = args;
  g.nblocks = u3((unsigned)cfg[0], (unsigned)cfg[1], (unsigned)cfg[2]);
  g.tg_req = u3((unsigned)cfg[3], (unsigned)cfg[4], (unsigned)cfg[5]);
  g.total = u3((unsigned)cfg[6], (unsigned)cfg[7], (unsigned)cfg[8]);
  g.partial = (int)cfg[9];
  g.dyn_smem_size = (size_t)cfg[10];
  size_t stack_kb = cfg[12] > 0 ? (size_t)cfg[12] : 256;
  size_t ps = (size_t)sysconf(_SC_PAGESIZE);

  static char altstack[1 << 16];
  stack_t ss;
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  ss.ss_flags = 0;
  sigaltstack(&ss, nullptr);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
  sigaction(SIGFPE, &sa, nullptr);

  int maxn = (int)(g.tg_req.x * g.tg_req.y * g.tg_req.z);
  g.max_fibers = maxn;
  g.stack_size = stack_kb * 1024;
  g.stack_stride = g.stack_size + ps;  // one guard page under each stack
  g.stacks = (char*)mmap(nullptr, g.stack_stride * maxn + ps, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (g.stacks == MAP_FAILED) fail(5, "cannot map %d fiber stacks", maxn);
  for (int i = 0; i < maxn; i++) mprotect(g.stacks + (size_t)i * g.stack_stride, ps, PROT_NONE);
  g.stacks += ps;  // each stack starts after its guard page
  g.fibers = (Fiber*)calloc((size_t)maxn, sizeof(Fiber));
  g.order = (int*)calloc((size_t)maxn + WARP, sizeof(int));
  g.reverse = (int)cfg[13];
  g.lenient = (int)cfg[14];
  g.clock_mode = (int)cfg[15];
  g.warps = (Warp*)calloc((size_t)(maxn + WARP - 1) / WARP, sizeof(Warp));
  if (g.dyn_smem_size) {
    size_t tot;
    g.dyn_smem = (char*)map_guarded(g.dyn_smem_size, &tot);
  }
  for (unsigned bz_ = 0; bz_ < g.nblocks.z; bz_++)
    for (unsigned by_ = 0; by_ < g.nblocks.y; by_++)
      for (unsigned bx_ = 0; bx_ < g.nblocks.x; bx_++) {
        unsigned bx = (g.reverse & 2) ? g.nblocks.x - 1 - bx_ : bx_;
        unsigned by = (g.reverse & 2) ? g.nblocks.y - 1 - by_ : by_;
        unsigned bz = (g.reverse & 2) ? g.nblocks.z - 1 - bz_ : bz_;
        g.block = u3(bx, by, bz);
        u3 d = g.tg_req;
        if (g.partial) {
          d.x = std::min(d.x, g.total.x - bx * g.tg_req.x);
          d.y = std::min(d.y, g.total.y - by * g.tg_req.y);
          d.z = std::min(d.z, g.total.z - bz * g.tg_req.z);
        }
        g.bdim = d;
        g.n = (int)(d.x * d.y * d.z);
        if (g.n > 0) run_block();
      }
  if (nd_info) nd_info->atomic_ops = g.atomic_ops;
  return 0;
}

// Runs the whole grid in a child process. Returns 0 on success; otherwise msg holds the reason:
// 3 deadlock, 4 fault, 5 setup, 6 timeout, 7 killed by another signal, 8 fork failed, 9 other,
// 10 a resource limit of the real GPU exceeded (threadgroup memory), 11 a failed assert() in the kernel.
inline int run_grid(void (*entry)(), void** args, const long long* cfg, char* msg, int msglen) {
  // page layout: int status (-1 until the child reports), then the message
  char* shared = (char*)mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    snprintf(msg, msglen, "cannot map a message buffer");
    return 8;
  }
  if (!nd_info) {
    void* m = mmap(nullptr, sizeof(NdInfo), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) nd_info = (NdInfo*)m;
  }
  if (nd_info) {
    nd_info->clock_reads = nd_info->overflow = nd_info->n = 0;
    nd_info->atomic_ops = 0;
  }
  volatile int* status = (volatile int*)shared;
  char* text = shared + 16;
  const int textlen = 4096 - 16;
  *status = -1;
  text[0] = 0;
  fflush(stdout);
  fflush(stderr);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) {
    munmap(shared, 4096);
    snprintf(msg, msglen, "fork failed");
    return 8;
  }
  if (pid == 0) {
    g.msg = text;
    g.msglen = textlen;
    g.status = status;
    g.entry = entry;
    long long ms = cfg[11] > 0 ? cfg[11] : 20000;
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = ms / 1000;
    it.it_value.tv_usec = (ms % 1000) * 1000;
    signal(SIGALRM, SIG_DFL);
    setitimer(ITIMER_REAL, &it, nullptr);
    run_grid_child(args, cfg);
    *status = 0;
    fflush(stdout);
    fflush(stderr);
    _exit(0);
  }
  int st = 0;
  pid_t w;
  do {
    w = waitpid(pid, &st, 0);
  } while (w < 0 && errno == EINTR);
  int rc;
  if (w < 0) {
    // the child was reaped by someone else (SIGCHLD ignored, or a waitpid(-1) elsewhere): it has
    // finished; what it reported in the shared page is all there is
    rc = *status;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long elapsed_ms = (t1.tv_sec - t0.tv_sec) * 1000LL + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    if (rc < 0 && elapsed_ms >= cfg[11]) {
      snprintf(text, textlen, "time limit of %lld ms exceeded (an endless loop, or a spin-wait on "
               "another threadgroup?)", cfg[11]);
      rc = 6;
    } else if (rc < 0) {
      snprintf(text, textlen, "the kernel process ended without reporting (killed by a signal?)");
      rc = 7;
    }
  } else if (WIFEXITED(st)) {
    rc = WEXITSTATUS(st);
    if (rc != 0 && rc != 3 && rc != 4 && rc != 5 && rc != 10 && rc != 11) {
      if (!text[0]) snprintf(text, textlen, "the kernel exited the process with status %d", rc);
      rc = 9;
    }
  } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) {
    snprintf(text, textlen, "time limit of %lld ms exceeded (an endless loop, or a spin-wait on "
             "another threadgroup?)", cfg[11]);
    rc = 6;
  } else {
    snprintf(text, textlen, "the kernel process was killed by signal %d (%s)",
             WIFSIGNALED(st) ? WTERMSIG(st) : -1, WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "?");
    rc = 7;
  }
  snprintf(msg, msglen, "%s", text);
  munmap(shared, 4096);
  return rc;
}

// Scalar argument slot for run_cuda_source: one int64 and one double per parameter.
struct Scalar {
  long long i;
  double d;
};
template <class T> inline T arg_cast(void* p) {
  if constexpr (std::is_pointer<T>::value) {
    return (T)p;
  } else if constexpr (std::is_integral<T>::value || std::is_enum<T>::value) {
    return (T)((Scalar*)p)->i;
  } else if constexpr (std::is_floating_point<T>::value) {
    return (T)((Scalar*)p)->d;
  } else if constexpr (std::is_constructible<T, float>::value && sizeof(T) <= 4) {
    return T((float)((Scalar*)p)->d);  // __half, __nv_bfloat16
  } else {
    static_assert(std::is_trivially_copyable<T>::value, "ksim: kernel parameter of this type cannot be passed");
    T t;  // a struct passed by value: its bytes
    memcpy((void*)&t, p, sizeof(T));
    return t;
  }
}
// For each kernel parameter: its size and kind (0 pointer, 1 integer, 2 floating, 3 other by value)
template <class T> constexpr int param_kind() {
  return std::is_pointer<T>::value ? 0
         : (std::is_integral<T>::value || std::is_enum<T>::value) ? 1
         : std::is_floating_point<T>::value ? 2
         : (std::is_constructible<T, float>::value && sizeof(T) <= 4) ? 2 : 3;
}
template <class... P> inline void param_info(void (*)(P...), unsigned long* sizes, int* kinds) {
  int i = 0;
  ((sizes[i] = sizeof(std::remove_cv_t<std::remove_reference_t<P>>),
    kinds[i++] = param_kind<std::remove_cv_t<std::remove_reference_t<P>>>()), ...);
}
template <class... P, size_t... I>
inline void call_with(void (*f)(P...), void** a, std::index_sequence<I...>) {
  f(arg_cast<std::remove_cv_t<std::remove_reference_t<P>>>(a[I])...);
}
template <class... P> inline void call_kernel(void (*f)(P...), void** a) {
  call_with(f, a, std::index_sequence_for<P...>{});
}

inline u3 grid_thread_pos() {
  return u3(g.block.x * g.tg_req.x + cur->tid.x, g.block.y * g.tg_req.y + cur->tid.y,
            g.block.z * g.tg_req.z + cur->tid.z);
}

template <class IdxT = int64_t>
inline IdxT elem_to_loc(IdxT elem, const int* shape, const int64_t* strides, int ndim) {
  IdxT loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % shape[i]) * IdxT(strides[i]);
    elem /= shape[i];
  }
  return loc;
}

}  // namespace ksim

// clock() in a kernel reads ksim's clock; host code (a capture's program) gets the process's CPU time, as
// from the C library. A definition, not a macro (<ctime> undefines macros named like C functions); hidden,
// so that the library's own calls bind to it.
extern "C" __attribute__((visibility("hidden"))) inline clock_t clock(void) __THROW {
  if (ksim::cur) return (clock_t)ksim::clock_reading();
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (clock_t)ts.tv_sec * CLOCKS_PER_SEC + (clock_t)(ts.tv_nsec / (1000000000L / CLOCKS_PER_SEC));
}
// A failed assert() in a kernel stops the grid (on a GPU: the launch fails with cudaErrorAssert) and says
// which assertion, where and in which thread; host code keeps the C library's behaviour. Not in a capture's
// program (ksim_host.h), whose kernels' asserts end the program as before.
#if !defined(KSIM_HOST) || defined(KSIM_KERNEL_ONLY)
extern "C" __attribute__((visibility("hidden"))) inline void __assert_fail(const char* expr, const char* file,
                                                                         unsigned int line, const char* func) __THROW {
  if (ksim::cur)
    ksim::fail(11, "assertion `%s` failed at %s line %u in thread (%u,%u,%u) of threadgroup (%u,%u,%u)", expr, file,
               line, ksim::cur->tid.x, ksim::cur->tid.y, ksim::cur->tid.z, ksim::g.block.x, ksim::g.block.y,
               ksim::g.block.z);
  fprintf(stderr, "%s:%u: %s: Assertion `%s' failed.\n", file, line, func, expr);
  fflush(stderr);
  abort();
}
#endif
// __trap() in a kernel stops the grid like a failed assert() (on a GPU: the launch fails, cudaErrorLaunchFailure)
// and says where and in which thread.
namespace ksim {
[[noreturn]] inline void trap_at(const char* file, unsigned int line) {
  if (cur)
    fail(11, "__trap() reached at %s line %u in thread (%u,%u,%u) of threadgroup (%u,%u,%u)", file, line, cur->tid.x,
         cur->tid.y, cur->tid.z, g.block.x, g.block.y, g.block.z);
  fprintf(stderr, "%s:%u: __trap() reached\n", file, line);
  fflush(stderr);
  abort();
}
}  // namespace ksim
#define __trap() ::ksim::trap_at(__FILE__, __LINE__)
#ifndef KSIM_HOST  // ksim_host.h defines clock64 for host and kernel code alike
inline long long clock64() { return ksim::clock_reading(); }
#endif

// Libraries are built with hidden visibility: only these entry points are exported. Otherwise the
// function-local statics that hold threadgroup memory would get STB_GNU_UNIQUE binding and be
// shared with a same-named kernel of another loaded library.
#define KSIM_EXPORT extern "C" __attribute__((visibility("default")))
#define KSIM_EXPORT_RUN(entry_fn)                                                                \
  KSIM_EXPORT int ksim_run(void** args, const long long* cfg, char* msg, int msglen) {           \
    return ksim::run_grid(entry_fn, args, cfg, msg, msglen);                                    \
  }                                                                                              \
  KSIM_EXPORT void* ksim_nd_info() { return (void*)ksim::nd_info; }

// ================================================================================================
// CUDA dialect
// ================================================================================================
#ifdef KSIM_CUDA
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __grid_constant__
#define __constant__
#define __managed__
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define __CUDA_ARCH__ 900
#define __CUDACC__ 1
#define warpSize 32

typedef ksim::cu16<0> __half;
typedef ksim::cu16<1> __nv_bfloat16;
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
typedef ksim::vec<__half, 2> __half2;
typedef __half2 half2;
typedef ksim::vec<__nv_bfloat16, 2> __nv_bfloat162;

#define KSIM_CUDA_VEC(name, T)                                     \
  typedef ksim::vec<T, 2> name##2;                                  \
  typedef ksim::vec<T, 3> name##3;                                  \
  typedef ksim::vec<T, 4> name##4;                                  \
  inline name##2 make_##name##2(T a, T b) { return name##2(a, b); } \
  inline name##3 make_##name##3(T a, T b, T c) { return name##3(a, b, c); } \
  inline name##4 make_##name##4(T a, T b, T c, T d) { return name##4(a, b, c, d); }
KSIM_CUDA_VEC(float, float)
KSIM_CUDA_VEC(double, double)
KSIM_CUDA_VEC(int, int)
KSIM_CUDA_VEC(uint, unsigned)
KSIM_CUDA_VEC(short, short)
KSIM_CUDA_VEC(ushort, unsigned short)
KSIM_CUDA_VEC(char, signed char)
KSIM_CUDA_VEC(uchar, unsigned char)
KSIM_CUDA_VEC(longlong, long long)
KSIM_CUDA_VEC(ulonglong, unsigned long long)
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
  dim3(const uint3& v) : x(v.x), y(v.y), z(v.z) {}
  operator uint3() const { return uint3(x, y, z); }
};
#ifndef KSIM_HOST  // ksim_host.h (launch capture) defines the whole runtime API
typedef int cudaError_t;
typedef void* cudaStream_t;
// OpenGL/Direct3D interop handles: declared by every cuda_runtime.h (a program may hold one at file scope); the
// calls that use them stop the capture (ksim_host.h)
struct cudaGraphicsResource;
typedef cudaGraphicsResource* cudaGraphicsResource_t;
typedef void* cudaEvent_t;
enum { cudaSuccess = 0 };
#endif

#define threadIdx (ksim::cur->tid)
#define blockIdx (ksim::g.block)
#define blockDim (ksim::g.bdim)
#define gridDim (ksim::g.nblocks)

KSIM_AI void __syncthreads() { ksim::barrier(0, KSIM_SITE); }
KSIM_AI int __syncthreads_count(int p) { return (int)ksim::barrier(p ? 1 : 0, KSIM_SITE); }
KSIM_AI int __syncthreads_and(int p) { return ksim::barrier(p ? 1 : 0, KSIM_SITE) == ksim::g.n; }
KSIM_AI int __syncthreads_or(int p) { return ksim::barrier(p ? 1 : 0, KSIM_SITE) != 0; }
inline void __syncwarp(unsigned = 0xffffffffu) { ksim::warp_sync(); }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
inline unsigned __activemask() {
  ksim::Warp& w = ksim::g.warps[ksim::cur->warp];
  unsigned m = 0;
  for (int l = 0; l < w.nlanes; l++)
    if (ksim::g.fibers[ksim::cur->warp * 32 + l].state != ksim::F_DONE) m |= 1u << l;
  return m;
}
inline unsigned __lane_id() { return ksim::cur->lane; }

template <class T> inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  return ksim::shuffle(v, [&](int lane) { return (lane / width) * width + (src % width + width) % width; });
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int m, int width = 32) {
  return ksim::shuffle(v, [&](int lane) {
    int s = lane ^ m;
    return (s / width > lane / width) ? -1 : s;  // a later segment: own value
  });
}
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
  return ksim::shuffle(v, [&](int lane) {
    int s = lane + (int)d;
    return (s / width != lane / width) ? -1 : s;
  });
}
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
  return ksim::shuffle(v, [&](int lane) {
    int s = lane - (int)d;
    return (s < (lane / width) * width) ? -1 : s;
  });
}
inline unsigned __ballot_sync(unsigned mask, int p) { return ksim::warp_ballot(p != 0) & mask; }
inline int __any_sync(unsigned mask, int p) { return (ksim::warp_ballot(p != 0) & mask) != 0; }
inline int __all_sync(unsigned mask, int p) {
  unsigned part;
  unsigned b = ksim::warp_ballot(p != 0, &part);
  part &= mask;
  return (b & part) == part;
}
// legacy (pre-CUDA 9) warp shuffles and votes: all 32 lanes (kernel files and the capture's programs alike)
template <class T> inline T __shfl(T v, int src, int width = 32) { return __shfl_sync(0xffffffffu, v, src, width); }
template <class T> inline T __shfl_xor(T v, int m, int width = 32) { return __shfl_xor_sync(0xffffffffu, v, m, width); }
template <class T> inline T __shfl_down(T v, unsigned d, int width = 32) { return __shfl_down_sync(0xffffffffu, v, d, width); }
template <class T> inline T __shfl_up(T v, unsigned d, int width = 32) { return __shfl_up_sync(0xffffffffu, v, d, width); }
inline int __any(int p) { return __any_sync(0xffffffffu, p); }
inline int __all(int p) { return __all_sync(0xffffffffu, p); }
inline unsigned __ballot(int p) { return __ballot_sync(0xffffffffu, p); }
template <class T> inline T __reduce_add_sync(unsigned, T v) { return ksim::warp_reduce(v, [](T a, T b) { return T(a + b); }); }
template <class T> inline T __reduce_max_sync(unsigned, T v) { return ksim::warp_reduce(v, [](T a, T b) { return a > b ? a : b; }); }
template <class T> inline T __reduce_min_sync(unsigned, T v) { return ksim::warp_reduce(v, [](T a, T b) { return a < b ? a : b; }); }
template <class T> inline T __reduce_and_sync(unsigned, T v) { return ksim::warp_reduce(v, [](T a, T b) { return T(a & b); }); }
template <class T> inline T __reduce_or_sync(unsigned, T v) { return ksim::warp_reduce(v, [](T a, T b) { return T(a | b); }); }
template <class T> inline T __reduce_xor_sync(unsigned, T v) { return ksim::warp_reduce(v, [](T a, T b) { return T(a ^ b); }); }

// Atomics (the old value is returned)
template <class T, class U> inline T atomicAdd(T* p, U v) {
  if constexpr (std::is_same<T, float>::value) return ksim::float_atomic_add(p, (float)v);
  ksim::atomic_tick();
  T o = *p;
  *p = T(o + T(v));
  return o;
}
template <class T, class U> inline T atomicSub(T* p, U v) {
  if constexpr (std::is_same<T, float>::value) return ksim::float_atomic_add(p, -(float)v);
  ksim::atomic_tick();
  T o = *p;
  *p = T(o - T(v));
  return o;
}
template <class T, class U> inline T atomicMax(T* p, U v) { ksim::atomic_tick(); T o = *p; if (T(v) > o) *p = T(v); return o; }
template <class T, class U> inline T atomicMin(T* p, U v) { ksim::atomic_tick(); T o = *p; if (T(v) < o) *p = T(v); return o; }
template <class T, class U> inline T atomicExch(T* p, U v) { ksim::atomic_tick(); ksim::note_order_dependent(p, sizeof(T)); T o = *p; *p = T(v); return o; }
template <class T, class U> inline T atomicAnd(T* p, U v) { ksim::atomic_tick(); T o = *p; *p = o & T(v); return o; }
template <class T, class U> inline T atomicOr(T* p, U v) { ksim::atomic_tick(); T o = *p; *p = o | T(v); return o; }
template <class T, class U> inline T atomicXor(T* p, U v) { ksim::atomic_tick(); T o = *p; *p = o ^ T(v); return o; }
template <class T, class U, class V> inline T atomicCAS(T* p, U cmp, V v) {
  ksim::atomic_tick();
  ksim::note_order_dependent(p, sizeof(T));
  T o = *p;
  if (o == T(cmp)) *p = T(v);
  return o;
}
inline unsigned atomicInc(unsigned* p, unsigned lim) { ksim::atomic_tick(); unsigned o = *p; *p = (o >= lim) ? 0 : o + 1; return o; }
inline unsigned atomicDec(unsigned* p, unsigned lim) { ksim::atomic_tick(); unsigned o = *p; *p = (o == 0 || o > lim) ? lim : o - 1; return o; }
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
// block- and system-scoped atomics: one device here, so the same operations
#ifndef atomicSub_block
#define atomicSub_block atomicSub
#define atomicSub_system atomicSub
#endif
#ifndef atomicExch_block
#define atomicExch_block atomicExch
#define atomicExch_system atomicExch
#endif
#ifndef atomicMax_block
#define atomicMax_block atomicMax
#define atomicMax_system atomicMax
#endif
#ifndef atomicMin_block
#define atomicMin_block atomicMin
#define atomicMin_system atomicMin
#endif
#ifndef atomicInc_block
#define atomicInc_block atomicInc
#define atomicInc_system atomicInc
#endif
#ifndef atomicDec_block
#define atomicDec_block atomicDec
#define atomicDec_system atomicDec
#endif
#ifndef atomicCAS_block
#define atomicCAS_block atomicCAS
#define atomicCAS_system atomicCAS
#endif
#ifndef atomicAnd_block
#define atomicAnd_block atomicAnd
#define atomicAnd_system atomicAnd
#endif
#ifndef atomicOr_block
#define atomicOr_block atomicOr
#define atomicOr_system atomicOr
#endif
#ifndef atomicXor_block
#define atomicXor_block atomicXor
#define atomicXor_system atomicXor
#endif

// Math beyond <math.h>: CUDA's math library (host and device), in double where CUDA has a double form
inline double ksim_erfinv(double y) {   // Newton on erf from a rational start; exact at +-1 (inf) and NaN outside
  if (!(y > -1.0 && y < 1.0)) return y == 1.0 ? HUGE_VAL : (y == -1.0 ? -HUGE_VAL : NAN);
  double w = -log((1.0 - y) * (1.0 + y)), x;
  x = w < 5.0 ? y * (0.886226925452758 + w * (0.2320 + w * 0.0120)) : (y > 0 ? 1 : -1) * sqrt(w - log(w) * 0.5);
  for (int i = 0; i < 40; i++) {
    double e = erf(x) - y;
    double step = e / (1.1283791670955126 * exp(-x * x));
    x -= step;
    if (fabs(step) < 1e-16 * (1.0 + fabs(x))) break;
  }
  return x;
}
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.7071067811865476); }
inline float normcdff(float x) { return (float)normcdf(x); }
inline double erfinv(double y) { return ksim_erfinv(y); }
inline float erfinvf(float y) { return (float)ksim_erfinv(y); }
inline double erfcinv(double y) { return ksim_erfinv(1.0 - y); }
inline float erfcinvf(float y) { return (float)ksim_erfinv(1.0 - (double)y); }
inline double normcdfinv(double p) { return -1.4142135623730951 * ksim_erfinv(1.0 - 2.0 * p); }
inline float normcdfinvf(float p) { return (float)normcdfinv(p); }
inline double sinpi(double x) { return sin(3.141592653589793 * x); }
inline float sinpif(float x) { return (float)sinpi(x); }
inline double cospi(double x) { return cos(3.141592653589793 * x); }
inline float cospif(float x) { return (float)cospi(x); }
inline void sincospi(double x, double* s, double* c) { *s = sinpi(x); *c = cospi(x); }
inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
inline double rcbrt(double x) { return 1.0 / cbrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
// directed-rounding arithmetic (_rz/_ru/_rd) computed with the default rounding: within a last place, which the
// checks' tolerances take; the double forms (__dadd_rn, __drcp_rn, __fma_rn...) in double
#define KSIM_DROUND(r)                                                                   \
  inline double __dadd_##r(double a, double b) { return a + b; }                         \
  inline double __dsub_##r(double a, double b) { return a - b; }                         \
  inline double __dmul_##r(double a, double b) { return a * b; }                         \
  inline double __ddiv_##r(double a, double b) { return a / b; }                         \
  inline double __drcp_##r(double x) { return 1.0 / x; }                                 \
  inline double __dsqrt_##r(double x) { return sqrt(x); }                                \
  inline double __fma_##r(double a, double b, double c) { return fma(a, b, c); }
#define KSIM_FROUND(r)                                                                   \
  inline float __fadd_##r(float a, float b) { return a + b; }                            \
  inline float __fsub_##r(float a, float b) { return a - b; }                            \
  inline float __fmul_##r(float a, float b) { return a * b; }                            \
  inline float __fdiv_##r(float a, float b) { return a / b; }                            \
  inline float __frcp_##r(float x) { return 1.0f / x; }                                  \
  inline float __fsqrt_##r(float x) { return sqrtf(x); }                                 \
  inline float __fmaf_##r(float a, float b, float c) { return fmaf(a, b, c); }
KSIM_DROUND(rn) KSIM_DROUND(rz) KSIM_DROUND(ru) KSIM_DROUND(rd)
KSIM_FROUND(rz) KSIM_FROUND(ru) KSIM_FROUND(rd)
#undef KSIM_DROUND
#undef KSIM_FROUND
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
inline double __longlong_as_double(long long i) { double f; memcpy(&f, &i, 8); return f; }
inline long long __double_as_longlong(double f) { long long i; memcpy(&i, &f, 8); return i; }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// min/max as CUDA declares them (mixed arguments take the common type)
template <class A, class B, std::enable_if_t<ksim::is_scalar_num<A>::value && ksim::is_scalar_num<B>::value, int> = 0>
inline auto max(A a, B b) -> std::common_type_t<A, B> {
  typedef std::common_type_t<A, B> C;
  return C(a) > C(b) ? C(a) : C(b);
}
template <class A, class B, std::enable_if_t<ksim::is_scalar_num<A>::value && ksim::is_scalar_num<B>::value, int> = 0>
inline auto min(A a, B b) -> std::common_type_t<A, B> {
  typedef std::common_type_t<A, B> C;
  return C(a) < C(b) ? C(a) : C(b);
}
// plain overloads for same-type arguments, as CUDA has: they win over std::max under `using namespace std`
#define KSIM_CU_MINMAX(T)                             \
  inline T max(T a, T b) { return a > b ? a : b; }    \
  inline T min(T a, T b) { return a < b ? a : b; }
KSIM_CU_MINMAX(int) KSIM_CU_MINMAX(unsigned) KSIM_CU_MINMAX(long) KSIM_CU_MINMAX(unsigned long)
KSIM_CU_MINMAX(long long) KSIM_CU_MINMAX(unsigned long long) KSIM_CU_MINMAX(float) KSIM_CU_MINMAX(double)
KSIM_CU_MINMAX(__half) KSIM_CU_MINMAX(__nv_bfloat16)
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }

// cuda_fp16 / cuda_bf16
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return h.get(); }
inline __half __int2half_rn(int i) { return __half((float)i); }
inline int __half2int_rn(__half h) { return (int)nearbyintf(h.get()); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return b.get(); }
inline __half __ushort_as_half(unsigned short u) { __half h; h.bits = u; return h; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.bits = u; return h; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
template <int K> inline ksim::cu16<K> __hadd(ksim::cu16<K> a, ksim::cu16<K> b) { return a + b; }
template <int K> inline ksim::cu16<K> __hsub(ksim::cu16<K> a, ksim::cu16<K> b) { return a - b; }
template <int K> inline ksim::cu16<K> __hmul(ksim::cu16<K> a, ksim::cu16<K> b) { return a * b; }
template <int K> inline ksim::cu16<K> __hdiv(ksim::cu16<K> a, ksim::cu16<K> b) { return a / b; }
template <int K> inline ksim::cu16<K> __hneg(ksim::cu16<K> a) { return -a; }
template <int K> inline ksim::cu16<K> __hfma(ksim::cu16<K> a, ksim::cu16<K> b, ksim::cu16<K> c) { return ksim::cu16<K>(fmaf(a.get(), b.get(), c.get())); }
template <int K> inline ksim::cu16<K> __hmax(ksim::cu16<K> a, ksim::cu16<K> b) { return a > b ? a : b; }
template <int K> inline ksim::cu16<K> __hmin(ksim::cu16<K> a, ksim::cu16<K> b) { return a < b ? a : b; }
template <int K> inline ksim::cu16<K> __habs(ksim::cu16<K> a) { return ksim::cu16<K>(fabsf(a.get())); }
template <int K> inline bool __hlt(ksim::cu16<K> a, ksim::cu16<K> b) { return a < b; }
template <int K> inline bool __hgt(ksim::cu16<K> a, ksim::cu16<K> b) { return a > b; }
template <int K> inline bool __hisnan(ksim::cu16<K> a) { return std::isnan(a.get()); }
template <int K> inline bool __hisinf(ksim::cu16<K> a) { return std::isinf(a.get()); }
#define KSIM_H_UNARY(name, fn) template <int K> inline ksim::cu16<K> name(ksim::cu16<K> a) { return ksim::cu16<K>(fn(a.get())); }
KSIM_H_UNARY(hexp, expf) KSIM_H_UNARY(hlog, logf) KSIM_H_UNARY(hsqrt, sqrtf) KSIM_H_UNARY(hexp2, exp2f)
KSIM_H_UNARY(hlog2, log2f) KSIM_H_UNARY(hsin, sinf) KSIM_H_UNARY(hcos, cosf) KSIM_H_UNARY(htanh, tanhf)
KSIM_H_UNARY(hfloor, floorf) KSIM_H_UNARY(hceil, ceilf) KSIM_H_UNARY(hrcp, 1.0f /)
KSIM_H_UNARY(hrsqrt, rsqrtf)
inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
inline __half2 __float2half2_rn(float a) { return __half2(__half(a), __half(a)); }
inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
inline __half2 __half2half2(__half a) { return __half2(a, a); }
inline __half2 make_half2(__half a, __half b) { return __half2(a, b); }
inline __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
inline float2 __half22float2(__half2 h) { return float2(h.x.get(), h.y.get()); }
inline float __low2float(__half2 h) { return h.x.get(); }
inline float __high2float(__half2 h) { return h.y.get(); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half2 __hadd2(__half2 a, __half2 b) { return a + b; }
inline __half2 __hsub2(__half2 a, __half2 b) { return a - b; }
inline __half2 __hmul2(__half2 a, __half2 b) { return a * b; }
inline __half2 __h2div(__half2 a, __half2 b) { return a / b; }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b)); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2(h.x.get(), h.y.get()); }

// libcu++ (<cuda/atomic>, <cuda/std/atomic>): cuda::std is the host's std; cuda::atomic<T, scope> is std::atomic<T>
// (the scope changes nothing on one CPU); cuda::atomic_ref<T, scope> reads and writes another object atomically
namespace cuda {
namespace std = ::std;
enum thread_scope { thread_scope_system = 0, thread_scope_device = 1, thread_scope_block = 2, thread_scope_thread = 3 };
using memory_order = ::std::memory_order;
constexpr ::std::memory_order memory_order_relaxed = ::std::memory_order_relaxed;
constexpr ::std::memory_order memory_order_consume = ::std::memory_order_consume;
constexpr ::std::memory_order memory_order_acquire = ::std::memory_order_acquire;
constexpr ::std::memory_order memory_order_release = ::std::memory_order_release;
constexpr ::std::memory_order memory_order_acq_rel = ::std::memory_order_acq_rel;
constexpr ::std::memory_order memory_order_seq_cst = ::std::memory_order_seq_cst;
template <class T, thread_scope S = thread_scope_system> using atomic = ::std::atomic<T>;
template <class T, thread_scope S = thread_scope_system> struct atomic_ref {
  T* p;
  explicit atomic_ref(T& r) : p(&r) {}
  T load(memory_order = memory_order_seq_cst) const { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
  void store(T v, memory_order = memory_order_seq_cst) const { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
  operator T() const { return load(); }
  T operator=(T v) const { store(v); return v; }
  T exchange(T v, memory_order = memory_order_seq_cst) const { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
  bool compare_exchange_strong(T& e, T v, memory_order = memory_order_seq_cst, memory_order = memory_order_seq_cst) const {
    return __atomic_compare_exchange_n(p, &e, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  }
  bool compare_exchange_weak(T& e, T v, memory_order o = memory_order_seq_cst, memory_order f = memory_order_seq_cst) const {
    return compare_exchange_strong(e, v, o, f);
  }
  T fetch_add(T v, memory_order = memory_order_seq_cst) const { T o = *p; *p = o + v; return o; }
  T fetch_sub(T v, memory_order = memory_order_seq_cst) const { T o = *p; *p = o - v; return o; }
  T fetch_and(T v, memory_order = memory_order_seq_cst) const { T o = *p; *p = o & v; return o; }
  T fetch_or(T v, memory_order = memory_order_seq_cst) const { T o = *p; *p = o | v; return o; }
  T fetch_xor(T v, memory_order = memory_order_seq_cst) const { T o = *p; *p = o ^ v; return o; }
  T fetch_min(T v, memory_order = memory_order_seq_cst) const { T o = *p; if (v < o) *p = v; return o; }
  T fetch_max(T v, memory_order = memory_order_seq_cst) const { T o = *p; if (v > o) *p = v; return o; }
  T operator+=(T v) const { return fetch_add(v) + v; }
  T operator-=(T v) const { return fetch_sub(v) - v; }
};
}  // namespace cuda
#define CUDART_INF_F (__builtin_inff())
#define CUDART_NAN_F (__builtin_nanf(""))
#define CUDART_PI_F 3.141592654f

// cooperative_groups: blocks, tiles, and the grid as seen by one thread.
namespace cooperative_groups {
struct thread_block {
  unsigned long long thread_rank() const { return ksim::cur->lin; }
  unsigned long long size() const { return (unsigned long long)ksim::g.n; }
  unsigned long long num_threads() const { return size(); }
  KSIM_AI void sync() const { ksim::barrier(0, KSIM_SITE); }
  dim3 group_index() const { return dim3(ksim::g.block.x, ksim::g.block.y, ksim::g.block.z); }
  dim3 thread_index() const { return dim3(ksim::cur->tid.x, ksim::cur->tid.y, ksim::cur->tid.z); }
  dim3 group_dim() const { return dim3(ksim::g.bdim.x, ksim::g.bdim.y, ksim::g.bdim.z); }
};
inline thread_block this_thread_block() { return thread_block(); }
struct grid_group {
  unsigned long long block_rank() const {
    const auto& b = ksim::g.block;
    const auto& n = ksim::g.nblocks;
    return b.x + (unsigned long long)n.x * (b.y + (unsigned long long)n.y * b.z);
  }
  unsigned long long thread_rank() const {
    return block_rank() * (ksim::g.tg_req.x * ksim::g.tg_req.y * ksim::g.tg_req.z) + ksim::cur->lin;
  }
  unsigned long long size() const {
    return (unsigned long long)ksim::g.nblocks.x * ksim::g.nblocks.y * ksim::g.nblocks.z *
           ksim::g.tg_req.x * ksim::g.tg_req.y * ksim::g.tg_req.z;
  }
  unsigned long long num_threads() const { return size(); }
  bool is_valid() const { return true; }
  void sync() const {
    ksim::fail(3, "cooperative_groups::this_grid().sync() is not supported by the CPU simulator "
                  "(threadgroups run one after another)");
  }
};
inline grid_group this_grid() { return grid_group(); }
template <unsigned N> struct thread_block_tile {
  unsigned long long thread_rank() const { return ksim::cur->lin % N; }
  unsigned long long size() const { return N; }
  unsigned long long num_threads() const { return N; }
  unsigned long long meta_group_rank() const { return ksim::cur->lin / N; }
  unsigned long long meta_group_size() const { return (ksim::g.n + N - 1) / N; }
  void sync() const { ksim::warp_sync(); }
  template <class T> T shfl(T v, int src) const { return __shfl_sync(0xffffffffu, v, src, N); }
  template <class T> T shfl_xor(T v, int m) const { return __shfl_xor_sync(0xffffffffu, v, m, N); }
  template <class T> T shfl_down(T v, unsigned d) const { return __shfl_down_sync(0xffffffffu, v, d, N); }
  template <class T> T shfl_up(T v, unsigned d) const { return __shfl_up_sync(0xffffffffu, v, d, N); }
  int any(int p) const { return __any_sync(0xffffffffu, p); }
  int all(int p) const { return __all_sync(0xffffffffu, p); }
  unsigned ballot(int p) const { return __ballot_sync(0xffffffffu, p); }
};
template <unsigned N, class G> inline thread_block_tile<N> tiled_partition(const G&) { return thread_block_tile<N>(); }
template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct greater { T operator()(T a, T b) const { return a > b ? a : b; } };
template <class T> struct less { T operator()(T a, T b) const { return a < b ? a : b; } };
template <unsigned N, class T, class Op> inline T reduce(const thread_block_tile<N>&, T v, Op op) {
  for (unsigned o = N / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, (int)o, N));
  return v;
}
}  // namespace cooperative_groups

// MLX's CUDA headers (mlx/backend/cuda/device/utils.cuh, config.h): what custom kernels can use
#define MAX_NDIM 10
#define WARP_SIZE 32
namespace mlx { namespace core { namespace cu {
using Shape = std::array<int32_t, MAX_NDIM>;
using Strides = std::array<int64_t, MAX_NDIM>;
using ksim::elem_to_loc;
template <typename T, int N> struct alignas(sizeof(T) * N) AlignedVector {
  T val[N];
  T& operator[](int i) { return val[i]; }
  T operator[](int i) const { return val[i]; }
};
template <int N, typename T> inline bool is_aligned(T* x) { return (reinterpret_cast<uintptr_t>(x) % (N * sizeof(T))) == 0; }
template <int N, typename T> inline AlignedVector<T, N> unsafe_load_vector(const T* p, uint32_t off) {
  return reinterpret_cast<const AlignedVector<T, N>*>(p)[off];
}
template <int N, typename T> inline AlignedVector<T, N> load_vector(const T* p, uint32_t off) {
  AlignedVector<T, N> v;
  for (int i = 0; i < N; ++i) v[i] = p[off * N + i];
  return v;
}
template <int N, typename T, typename SizeT> inline AlignedVector<T, N> load_vector(const T* p, uint32_t off, SizeT size, T fallback) {
  AlignedVector<T, N> v;
  for (int i = 0; i < N; ++i) v[i] = (SizeT)(N * off + i) < size ? p[off * N + i] : fallback;
  return v;
}
template <int N, typename T> inline void unsafe_store_vector(T* p, uint32_t off, const AlignedVector<T, N>& v) {
  reinterpret_cast<AlignedVector<T, N>*>(p)[off] = v;
}
template <int N, typename T> inline void store_vector(T* p, uint32_t off, const AlignedVector<T, N>& v) {
  for (int i = 0; i < N; ++i) p[off * N + i] = v[i];
}
template <int N, typename T, typename SizeT> inline void store_vector(T* p, uint32_t off, const AlignedVector<T, N>& v, SizeT size) {
  for (int i = 0; (SizeT)(off * N + i) < size && i < N; ++i) p[off * N + i] = v[i];
}
template <typename T> struct Limits {
  static T max() { return std::numeric_limits<T>::max(); }
  static T min() { return std::numeric_limits<T>::min(); }
  static T finite_max() { return std::numeric_limits<T>::max(); }
  static T finite_min() { return std::numeric_limits<T>::min(); }
};
template <typename F> struct FloatLimits {
  static F max() { return F(__builtin_inff()); }
  static F min() { return F(-__builtin_inff()); }
  static F finite_max() { return F(ksim_finite_max<F>()); }
  static F finite_min() { return F(-ksim_finite_max<F>()); }
  template <class G> static float ksim_finite_max() {
    return std::is_same<G, __half>::value ? 65504.0f : (std::is_same<G, __nv_bfloat16>::value ? 3.38953139e38f : FLT_MAX);
  }
};
template <> struct Limits<float> : FloatLimits<float> {};
template <> struct Limits<double> {
  static double max() { return __builtin_inf(); }
  static double min() { return -__builtin_inf(); }
  static double finite_max() { return DBL_MAX; }
  static double finite_min() { return -DBL_MAX; }
};
template <> struct Limits<__half> : FloatLimits<__half> {};
template <> struct Limits<__nv_bfloat16> : FloatLimits<__nv_bfloat16> {};
template <> struct Limits<bool> { static bool max() { return true; } static bool min() { return false; } };
}}}  // namespace mlx::core::cu
#endif  // KSIM_CUDA

// ================================================================================================
// Metal dialect
// ================================================================================================
#ifdef KSIM_METAL
typedef _Float16 half;
typedef _Float16 float16_t;
typedef ksim::mbf16 bfloat;
typedef ksim::mbf16 bfloat16_t;
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

constexpr _Float16 operator""h(long double v) { return (_Float16)v; }
constexpr _Float16 operator""h(unsigned long long v) { return (_Float16)v; }

#define KSIM_METAL_VEC(name, T)    \
  typedef ksim::vec<T, 2> name##2; \
  typedef ksim::vec<T, 3> name##3; \
  typedef ksim::vec<T, 4> name##4;
KSIM_METAL_VEC(float, float)
KSIM_METAL_VEC(half, _Float16)
KSIM_METAL_VEC(bfloat, ksim::mbf16)
KSIM_METAL_VEC(int, int)
KSIM_METAL_VEC(uint, unsigned)
KSIM_METAL_VEC(short, short)
KSIM_METAL_VEC(ushort, unsigned short)
KSIM_METAL_VEC(char, signed char)
KSIM_METAL_VEC(uchar, unsigned char)
KSIM_METAL_VEC(long, long)
KSIM_METAL_VEC(ulong, unsigned long)
KSIM_METAL_VEC(bool, bool)

// packed_floatN / packed_halfN: element-aligned storage, converted to and from the vector types
namespace ksim {
template <class T, int N> struct packed_fields;
template <class T> struct packed_fields<T, 2> { union { struct { T x, y; }; T v_[2]; }; };
template <class T> struct packed_fields<T, 3> { union { struct { T x, y, z; }; T v_[3]; }; };
template <class T> struct packed_fields<T, 4> { union { struct { T x, y, z, w; }; T v_[4]; }; };
template <class T, int N> struct packed : packed_fields<T, N> {
  packed() = default;
  packed(const vec<T, N>& o) { for (int i = 0; i < N; i++) this->v_[i] = o[i]; }
  operator vec<T, N>() const { vec<T, N> r; for (int i = 0; i < N; i++) r[i] = this->v_[i]; return r; }
  T& operator[](int i) { return this->v_[i]; }
  const T& operator[](int i) const { return this->v_[i]; }
};
}  // namespace ksim
#define KSIM_METAL_PACKED(name, T)                          \
  typedef ksim::packed<T, 2> packed_##name##2;              \
  typedef ksim::packed<T, 3> packed_##name##3;              \
  typedef ksim::packed<T, 4> packed_##name##4;
KSIM_METAL_PACKED(float, float)
KSIM_METAL_PACKED(half, _Float16)
KSIM_METAL_PACKED(int, int)
KSIM_METAL_PACKED(uint, unsigned)
KSIM_METAL_PACKED(short, short)
KSIM_METAL_PACKED(ushort, unsigned short)
KSIM_METAL_PACKED(char, signed char)
KSIM_METAL_PACKED(uchar, unsigned char)

namespace metal {
template <class T, int N> using vec = ksim::vec<T, N>;  // MSL's generic spelling: vec<float, 4>
enum class mem_flags : int { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8, mem_object_data = 16 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }
KSIM_AI void threadgroup_barrier(mem_flags = mem_flags::mem_none) { ksim::barrier(0, KSIM_SITE); }
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none) { ksim::warp_sync(); }

template <class T> struct numeric_limits : std::numeric_limits<T> {};
template <> struct numeric_limits<_Float16> {
  static constexpr bool is_specialized = true;
  static _Float16 max() { return (_Float16)65504.0f; }
  static _Float16 min() { return (_Float16)6.103515625e-05f; }
  static _Float16 lowest() { return (_Float16)-65504.0f; }
  static _Float16 infinity() { return (_Float16)__builtin_inff(); }
  static _Float16 quiet_NaN() { return (_Float16)__builtin_nanf(""); }
  static _Float16 epsilon() { return (_Float16)0.0009765625f; }
};
template <> struct numeric_limits<ksim::mbf16> {
  static constexpr bool is_specialized = true;
  static ksim::mbf16 max() { return ksim::mbf16(3.38953139e38f); }
  static ksim::mbf16 min() { return ksim::mbf16(1.17549435e-38f); }
  static ksim::mbf16 lowest() { return ksim::mbf16(-3.38953139e38f); }
  static ksim::mbf16 infinity() { return ksim::mbf16(__builtin_inff()); }
  static ksim::mbf16 quiet_NaN() { return ksim::mbf16(__builtin_nanf("")); }
  static ksim::mbf16 epsilon() { return ksim::mbf16(0.0078125f); }
};

// math: float, half, bfloat and their vectors
#define KSIM_MU(name, expr)                                                          \
  inline float name(float x) { return (expr); }                                     \
  inline _Float16 name(_Float16 h) { return (_Float16)name((float)h); }              \
  inline ksim::mbf16 name(ksim::mbf16 b) { return ksim::mbf16(name((float)b)); }     \
  template <class T, int N> inline ksim::vec<T, N> name(const ksim::vec<T, N>& v) {  \
    ksim::vec<T, N> r;                                                               \
    for (int i = 0; i < N; i++) r[i] = name(v[i]);                                   \
    return r;                                                                        \
  }
KSIM_MU(exp, ::expf(x)) KSIM_MU(exp2, ::exp2f(x)) KSIM_MU(exp10, ::powf(10.0f, x))
KSIM_MU(log, ::logf(x)) KSIM_MU(log2, ::log2f(x)) KSIM_MU(log10, ::log10f(x))
KSIM_MU(log1p, ::log1pf(x)) KSIM_MU(expm1, ::expm1f(x))
KSIM_MU(sqrt, ::sqrtf(x)) KSIM_MU(rsqrt, 1.0f / ::sqrtf(x)) KSIM_MU(cbrt, ::cbrtf(x))
KSIM_MU(sin, ::sinf(x)) KSIM_MU(cos, ::cosf(x)) KSIM_MU(tan, ::tanf(x))
KSIM_MU(asin, ::asinf(x)) KSIM_MU(acos, ::acosf(x)) KSIM_MU(atan, ::atanf(x))
KSIM_MU(sinh, ::sinhf(x)) KSIM_MU(cosh, ::coshf(x)) KSIM_MU(tanh, ::tanhf(x))
KSIM_MU(asinh, ::asinhf(x)) KSIM_MU(acosh, ::acoshf(x)) KSIM_MU(atanh, ::atanhf(x))
KSIM_MU(erf, ::erff(x)) KSIM_MU(erfc, ::erfcf(x))
KSIM_MU(floor, ::floorf(x)) KSIM_MU(ceil, ::ceilf(x)) KSIM_MU(round, ::roundf(x))
KSIM_MU(rint, ::rintf(x)) KSIM_MU(trunc, ::truncf(x)) KSIM_MU(fract, x - ::floorf(x))
KSIM_MU(fabs, ::fabsf(x)) KSIM_MU(saturate, x < 0.f ? 0.f : (x > 1.f ? 1.f : x))
KSIM_MU(sign, x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f))
KSIM_MU(recip, 1.0f / x)
inline long abs(long x) { return x < 0 ? -x : x; }
inline short abs(short x) { return x < 0 ? -x : x; }
inline unsigned abs(unsigned x) { return x; }
KSIM_MU(abs, ::fabsf(x))
#define KSIM_MINMAX_INT(T)                               \
  inline T max(T a, T b) { return a > b ? a : b; }       \
  inline T min(T a, T b) { return a < b ? a : b; }
KSIM_MINMAX_INT(int) KSIM_MINMAX_INT(unsigned) KSIM_MINMAX_INT(long) KSIM_MINMAX_INT(unsigned long)
KSIM_MINMAX_INT(short) KSIM_MINMAX_INT(unsigned short) KSIM_MINMAX_INT(signed char) KSIM_MINMAX_INT(unsigned char)
KSIM_MINMAX_INT(long long) KSIM_MINMAX_INT(unsigned long long) KSIM_MINMAX_INT(double)
#define KSIM_MB(name, expr)                                                                         \
  inline float name(float x, float y) { return (expr); }                                          \
  inline _Float16 name(_Float16 a, _Float16 b) { return (_Float16)name((float)a, (float)b); }      \
  inline ksim::mbf16 name(ksim::mbf16 a, ksim::mbf16 b) { return ksim::mbf16(name((float)a, (float)b)); } \
  template <class T, int N> inline ksim::vec<T, N> name(const ksim::vec<T, N>& a, const ksim::vec<T, N>& b) { \
    ksim::vec<T, N> r;                                                                             \
    for (int i = 0; i < N; i++) r[i] = name(a[i], b[i]);                                            \
    return r;                                                                                      \
  }                                                                                                \
  template <class T, int N> inline ksim::vec<T, N> name(const ksim::vec<T, N>& a, typename ksim::ident<T>::type b) { \
    return name(a, ksim::vec<T, N>(b));                                                            \
  }
KSIM_MB(pow, ::powf(x, y)) KSIM_MB(powr, ::powf(x, y)) KSIM_MB(atan2, ::atan2f(x, y))
KSIM_MB(fmod, ::fmodf(x, y)) KSIM_MB(copysign, ::copysignf(x, y)) KSIM_MB(fdim, ::fdimf(x, y))
KSIM_MB(fmax, ::fmaxf(x, y)) KSIM_MB(fmin, ::fminf(x, y)) KSIM_MB(step, y < x ? 0.f : 1.f)
KSIM_MB(divide, x / y) KSIM_MB(hypot, ::hypotf(x, y))
KSIM_MB(max, ::fmaxf(x, y)) KSIM_MB(min, ::fminf(x, y))
// Mixed scalar arguments (e.g. max(x, 0)) take the common type instead of failing to compile.
template <class A, class B,
          std::enable_if_t<ksim::is_scalar_num<A>::value && ksim::is_scalar_num<B>::value && !std::is_same<A, B>::value, int> = 0>
inline auto max(A a, B b) { typedef decltype(a + b) C; return max(C(a), C(b)); }
template <class A, class B,
          std::enable_if_t<ksim::is_scalar_num<A>::value && ksim::is_scalar_num<B>::value && !std::is_same<A, B>::value, int> = 0>
inline auto min(A a, B b) { typedef decltype(a + b) C; return min(C(a), C(b)); }
template <class T> inline T max3(T a, T b, T c) { return max(max(a, b), c); }
template <class T> inline T fmax3(T a, T b, T c) { return fmax(fmax(a, b), c); }
template <class T> inline T fmin3(T a, T b, T c) { return fmin(fmin(a, b), c); }
inline float sincos(float x, float& cosval) { cosval = ::cosf(x); return ::sinf(x); }
inline _Float16 sincos(_Float16 x, _Float16& cosval) { cosval = (_Float16)::cosf((float)x); return (_Float16)::sinf((float)x); }
inline float ldexp(float x, int e) { return ::ldexpf(x, e); }
inline float frexp(float x, int& e) { return ::frexpf(x, &e); }
inline float modf(float x, float& ip) { return ::modff(x, &ip); }
template <class T> inline bool isnormal(T x) { return std::isnormal((float)x); }
template <class T> inline T min3(T a, T b, T c) { return min(min(a, b), c); }
template <class T> inline T median3(T a, T b, T c) { return max(min(a, b), min(max(a, b), c)); }
template <class T, class L, class H> inline T clamp(T x, L lo, H hi) { return min(max(x, T(lo)), T(hi)); }
inline float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
inline _Float16 fma(_Float16 a, _Float16 b, _Float16 c) { return (_Float16)::fmaf(a, b, c); }
inline ksim::mbf16 fma(ksim::mbf16 a, ksim::mbf16 b, ksim::mbf16 c) { return ksim::mbf16(::fmaf(a, b, c)); }
template <class T, int N> inline ksim::vec<T, N> fma(const ksim::vec<T, N>& a, const ksim::vec<T, N>& b, const ksim::vec<T, N>& c) {
  ksim::vec<T, N> r;
  for (int i = 0; i < N; i++) r[i] = fma(a[i], b[i], c[i]);
  return r;
}
template <class A, class B, class C> inline auto fma(A a, B b, C c) { return a * b + c; }
template <class T, class U> inline T mix(T x, T y, U a) { return x + (y - x) * a; }
template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }
template <class T, int N> inline ksim::vec<T, N> select(const ksim::vec<T, N>& a, const ksim::vec<T, N>& b, const ksim::vec<bool, N>& c) {
  ksim::vec<T, N> r;
  for (int i = 0; i < N; i++) r[i] = c[i] ? b[i] : a[i];
  return r;
}
template <class T> inline bool isnan(T x) { return std::isnan((float)x); }
template <class T> inline bool isinf(T x) { return std::isinf((float)x); }
template <class T> inline bool isfinite(T x) { return std::isfinite((float)x); }
template <class T> inline bool signbit(T x) { return std::signbit((float)x); }
template <class T, int N> inline T dot(const ksim::vec<T, N>& a, const ksim::vec<T, N>& b) {
  T s = T(0);
  for (int i = 0; i < N; i++) s += a[i] * b[i];
  return s;
}
template <class T, int N> inline T length(const ksim::vec<T, N>& a) { return sqrt(dot(a, a)); }
template <class T, int N> inline T length_squared(const ksim::vec<T, N>& a) { return dot(a, a); }
template <class T, int N> inline ksim::vec<T, N> normalize(const ksim::vec<T, N>& a) { return a * (T(1) / length(a)); }
template <class T, int N> inline bool all(const ksim::vec<T, N>& a) { for (int i = 0; i < N; i++) if (!a[i]) return false; return true; }
template <class T, int N> inline bool any(const ksim::vec<T, N>& a) { for (int i = 0; i < N; i++) if (a[i]) return true; return false; }
inline bool all(bool b) { return b; }
inline bool any(bool b) { return b; }
template <class T> inline unsigned popcount(T x) { return (unsigned)__builtin_popcountll((unsigned long long)x); }
template <class T> inline T mul24(T a, T b) { return a * b; }   // exact while both fit in 24 bits, as on the GPU
inline int mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned mulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline unsigned clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline unsigned reverse_bits(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned ctz(unsigned x) { return x ? __builtin_ctz(x) : 32; }
// Metal's clz/ctz return the argument's type and count over its width (64 for long / ulong)
inline int clz(int x) { return (int)clz((unsigned)x); }
inline int ctz(int x) { return (int)ctz((unsigned)x); }
inline long clz(long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline unsigned long clz(unsigned long x) { return x ? __builtin_clzll(x) : 64; }
inline long ctz(long x) { return x ? __builtin_ctzll((unsigned long long)x) : 64; }
inline unsigned long ctz(unsigned long x) { return x ? __builtin_ctzll(x) : 64; }
template <class To, class From> inline To as_type(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "as_type needs types of the same size");
  To t;
  memcpy(&t, &f, sizeof(To));
  return t;
}
namespace fast = ::metal;
namespace precise = ::metal;
// metal_stdlib's type traits are std's
using std::is_same; using std::enable_if; using std::enable_if_t; using std::conditional;
using std::conditional_t; using std::is_floating_point; using std::is_integral; using std::is_signed;
using std::is_unsigned; using std::integral_constant; using std::true_type; using std::false_type;
using std::remove_cv_t; using std::remove_reference_t; using std::decay_t; using std::is_arithmetic;
template <class A, class B> constexpr bool is_same_v = std::is_same<A, B>::value;
template <class T> constexpr bool is_floating_point_v = std::is_floating_point<T>::value || std::is_same<T, _Float16>::value || std::is_same<T, ksim::mbf16>::value;
template <class T> constexpr bool is_integral_v = std::is_integral<T>::value;
template <class T> constexpr bool is_signed_v = std::is_signed<T>::value;
template <class T> constexpr bool is_unsigned_v = std::is_unsigned<T>::value;

// simdgroup (32 lanes, lockstep). Each call site is its own collective (see release_warp).
template <class T> KSIM_AI T simd_sum(T v) { return ksim::warp_reduce(v, [](T a, T b) { return T(a + b); }, KSIM_SITE); }
template <class T> KSIM_AI T simd_product(T v) { return ksim::warp_reduce(v, [](T a, T b) { return T(a * b); }, KSIM_SITE); }
template <class T> KSIM_AI T simd_max(T v) { return ksim::warp_reduce(v, [](T a, T b) { return max(a, b); }, KSIM_SITE); }
template <class T> KSIM_AI T simd_min(T v) { return ksim::warp_reduce(v, [](T a, T b) { return min(a, b); }, KSIM_SITE); }
template <class T> KSIM_AI T simd_and(T v) { return ksim::warp_reduce(v, [](T a, T b) { return T(a & b); }, KSIM_SITE); }
template <class T> KSIM_AI T simd_or(T v) { return ksim::warp_reduce(v, [](T a, T b) { return T(a | b); }, KSIM_SITE); }
template <class T> KSIM_AI T simd_xor(T v) { return ksim::warp_reduce(v, [](T a, T b) { return T(a ^ b); }, KSIM_SITE); }
template <class T> KSIM_AI T simd_prefix_inclusive_sum(T v) { return ksim::warp_scan(v, [](T a, T b) { return T(a + b); }, true, T(0), KSIM_SITE); }
template <class T> KSIM_AI T simd_prefix_exclusive_sum(T v) { return ksim::warp_scan(v, [](T a, T b) { return T(a + b); }, false, T(0), KSIM_SITE); }
template <class T> KSIM_AI T simd_prefix_inclusive_product(T v) { return ksim::warp_scan(v, [](T a, T b) { return T(a * b); }, true, T(1), KSIM_SITE); }
template <class T> KSIM_AI T simd_prefix_exclusive_product(T v) { return ksim::warp_scan(v, [](T a, T b) { return T(a * b); }, false, T(1), KSIM_SITE); }
template <class T> KSIM_AI T simd_shuffle(T v, ushort lane) { return ksim::shuffle(v, [&](int) { return (int)(lane % 32); }, KSIM_SITE); }
template <class T> KSIM_AI T simd_broadcast(T v, ushort lane) { return ksim::shuffle(v, [&](int) { return (int)(lane % 32); }, KSIM_SITE); }
template <class T> KSIM_AI T simd_broadcast_first(T v) {
  unsigned slot = ksim::warp_arrive(&v, sizeof(T), KSIM_SITE);
  unsigned m = ksim::slot_mask(slot);
  return ksim::lane_val<T>(slot, m ? (unsigned)__builtin_ctz(m) : 0u, v);
}
template <class T> KSIM_AI T simd_shuffle_xor(T v, ushort m) { return ksim::shuffle(v, [&](int l) { return (l ^ m) & 31; }, KSIM_SITE); }
template <class T> KSIM_AI T simd_shuffle_down(T v, ushort d) { return ksim::shuffle(v, [&](int l) { return l + d < 32 ? l + d : -1; }, KSIM_SITE); }
template <class T> KSIM_AI T simd_shuffle_up(T v, ushort d) { return ksim::shuffle(v, [&](int l) { return l - (int)d >= 0 ? l - (int)d : -1; }, KSIM_SITE); }
template <class T> KSIM_AI T simd_shuffle_rotate_down(T v, ushort d) { return ksim::shuffle(v, [&](int l) { return (l + d) & 31; }, KSIM_SITE); }
template <class T> KSIM_AI T simd_shuffle_rotate_up(T v, ushort d) { return ksim::shuffle(v, [&](int l) { return (l - d + 32) & 31; }, KSIM_SITE); }
template <class T> KSIM_AI T simd_shuffle_and_fill_down(T v, T fill, ushort d) {
  uintptr_t site = KSIM_SITE;
  unsigned slot = ksim::warp_arrive(&fill, sizeof(T), site);  // two exchanges: fill values, then data
  T f = ksim::lane_val<T>(slot, (ksim::cur->lane + d) & 31, fill);
  T r = ksim::shuffle(v, [&](int l) { return l + d < 32 ? l + d : -1; }, site);
  return ksim::cur->lane + d < 32 ? r : f;
}
KSIM_AI bool simd_all(bool p) {
  unsigned part;
  unsigned b = ksim::warp_ballot(p, &part, KSIM_SITE);
  return b == part;
}
KSIM_AI bool simd_any(bool p) { return ksim::warp_ballot(p, nullptr, KSIM_SITE) != 0; }
struct simd_vote {
  typedef unsigned long vote_t;
  vote_t v;
  explicit simd_vote(vote_t x = 0) : v(x) {}
  bool all() const { return v == 0xfffffffful; }
  bool any() const { return v != 0; }
  explicit operator vote_t() const { return v; }
};
inline simd_vote simd_active_threads_mask() {
  ksim::Warp& w = ksim::g.warps[ksim::cur->warp];
  unsigned long m = 0;
  for (int l = 0; l < w.nlanes; l++)
    if (ksim::g.fibers[ksim::cur->warp * 32 + l].state != ksim::F_DONE) m |= 1ul << l;
  return simd_vote(m);
}
KSIM_AI simd_vote simd_ballot(bool p) { return simd_vote(ksim::warp_ballot(p, nullptr, KSIM_SITE)); }
KSIM_AI bool simd_is_first() {
  unsigned slot = ksim::warp_arrive(nullptr, 0, KSIM_SITE);
  unsigned m = ksim::slot_mask(slot);
  return m && (unsigned)__builtin_ctz(m) == ksim::cur->lane;
}

// simdgroup matrices: every lane holds the whole tile. Metal requires the arguments of these calls
// to be uniform across the simdgroup, so each lane can compute the full product itself.
// thread_elements() is this lane's two elements in MLX's 8x8 fragment layout (row
// (q & 4) + (lane / 2) % 4, columns (q & 2) * 2 + (lane % 2) * 2 + {0, 1} with q = lane / 4);
// before a tile is used, the lanes exchange those elements, so edits made through
// thread_elements() reach every lane's copy.
template <class T, int Cols, int Rows> struct simdgroup_matrix {
  alignas(16) T m[Rows][Cols];
  simdgroup_matrix() = default;
  explicit simdgroup_matrix(T diag) {
    for (int i = 0; i < Rows; i++)
      for (int j = 0; j < Cols; j++) m[i][j] = i == j ? diag : T(0);
  }
  static int frag_row(unsigned lane) { return (int)(((lane / 4) & 4) + (lane / 2) % 4); }
  static int frag_col(unsigned lane) { return (int)(((lane / 4) & 2) * 2 + (lane % 2) * 2); }
  ksim::vec<T, 2>& thread_elements() {
    static_assert(Rows == 8 && Cols == 8, "thread_elements() is modelled for 8x8 tiles");
    unsigned l = ksim::cur->lane;
    return *reinterpret_cast<ksim::vec<T, 2>*>(&m[frag_row(l)][frag_col(l)]);
  }
  void resync() {
    if (Rows != 8 || Cols != 8) return;
    unsigned l = ksim::cur->lane;
    T mine[2] = {m[frag_row(l)][frag_col(l)], m[frag_row(l)][frag_col(l) + 1]};
    unsigned slot = ksim::warp_arrive(mine, sizeof mine);
    unsigned part = ksim::slot_mask(slot);
    ksim::Warp* w = &ksim::g.warps[ksim::cur->warp];
    for (unsigned k = 0; k < ksim::WARP; k++)
      if (part & (1u << k)) memcpy(&m[frag_row(k)][frag_col(k)], w->vals[slot][k], sizeof mine);
  }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<_Float16, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<ksim::mbf16, 8, 8> simdgroup_bfloat8x8;
template <class T, int C, int R> inline simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, C, R> r;
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) r.m[i][j] = v;
  return r;
}
template <class T, int C, int R, class U>
inline void simdgroup_load(simdgroup_matrix<T, C, R>& d, const U* src, unsigned long elements_per_row = C,
                           ksim::vec<unsigned long, 2> origin = ksim::vec<unsigned long, 2>(0ul), bool transpose = false) {
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++)
      d.m[i][j] = transpose ? T(src[(origin.y + j) * elements_per_row + origin.x + i])
                            : T(src[(origin.y + i) * elements_per_row + origin.x + j]);
}
template <class T, int C, int R, class U>
inline void simdgroup_store(const simdgroup_matrix<T, C, R>& a_, U* dst, unsigned long elements_per_row = C,
                            ksim::vec<unsigned long, 2> origin = ksim::vec<unsigned long, 2>(0ul), bool transpose = false) {
  simdgroup_matrix<T, C, R> a = a_;
  a.resync();  // also: every lane has its copy ready before any lane writes
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) {
      if (transpose) dst[(origin.y + j) * elements_per_row + origin.x + i] = U(a.m[i][j]);
      else dst[(origin.y + i) * elements_per_row + origin.x + j] = U(a.m[i][j]);
    }
}
template <class T, class TA, class TB, class TC, int M, int N, int K>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, N, M>& d, const simdgroup_matrix<TA, K, M>& a_,
                                          const simdgroup_matrix<TB, N, K>& b_, const simdgroup_matrix<TC, N, M>& c_) {
  simdgroup_matrix<TA, K, M> a = a_;
  simdgroup_matrix<TB, N, K> b = b_;
  simdgroup_matrix<TC, N, M> c = c_;
  a.resync();
  b.resync();
  c.resync();
  simdgroup_matrix<T, N, M> r;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float acc = float(c.m[i][j]);
      for (int k = 0; k < K; k++) acc += float(a.m[i][k]) * float(b.m[k][j]);
      r.m[i][j] = T(acc);
    }
  d = r;
}
template <class T, class TA, class TB, int M, int N, int K>
inline void simdgroup_multiply(simdgroup_matrix<T, N, M>& d, const simdgroup_matrix<TA, K, M>& a,
                               const simdgroup_matrix<TB, N, K>& b) {
  simdgroup_multiply_accumulate(d, a, b, simdgroup_matrix<T, N, M>(T(0)));
}

// atomics (a plain value: only one OS thread touches memory)
enum memory_order { memory_order_relaxed, memory_order_acquire, memory_order_release, memory_order_acq_rel, memory_order_seq_cst };
template <class T> struct atomic { T v; };
typedef atomic<int> atomic_int;
typedef atomic<unsigned> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<unsigned long> atomic_ulong;
template <class T, class U> inline T atomic_fetch_add_explicit(atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  if constexpr (std::is_same<T, float>::value) return ksim::float_atomic_add(&a->v, (float)v);
  ksim::atomic_tick();
  T o = a->v;
  a->v = T(o + T(v));
  return o;
}
template <class T, class U> inline T atomic_fetch_sub_explicit(atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  if constexpr (std::is_same<T, float>::value) return ksim::float_atomic_add(&a->v, -(float)v);
  ksim::atomic_tick();
  T o = a->v;
  a->v = T(o - T(v));
  return o;
}
template <class T, class U> inline T atomic_fetch_max_explicit(atomic<T>* a, U v, memory_order = memory_order_relaxed) { ksim::atomic_tick(); T o = a->v; if (T(v) > o) a->v = T(v); return o; }
template <class T, class U> inline T atomic_fetch_min_explicit(atomic<T>* a, U v, memory_order = memory_order_relaxed) { ksim::atomic_tick(); T o = a->v; if (T(v) < o) a->v = T(v); return o; }
template <class T, class U> inline T atomic_fetch_and_explicit(atomic<T>* a, U v, memory_order = memory_order_relaxed) { ksim::atomic_tick(); T o = a->v; a->v = T(o & T(v)); return o; }
template <class T, class U> inline T atomic_fetch_or_explicit(atomic<T>* a, U v, memory_order = memory_order_relaxed) { ksim::atomic_tick(); T o = a->v; a->v = T(o | T(v)); return o; }
template <class T, class U> inline T atomic_fetch_xor_explicit(atomic<T>* a, U v, memory_order = memory_order_relaxed) { ksim::atomic_tick(); T o = a->v; a->v = T(o ^ T(v)); return o; }
template <class T, class U> inline T atomic_exchange_explicit(atomic<T>* a, U v, memory_order = memory_order_relaxed) { ksim::atomic_tick(); ksim::note_order_dependent(&a->v, sizeof(T)); T o = a->v; a->v = T(v); return o; }
template <class T> inline T atomic_load_explicit(const atomic<T>* a, memory_order = memory_order_relaxed) { ksim::atomic_tick(); return a->v; }
template <class T, class U> inline void atomic_store_explicit(atomic<T>* a, U v, memory_order = memory_order_relaxed) { ksim::atomic_tick(); a->v = T(v); }
template <class T, class U>
inline bool atomic_compare_exchange_weak_explicit(atomic<T>* a, T* expected, U desired, memory_order = memory_order_relaxed, memory_order = memory_order_relaxed) {
  ksim::atomic_tick();
  ksim::note_order_dependent(&a->v, sizeof(T));
  if (a->v == *expected) { a->v = T(desired); return true; }
  *expected = a->v;
  return false;
}
template <class T, class U>
inline bool atomic_compare_exchange_strong_explicit(atomic<T>* a, T* expected, U desired, memory_order m1 = memory_order_relaxed, memory_order m2 = memory_order_relaxed) {
  return atomic_compare_exchange_weak_explicit(a, expected, desired, m1, m2);
}
inline void atomic_thread_fence(mem_flags, memory_order, int = 0) {}
}  // namespace metal
using namespace metal;

// MLX's Metal utilities (mlx/backend/metal/kernels/utils.h) that custom kernels commonly use
using ksim::elem_to_loc;
// As in MLX's Metal utils.h, Limits<T>::max / min / finite_max / finite_min are values.
template <class T> struct Limits {
  static inline const T max = metal::numeric_limits<T>::max();
  static inline const T min = metal::numeric_limits<T>::min();
  static inline const T finite_max = metal::numeric_limits<T>::max();
  static inline const T finite_min = metal::numeric_limits<T>::min();
};
#define KSIM_FLOAT_LIMITS(T, FMAX)                              \
  template <> struct Limits<T> {                                \
    static inline const T max = T(__builtin_inff());            \
    static inline const T min = T(-__builtin_inff());           \
    static inline const T finite_max = T(FMAX);                 \
    static inline const T finite_min = T(-(FMAX));              \
  };
KSIM_FLOAT_LIMITS(float, FLT_MAX)
KSIM_FLOAT_LIMITS(_Float16, 65504.0f)
KSIM_FLOAT_LIMITS(ksim::mbf16, 3.38953139e38f)
template <> struct Limits<bool> {
  static inline const bool max = true;
  static inline const bool min = false;
};
template <class T, class U> inline T ceildiv(T a, U b) { return (a + T(b) - 1) / T(b); }
#define M_PI_F 3.14159265358979323846f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LN2_F 0.69314718055994530942f
#define M_SQRT2_F 1.41421356237309504880f
#define MAXFLOAT FLT_MAX
#define HUGE_VALF (__builtin_inff())
#define METAL_FUNC inline
#define kernel
#define device
#define constant
#define thread
#define ray_data
#define object_data
#endif  // KSIM_METAL

#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
