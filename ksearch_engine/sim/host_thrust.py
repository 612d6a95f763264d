"""A host-side stand-in for the common part of Thrust, for launch capture (written for ksim; no Thrust code).

A captured program's "device" is the capture runtime's memory (ksim_host.h): a ``thrust::device_vector`` keeps its
elements in one ``cudaMalloc`` allocation, so a kernel launched on ``thrust::raw_pointer_cast(v.data())`` (or
``&v[0]``) is recorded with that allocation and its size, and host code reads and writes the elements directly.
``thrust::host_vector`` is a ``std::vector``. The algorithms (fill, copy, sequence, transform, reduce, sort,
scans, extrema and a few more) run on the host in order, with or without an execution policy first
(``thrust::device``, ``thrust::host``, ``thrust::seq``, ``thrust::cuda::par.on(stream)``); ``__device__``
functors and lambdas run on the host as the rest of the program does.

Every header in ``PROVIDED`` maps to the one stand-in (a program that includes any of them sees all of it). Other
Thrust headers (fancy iterators, thrust::complex, random, tuple, set operations...) are left to
host_headers.UNSUPPORTED, whose ``#error`` names the header; the by-key algorithms and a few others that the
provided headers declare stop the program at their call with one line naming the call (``STOPPED``), and a name
Thrust has but the stand-in does not declare is named by capture.py's compile-error reading.
"""

from __future__ import annotations

PROVIDED = [
    "thrust/device_vector.h", "thrust/host_vector.h", "thrust/fill.h", "thrust/copy.h", "thrust/sequence.h",
    "thrust/transform.h", "thrust/reduce.h", "thrust/sort.h", "thrust/scan.h", "thrust/functional.h",
    "thrust/execution_policy.h", "thrust/device_ptr.h", "thrust/extrema.h", "thrust/count.h",
    "thrust/for_each.h", "thrust/generate.h", "thrust/transform_reduce.h", "thrust/inner_product.h",
    "thrust/find.h", "thrust/replace.h", "thrust/reverse.h", "thrust/unique.h", "thrust/remove.h",
    "thrust/gather.h", "thrust/scatter.h", "thrust/tabulate.h", "thrust/equal.h", "thrust/logical.h",
    "thrust/uninitialized_fill.h", "thrust/uninitialized_copy.h", "thrust/device_malloc.h",
    "thrust/device_free.h", "thrust/memory.h", "thrust/pair.h", "thrust/version.h", "thrust/swap.h",
    "thrust/adjacent_difference.h", "thrust/system/cuda/execution_policy.h", "thrust/system/cpp/execution_policy.h",
    "thrust/system/omp/execution_policy.h",
]

# declared by provided headers, not emulated: a call stops the capture naming it
STOPPED = ["reduce_by_key", "unique_by_key", "unique_by_key_copy", "inclusive_scan_by_key",
           "exclusive_scan_by_key", "transform_if", "sort_by_key_copy", "copy_by_key"]

UNPROVIDED = "Thrust beyond the capture's stand-in of vectors, device_ptr and basic algorithms"

_HEADER = r"""#pragma once
// ksim capture: a host-side stand-in for Thrust's vectors and basic algorithms (sim/host_thrust.py). "Device"
// memory is the capture runtime's cudaMalloc memory; every algorithm runs on the host, in order.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <iterator>
#include <new>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#define THRUST_VERSION 200200
#define THRUST_MAJOR_VERSION 2
#define THRUST_MINOR_VERSION 2
#define THRUST_SUBMINOR_VERSION 0
#define THRUST_PATCH_NUMBER 0
#define THRUST_DEVICE_SYSTEM_CUDA 1
#define THRUST_DEVICE_SYSTEM_OMP 2
#define THRUST_DEVICE_SYSTEM_TBB 3
#define THRUST_DEVICE_SYSTEM_CPP 4
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CUDA
#define THRUST_HOST_SYSTEM_CPP 1
#define THRUST_HOST_SYSTEM THRUST_HOST_SYSTEM_CPP

namespace ksim_thrust {
// Where a stopped call was made: converting the call's first argument records the caller's file and line.
struct Where {
  const char* file;
  int line;
  template <class T> Where(const T&, const char* f = __builtin_FILE(), int l = __builtin_LINE()) : file(f), line(l) {}
};
// The result of a stopped call: never made (the program stops first), but it lets the caller's code compile.
struct Never {
  static const Never first, second;
  template <class T> operator T() const { std::abort(); }
  template <class T> Never operator-(const T&) const { return *this; }
  template <class T> Never operator+(const T&) const { return *this; }
};
inline const Never Never::first{}, Never::second{};
[[noreturn]] inline void stop(const char* call, const Where& w) {
  ksim_host::stop("gpu_only", std::string("thrust::") + call + " is not in the capture's Thrust stand-in (vectors, "
                  "device_ptr and the basic algorithms)", w.file, w.line);
}
template <class T> T* allocate(size_t n) {
  if (!n) return nullptr;
  void* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess || !p)
    ksim_host::stop("limit", "a thrust::device_vector of " + std::to_string(n * sizeof(T)) +
                    " bytes is over the capture's device memory");
  return static_cast<T*>(p);
}
inline void release(void* p) { if (p) cudaFree(p); }
template <class C, class = void> struct is_range : std::false_type {};
template <class C> struct is_range<C, decltype((void)std::declval<const C&>().begin(),
                                               (void)std::declval<const C&>().end())> : std::true_type {};
}  // namespace ksim_thrust

namespace thrust {

// ---- execution policies: every one runs on the host, in order ----
struct ksim_policy {};
template <class P> struct is_execution_policy : std::is_base_of<ksim_policy, typename std::decay<P>::type> {};
struct host_t : ksim_policy {};
struct device_t : ksim_policy {};
struct sequential_t : ksim_policy {};
inline constexpr host_t host{};
inline constexpr device_t device{};
inline constexpr sequential_t seq{};
namespace cuda {
struct par_t : ksim_policy {
  par_t on(cudaStream_t) const { return *this; }
  template <class A> par_t operator()(const A&) const { return *this; }
};
inline constexpr par_t par{};
inline constexpr par_t par_nosync{};
}  // namespace cuda
namespace system {
namespace cuda { using ::thrust::cuda::par; using ::thrust::cuda::par_nosync; }
namespace cpp { inline constexpr ::thrust::host_t par{}; }
namespace omp { inline constexpr ::thrust::host_t par{}; }
}  // namespace system
namespace cuda_cub = ::thrust::cuda;

// ---- pair ----
template <class A, class B> using pair = std::pair<A, B>;
using std::make_pair;
using std::swap;

// ---- function objects ----
template <class A, class R> struct unary_function { typedef A argument_type; typedef R result_type; };
template <class A, class B, class R> struct binary_function {
  typedef A first_argument_type; typedef B second_argument_type; typedef R result_type;
};
#define KSIM_THRUST_BINARY(name, R, expr)                                                                    \
  template <class T = void> struct name {                                                                   \
    typedef T first_argument_type; typedef T second_argument_type; typedef R result_type;                   \
    constexpr R operator()(const T& a, const T& b) const { return expr; }                                   \
  };                                                                                                        \
  template <> struct name<void> {                                                                           \
    template <class T, class U> constexpr auto operator()(const T& a, const U& b) const -> decltype(expr) { \
      return expr;                                                                                          \
    }                                                                                                       \
  };
KSIM_THRUST_BINARY(plus, T, a + b)
KSIM_THRUST_BINARY(minus, T, a - b)
KSIM_THRUST_BINARY(multiplies, T, a * b)
KSIM_THRUST_BINARY(divides, T, a / b)
KSIM_THRUST_BINARY(modulus, T, a % b)
KSIM_THRUST_BINARY(maximum, T, a < b ? b : a)
KSIM_THRUST_BINARY(minimum, T, b < a ? b : a)
KSIM_THRUST_BINARY(bit_and, T, a & b)
KSIM_THRUST_BINARY(bit_or, T, a | b)
KSIM_THRUST_BINARY(bit_xor, T, a ^ b)
KSIM_THRUST_BINARY(equal_to, bool, a == b)
KSIM_THRUST_BINARY(not_equal_to, bool, a != b)
KSIM_THRUST_BINARY(less, bool, a < b)
KSIM_THRUST_BINARY(greater, bool, b < a)
KSIM_THRUST_BINARY(less_equal, bool, !(b < a))
KSIM_THRUST_BINARY(greater_equal, bool, !(a < b))
KSIM_THRUST_BINARY(logical_and, bool, a && b)
KSIM_THRUST_BINARY(logical_or, bool, a || b)
#undef KSIM_THRUST_BINARY
#define KSIM_THRUST_UNARY(name, R, expr)                                                                    \
  template <class T = void> struct name {                                                                   \
    typedef T argument_type; typedef R result_type;                                                         \
    constexpr R operator()(const T& a) const { return expr; }                                               \
  };                                                                                                        \
  template <> struct name<void> {                                                                           \
    template <class T> constexpr auto operator()(const T& a) const -> decltype(expr) { return expr; }      \
  };
KSIM_THRUST_UNARY(negate, T, -a)
KSIM_THRUST_UNARY(logical_not, bool, !a)
KSIM_THRUST_UNARY(bit_not, T, ~a)
KSIM_THRUST_UNARY(identity, T, a)
KSIM_THRUST_UNARY(square, T, a * a)
#undef KSIM_THRUST_UNARY
template <class T> constexpr const T& min(const T& a, const T& b) { return b < a ? b : a; }
template <class T> constexpr const T& max(const T& a, const T& b) { return a < b ? b : a; }

// ---- device_ptr: a raw pointer into the capture's device memory, usable as an iterator ----
template <class T> class device_ptr {
 public:
  typedef typename std::remove_cv<T>::type value_type;
  typedef std::ptrdiff_t difference_type;
  typedef T* pointer;
  typedef typename std::add_lvalue_reference<T>::type reference;
  typedef std::random_access_iterator_tag iterator_category;
  device_ptr() : p_(nullptr) {}
  device_ptr(std::nullptr_t) : p_(nullptr) {}
  template <class U, class = typename std::enable_if<std::is_convertible<U*, T*>::value>::type>
  explicit device_ptr(U* p) : p_(p) {}
  template <class U, class = typename std::enable_if<std::is_convertible<U*, T*>::value>::type>
  device_ptr(const device_ptr<U>& o) : p_(o.get()) {}
  T* get() const { return p_; }
  reference operator*() const { return *p_; }
  T* operator->() const { return p_; }
  reference operator[](difference_type i) const { return p_[i]; }
  device_ptr& operator++() { ++p_; return *this; }
  device_ptr operator++(int) { device_ptr o = *this; ++p_; return o; }
  device_ptr& operator--() { --p_; return *this; }
  device_ptr operator--(int) { device_ptr o = *this; --p_; return o; }
  device_ptr& operator+=(difference_type n) { p_ += n; return *this; }
  device_ptr& operator-=(difference_type n) { p_ -= n; return *this; }
  device_ptr operator+(difference_type n) const { return device_ptr(p_ + n); }
  device_ptr operator-(difference_type n) const { return device_ptr(p_ - n); }
  friend device_ptr operator+(difference_type n, const device_ptr& d) { return d + n; }
  template <class U> difference_type operator-(const device_ptr<U>& o) const { return p_ - o.get(); }
  template <class U> bool operator==(const device_ptr<U>& o) const { return p_ == o.get(); }
  template <class U> bool operator!=(const device_ptr<U>& o) const { return p_ != o.get(); }
  template <class U> bool operator<(const device_ptr<U>& o) const { return p_ < o.get(); }
  template <class U> bool operator>(const device_ptr<U>& o) const { return p_ > o.get(); }
  template <class U> bool operator<=(const device_ptr<U>& o) const { return p_ <= o.get(); }
  template <class U> bool operator>=(const device_ptr<U>& o) const { return p_ >= o.get(); }
  bool operator==(std::nullptr_t) const { return !p_; }
  bool operator!=(std::nullptr_t) const { return p_ != nullptr; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  T* p_;
};
template <class T> device_ptr<T> device_pointer_cast(T* p) { return device_ptr<T>(p); }
template <class T> device_ptr<T> device_pointer_cast(const device_ptr<T>& p) { return p; }
template <class T> T* raw_pointer_cast(T* p) { return p; }
template <class T> T* raw_pointer_cast(const device_ptr<T>& p) { return p.get(); }
template <class T> device_ptr<T> device_malloc(size_t n) { return device_ptr<T>(ksim_thrust::allocate<T>(n)); }
inline device_ptr<void> device_malloc(size_t bytes) { return device_ptr<void>(ksim_thrust::allocate<char>(bytes)); }
template <class T> void device_free(device_ptr<T> p) { ksim_thrust::release((void*)p.get()); }
template <class T> class device_allocator {};

// ---- device_vector: elements in one allocation of the capture runtime ----
template <class T, class Alloc = device_allocator<T>> class device_vector {
 public:
  typedef T value_type;
  typedef size_t size_type;
  typedef std::ptrdiff_t difference_type;
  typedef T& reference;
  typedef const T& const_reference;
  typedef device_ptr<T> pointer;
  typedef device_ptr<const T> const_pointer;
  typedef device_ptr<T> iterator;
  typedef device_ptr<const T> const_iterator;
  typedef std::reverse_iterator<iterator> reverse_iterator;
  typedef std::reverse_iterator<const_iterator> const_reverse_iterator;
  typedef Alloc allocator_type;

  device_vector() {}
  explicit device_vector(size_type n) { resize(n); }
  device_vector(size_type n, const T& v) { resize(n, v); }
  template <class It, class = typename std::enable_if<!std::is_integral<It>::value>::type>
  device_vector(It first, It last) { assign(first, last); }
  device_vector(const device_vector& o) { assign(o.begin(), o.end()); }
  device_vector(device_vector&& o) noexcept { swap(o); }
  device_vector(std::initializer_list<T> l) { assign(l.begin(), l.end()); }
  // from a host_vector, std::vector or another device_vector (of any element type)
  template <class C, class = typename std::enable_if<ksim_thrust::is_range<C>::value &&
                                                     !std::is_same<C, device_vector>::value>::type>
  device_vector(const C& c) { assign(c.begin(), c.end()); }
  ~device_vector() { clear(); ksim_thrust::release(p_); }

  device_vector& operator=(const device_vector& o) { if (this != &o) assign(o.begin(), o.end()); return *this; }
  device_vector& operator=(device_vector&& o) noexcept { swap(o); return *this; }
  device_vector& operator=(std::initializer_list<T> l) { assign(l.begin(), l.end()); return *this; }
  template <class C, class = typename std::enable_if<ksim_thrust::is_range<C>::value &&
                                                     !std::is_same<C, device_vector>::value>::type>
  device_vector& operator=(const C& c) { assign(c.begin(), c.end()); return *this; }

  template <class It, class = typename std::enable_if<!std::is_integral<It>::value>::type>
  void assign(It first, It last) {
    std::vector<T> tmp(first, last);   // the source may be this vector's own elements
    clear();
    reserve(tmp.size());
    std::uninitialized_copy(tmp.begin(), tmp.end(), p_);
    n_ = tmp.size();
  }
  void assign(size_type n, const T& v) { clear(); resize(n, v); }

  size_type size() const { return n_; }
  bool empty() const { return n_ == 0; }
  size_type capacity() const { return cap_; }
  size_type max_size() const { return size_type(-1) / sizeof(T); }
  void reserve(size_type c) {
    if (c <= cap_) return;
    T* q = ksim_thrust::allocate<T>(c);
    for (size_type i = 0; i < n_; i++) { new (q + i) T(std::move(p_[i])); p_[i].~T(); }
    ksim_thrust::release(p_);
    p_ = q;
    cap_ = c;
  }
  void resize(size_type n) {
    if (n > cap_) reserve(n);
    for (size_type i = n_; i < n; i++) new (p_ + i) T();
    for (size_type i = n; i < n_; i++) p_[i].~T();
    n_ = n;
  }
  void resize(size_type n, const T& v) {
    T keep = v;
    if (n > cap_) reserve(n);
    for (size_type i = n_; i < n; i++) new (p_ + i) T(keep);
    for (size_type i = n; i < n_; i++) p_[i].~T();
    n_ = n;
  }
  void clear() { resize(0); }
  void shrink_to_fit() {
    if (cap_ == n_) return;
    device_vector o(begin(), end());
    swap(o);
  }
  void push_back(const T& v) {
    T keep = v;
    if (n_ == cap_) reserve(cap_ ? 2 * cap_ : 1);
    new (p_ + n_) T(keep);
    n_++;
  }
  void pop_back() { if (n_) p_[--n_].~T(); }
  void swap(device_vector& o) noexcept { std::swap(p_, o.p_); std::swap(n_, o.n_); std::swap(cap_, o.cap_); }

  reference operator[](size_type i) { return p_[i]; }
  const_reference operator[](size_type i) const { return p_[i]; }
  reference front() { return p_[0]; }
  const_reference front() const { return p_[0]; }
  reference back() { return p_[n_ - 1]; }
  const_reference back() const { return p_[n_ - 1]; }
  iterator begin() { return iterator(p_); }
  iterator end() { return iterator(p_ + n_); }
  const_iterator begin() const { return const_iterator(p_); }
  const_iterator end() const { return const_iterator(p_ + n_); }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  pointer data() { return pointer(p_); }
  const_pointer data() const { return const_pointer(p_); }

  // insert and erase rebuild the elements (a capture's vectors change size rarely)
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    size_type at = first - begin();
    std::vector<T> t(begin(), end());
    t.erase(t.begin() + at, t.begin() + (last - begin()));
    assign(t.begin(), t.end());
    return begin() + at;
  }
  iterator insert(const_iterator pos, const T& v) { return insert(pos, size_type(1), v); }
  iterator insert(const_iterator pos, size_type n, const T& v) {
    size_type at = pos - begin();
    std::vector<T> t(begin(), end());
    t.insert(t.begin() + at, n, v);
    assign(t.begin(), t.end());
    return begin() + at;
  }
  template <class It, class = typename std::enable_if<!std::is_integral<It>::value>::type>
  void insert(const_iterator pos, It first, It last) {
    size_type at = pos - begin();
    std::vector<T> t(begin(), end());
    t.insert(t.begin() + at, first, last);
    assign(t.begin(), t.end());
  }

 private:
  T* p_ = nullptr;
  size_type n_ = 0, cap_ = 0;
};

// ---- host_vector: a std::vector that also takes a device_vector ----
template <class T, class Alloc = std::allocator<T>> class host_vector : public std::vector<T, Alloc> {
  typedef std::vector<T, Alloc> base;

 public:
  using base::base;
  host_vector() {}
  host_vector(const host_vector&) = default;
  host_vector(host_vector&&) = default;
  template <class C, class = typename std::enable_if<ksim_thrust::is_range<C>::value &&
                                                     !std::is_same<C, host_vector>::value>::type>
  host_vector(const C& c) : base(c.begin(), c.end()) {}
  host_vector& operator=(const host_vector&) = default;
  host_vector& operator=(host_vector&&) = default;
  template <class C, class = typename std::enable_if<ksim_thrust::is_range<C>::value &&
                                                     !std::is_same<C, host_vector>::value>::type>
  host_vector& operator=(const C& c) { this->assign(c.begin(), c.end()); return *this; }
};

template <class T, class A> bool operator==(const device_vector<T, A>& a, const device_vector<T, A>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}
template <class T, class A> bool operator!=(const device_vector<T, A>& a, const device_vector<T, A>& b) { return !(a == b); }

template <class It> using ksim_value_t = typename std::iterator_traits<It>::value_type;

// ---- algorithms (on the host, in order) ----
template <class It, class T> void fill(It first, It last, const T& v) { for (; first != last; ++first) *first = v; }
template <class It, class N, class T> It fill_n(It first, N n, const T& v) {
  for (N i = 0; i < n; ++i, ++first) *first = v;
  return first;
}
template <class It, class T> void uninitialized_fill(It first, It last, const T& v) { ::thrust::fill(first, last, v); }
template <class It, class O> O copy(It first, It last, O out) {
  for (; first != last; ++first, ++out) *out = *first;
  return out;
}
template <class It, class N, class O> O copy_n(It first, N n, O out) {
  for (N i = 0; i < n; ++i, ++first, ++out) *out = *first;
  return out;
}
template <class It, class O> O uninitialized_copy(It first, It last, O out) { return ::thrust::copy(first, last, out); }
template <class It, class O, class P> O copy_if(It first, It last, O out, P pred) {
  for (; first != last; ++first)
    if (pred(*first)) { *out = *first; ++out; }
  return out;
}
template <class It, class S, class O, class P> O copy_if(It first, It last, S stencil, O out, P pred) {
  for (; first != last; ++first, ++stencil)
    if (pred(*stencil)) { *out = *first; ++out; }
  return out;
}
template <class It> void sequence(It first, It last) {
  typedef ksim_value_t<It> T;
  std::ptrdiff_t i = 0;
  for (; first != last; ++first, ++i) *first = static_cast<T>(i);
}
template <class It, class T> void sequence(It first, It last, T init) {
  std::ptrdiff_t i = 0;
  for (; first != last; ++first, ++i) *first = init + static_cast<T>(i);
}
template <class It, class T> void sequence(It first, It last, T init, T step) {
  std::ptrdiff_t i = 0;
  for (; first != last; ++first, ++i) *first = init + static_cast<T>(i) * step;
}
template <class It, class F> void tabulate(It first, It last, F f) {
  std::ptrdiff_t i = 0;
  for (; first != last; ++first, ++i) *first = f(i);
}
template <class It, class O, class F> O transform(It first, It last, O out, F f) {
  for (; first != last; ++first, ++out) *out = f(*first);
  return out;
}
template <class It1, class It2, class O, class F> O transform(It1 first1, It1 last1, It2 first2, O out, F f) {
  for (; first1 != last1; ++first1, ++first2, ++out) *out = f(*first1, *first2);
  return out;
}
template <class It, class F> It for_each(It first, It last, F f) {
  for (; first != last; ++first) f(*first);
  return first;
}
template <class It, class N, class F> It for_each_n(It first, N n, F f) {
  for (N i = 0; i < n; ++i, ++first) f(*first);
  return first;
}
template <class It, class G> void generate(It first, It last, G g) { for (; first != last; ++first) *first = g(); }
template <class It, class N, class G> It generate_n(It first, N n, G g) {
  for (N i = 0; i < n; ++i, ++first) *first = g();
  return first;
}
template <class It, class T, class Op> T reduce(It first, It last, T init, Op op) {
  for (; first != last; ++first) init = op(init, *first);
  return init;
}
template <class It, class T> T reduce(It first, It last, T init) { return ::thrust::reduce(first, last, init, ::thrust::plus<T>()); }
template <class It> ksim_value_t<It> reduce(It first, It last) {
  return ::thrust::reduce(first, last, ksim_value_t<It>(), ::thrust::plus<ksim_value_t<It>>());
}
template <class It, class F, class T, class Op> T transform_reduce(It first, It last, F f, T init, Op op) {
  for (; first != last; ++first) init = op(init, f(*first));
  return init;
}
template <class It1, class It2, class T, class Op1, class Op2>
T inner_product(It1 first1, It1 last1, It2 first2, T init, Op1 sum, Op2 prod) {
  for (; first1 != last1; ++first1, ++first2) init = sum(init, prod(*first1, *first2));
  return init;
}
template <class It1, class It2, class T> T inner_product(It1 first1, It1 last1, It2 first2, T init) {
  return ::thrust::inner_product(first1, last1, first2, init, ::thrust::plus<T>(), ::thrust::multiplies<T>());
}
template <class It, class P> std::ptrdiff_t count_if(It first, It last, P pred) {
  std::ptrdiff_t n = 0;
  for (; first != last; ++first)
    if (pred(*first)) ++n;
  return n;
}
template <class It, class T> std::ptrdiff_t count(It first, It last, const T& v) {
  std::ptrdiff_t n = 0;
  for (; first != last; ++first)
    if (*first == v) ++n;
  return n;
}
template <class It, class P> bool all_of(It first, It last, P pred) { return std::all_of(first, last, pred); }
template <class It, class P> bool any_of(It first, It last, P pred) { return std::any_of(first, last, pred); }
template <class It, class P> bool none_of(It first, It last, P pred) { return std::none_of(first, last, pred); }
template <class It1, class It2> bool equal(It1 first1, It1 last1, It2 first2) { return std::equal(first1, last1, first2); }
template <class It1, class It2, class P> bool equal(It1 first1, It1 last1, It2 first2, P p) { return std::equal(first1, last1, first2, p); }
template <class It, class T> It find(It first, It last, const T& v) { return std::find(first, last, v); }
template <class It, class P> It find_if(It first, It last, P p) { return std::find_if(first, last, p); }
template <class It, class P> It find_if_not(It first, It last, P p) { return std::find_if_not(first, last, p); }
template <class It, class T> void replace(It first, It last, const T& a, const T& b) { std::replace(first, last, a, b); }
template <class It, class P, class T> void replace_if(It first, It last, P p, const T& b) { std::replace_if(first, last, p, b); }
template <class It, class O, class T> O replace_copy(It first, It last, O out, const T& a, const T& b) { return std::replace_copy(first, last, out, a, b); }
template <class It, class O, class P, class T> O replace_copy_if(It first, It last, O out, P p, const T& b) { return std::replace_copy_if(first, last, out, p, b); }
template <class It> void reverse(It first, It last) { std::reverse(first, last); }
template <class It, class O> O reverse_copy(It first, It last, O out) { return std::reverse_copy(first, last, out); }
template <class It> It unique(It first, It last) { return std::unique(first, last); }
template <class It, class P> It unique(It first, It last, P p) { return std::unique(first, last, p); }
template <class It, class T> It remove(It first, It last, const T& v) { return std::remove(first, last, v); }
template <class It, class P> It remove_if(It first, It last, P p) { return std::remove_if(first, last, p); }
template <class It, class O, class T> O remove_copy(It first, It last, O out, const T& v) { return std::remove_copy(first, last, out, v); }
template <class It, class O, class P> O remove_copy_if(It first, It last, O out, P p) { return std::remove_copy_if(first, last, out, p); }
template <class M, class It, class O> O gather(M map_first, M map_last, It input, O out) {
  for (; map_first != map_last; ++map_first, ++out) *out = input[*map_first];
  return out;
}
template <class It, class M, class O> void scatter(It first, It last, M map, O out) {
  for (; first != last; ++first, ++map) out[*map] = *first;
}
template <class It, class O> O adjacent_difference(It first, It last, O out) { return std::adjacent_difference(first, last, out); }
template <class It, class O, class Op> O adjacent_difference(It first, It last, O out, Op op) { return std::adjacent_difference(first, last, out, op); }
template <class It> It min_element(It first, It last) { return std::min_element(first, last); }
template <class It, class C> It min_element(It first, It last, C c) { return std::min_element(first, last, c); }
template <class It> It max_element(It first, It last) { return std::max_element(first, last); }
template <class It, class C> It max_element(It first, It last, C c) { return std::max_element(first, last, c); }
template <class It> pair<It, It> minmax_element(It first, It last) { return std::minmax_element(first, last); }
template <class It, class C> pair<It, It> minmax_element(It first, It last, C c) { return std::minmax_element(first, last, c); }
template <class It> void sort(It first, It last) { std::sort(first, last); }
template <class It, class C> void sort(It first, It last, C c) { std::sort(first, last, c); }
template <class It> void stable_sort(It first, It last) { std::stable_sort(first, last); }
template <class It, class C> void stable_sort(It first, It last, C c) { std::stable_sort(first, last, c); }
template <class K, class V, class C> void stable_sort_by_key(K kfirst, K klast, V vfirst, C c) {
  typedef ksim_value_t<K> KT;
  typedef ksim_value_t<V> VT;
  std::vector<std::pair<KT, VT>> t;
  K k = kfirst;
  V v = vfirst;
  for (; k != klast; ++k, ++v) t.emplace_back(*k, *v);
  std::stable_sort(t.begin(), t.end(), [&](const std::pair<KT, VT>& a, const std::pair<KT, VT>& b) {
    return c(a.first, b.first);
  });
  for (auto& e : t) { *kfirst = e.first; *vfirst = e.second; ++kfirst; ++vfirst; }
}
template <class K, class V> void stable_sort_by_key(K kfirst, K klast, V vfirst) {
  ::thrust::stable_sort_by_key(kfirst, klast, vfirst, ::thrust::less<ksim_value_t<K>>());
}
template <class K, class V, class C> void sort_by_key(K kfirst, K klast, V vfirst, C c) { ::thrust::stable_sort_by_key(kfirst, klast, vfirst, c); }
template <class K, class V> void sort_by_key(K kfirst, K klast, V vfirst) { ::thrust::stable_sort_by_key(kfirst, klast, vfirst); }
template <class It> bool is_sorted(It first, It last) { return std::is_sorted(first, last); }
template <class It, class C> bool is_sorted(It first, It last, C c) { return std::is_sorted(first, last, c); }
template <class It, class O, class Op> O inclusive_scan(It first, It last, O out, Op op) {
  if (first == last) return out;
  ksim_value_t<It> acc = *first;
  *out = acc;
  for (++first, ++out; first != last; ++first, ++out) { acc = op(acc, *first); *out = acc; }
  return out;
}
template <class It, class O> O inclusive_scan(It first, It last, O out) {
  return ::thrust::inclusive_scan(first, last, out, ::thrust::plus<ksim_value_t<It>>());
}
template <class It, class O, class T, class Op> O exclusive_scan(It first, It last, O out, T init, Op op) {
  T acc = init;
  for (; first != last; ++first, ++out) {
    T v = *first;   // read before the write: the scan may be in place
    *out = acc;
    acc = op(acc, v);
  }
  return out;
}
template <class It, class O, class T> O exclusive_scan(It first, It last, O out, T init) {
  return ::thrust::exclusive_scan(first, last, out, init, ::thrust::plus<T>());
}
template <class It, class O> O exclusive_scan(It first, It last, O out) {
  return ::thrust::exclusive_scan(first, last, out, ksim_value_t<It>(), ::thrust::plus<ksim_value_t<It>>());
}

// each algorithm also takes an execution policy first (it runs the same)
#define KSIM_THRUST_ON_POLICY(name)                                                                          \
  template <class P, class... A, typename std::enable_if<is_execution_policy<P>::value, int>::type = 0>     \
  auto name(const P&, A&&... a) -> decltype(::thrust::name(std::forward<A>(a)...)) {                        \
    return ::thrust::name(std::forward<A>(a)...);                                                           \
  }
KSIM_THRUST_ON_POLICY(fill) KSIM_THRUST_ON_POLICY(fill_n) KSIM_THRUST_ON_POLICY(uninitialized_fill)
KSIM_THRUST_ON_POLICY(copy) KSIM_THRUST_ON_POLICY(copy_n) KSIM_THRUST_ON_POLICY(uninitialized_copy)
KSIM_THRUST_ON_POLICY(copy_if) KSIM_THRUST_ON_POLICY(sequence) KSIM_THRUST_ON_POLICY(tabulate)
KSIM_THRUST_ON_POLICY(transform) KSIM_THRUST_ON_POLICY(for_each) KSIM_THRUST_ON_POLICY(for_each_n)
KSIM_THRUST_ON_POLICY(generate) KSIM_THRUST_ON_POLICY(generate_n) KSIM_THRUST_ON_POLICY(reduce)
KSIM_THRUST_ON_POLICY(transform_reduce) KSIM_THRUST_ON_POLICY(inner_product) KSIM_THRUST_ON_POLICY(count)
KSIM_THRUST_ON_POLICY(count_if) KSIM_THRUST_ON_POLICY(all_of) KSIM_THRUST_ON_POLICY(any_of)
KSIM_THRUST_ON_POLICY(none_of) KSIM_THRUST_ON_POLICY(equal) KSIM_THRUST_ON_POLICY(find)
KSIM_THRUST_ON_POLICY(find_if) KSIM_THRUST_ON_POLICY(find_if_not) KSIM_THRUST_ON_POLICY(replace)
KSIM_THRUST_ON_POLICY(replace_if) KSIM_THRUST_ON_POLICY(replace_copy) KSIM_THRUST_ON_POLICY(replace_copy_if)
KSIM_THRUST_ON_POLICY(reverse) KSIM_THRUST_ON_POLICY(reverse_copy) KSIM_THRUST_ON_POLICY(unique)
KSIM_THRUST_ON_POLICY(remove) KSIM_THRUST_ON_POLICY(remove_if) KSIM_THRUST_ON_POLICY(remove_copy)
KSIM_THRUST_ON_POLICY(remove_copy_if) KSIM_THRUST_ON_POLICY(gather) KSIM_THRUST_ON_POLICY(scatter)
KSIM_THRUST_ON_POLICY(adjacent_difference) KSIM_THRUST_ON_POLICY(min_element)
KSIM_THRUST_ON_POLICY(max_element) KSIM_THRUST_ON_POLICY(minmax_element) KSIM_THRUST_ON_POLICY(sort)
KSIM_THRUST_ON_POLICY(stable_sort) KSIM_THRUST_ON_POLICY(sort_by_key) KSIM_THRUST_ON_POLICY(stable_sort_by_key)
KSIM_THRUST_ON_POLICY(is_sorted) KSIM_THRUST_ON_POLICY(inclusive_scan) KSIM_THRUST_ON_POLICY(exclusive_scan)
#undef KSIM_THRUST_ON_POLICY

// declared by the headers above but not emulated: the call stops the capture, naming it
@STOPPED@
}  // namespace thrust
"""

_STOP = ("template <class... A> ksim_thrust::Never {name}(ksim_thrust::Where w, A&&...) "
         "{{ ksim_thrust::stop(\"{name}\", w); }}")

HEADER = _HEADER.replace("@STOPPED@", "\n".join(_STOP.format(name=n) for n in STOPPED))

FILES: dict[str, str] = {"ksim_thrust.h": HEADER}
# relative to the header's own folder: found the same through -isystem and through an absolute #include
FILES.update({name: '#pragma once\n// ksim capture: the Thrust stand-in (sim/host_thrust.py)\n'
                    f'#include "{"../" * name.count("/")}ksim_thrust.h"\n' for name in PROVIDED})
