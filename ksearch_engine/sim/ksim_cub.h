// ksearch's stand-in for CUB's block- and warp-level collectives (cub/cub.cuh, cub/block/*.cuh, cub/warp/*.cuh),
// written from CUB's documented behaviour in plain CUDA C++: each collective goes through the caller's TempStorage in
// shared memory, with __syncthreads() (block) or __syncwarp() (warp) between its steps, so the simulator runs it and
// the translator carries the same text into both ports as it carries a user's own class templates.
// * BlockReduce<T, BLOCK_DIM_X, ALGORITHM, BLOCK_DIM_Y, BLOCK_DIM_Z>: Sum(x), Sum(x, valid_items), Reduce(x, op),
//   Reduce(x, op, valid_items); the result is defined in thread 0 only (the others get thread 0's input).
// * WarpReduce<T, LOGICAL_WARP_THREADS>: the same per logical warp (lane 0's result defined).
// * BlockScan<T, BLOCK_DIM_X, ALGORITHM, BLOCK_DIM_Y, BLOCK_DIM_Z>: InclusiveSum / ExclusiveSum / InclusiveScan /
//   ExclusiveScan(x, out[, initial], op) with or without the block aggregate; every thread gets its prefix.
// * the functors Sum, Max, Min.
// The reductions combine in thread order, one after another; the scan doubles its stride each step (Hillis-Steele).
#pragma once

namespace cub {

enum BlockReduceAlgorithm { BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY, BLOCK_REDUCE_RAKING, BLOCK_REDUCE_WARP_REDUCTIONS };
enum BlockScanAlgorithm { BLOCK_SCAN_RAKING, BLOCK_SCAN_RAKING_MEMOIZE, BLOCK_SCAN_WARP_SCANS };

struct Sum {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <typename T> __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};
struct Min {
  template <typename T> __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};

template <typename T, int BLOCK_DIM_X, int ALGORITHM = 2, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int PTX_ARCH = 0>
class BlockReduce {
 public:
  struct TempStorage { T ksc_slot[BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z]; };
  __device__ BlockReduce(TempStorage& storage) : ksc_temp(&storage) {}
  template <typename ReduceOp> __device__ T Reduce(T input, ReduceOp op, int valid_items) {
    int me = threadIdx.x + BLOCK_DIM_X * (threadIdx.y + BLOCK_DIM_Y * threadIdx.z);
    ksc_temp->ksc_slot[me] = input;
    __syncthreads();
    T acc = ksc_temp->ksc_slot[0];
    if (me == 0) {
      int n = valid_items < BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z ? valid_items
                                                                      : BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
      for (int i = 1; i < n; ++i) acc = op(acc, ksc_temp->ksc_slot[i]);
    }
    __syncthreads();
    return acc;
  }
  template <typename ReduceOp> __device__ T Reduce(T input, ReduceOp op) {
    return Reduce(input, op, BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z);
  }
  __device__ T Sum(T input) { return Reduce(input, cub::Sum(), BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z); }
  __device__ T Sum(T input, int valid_items) { return Reduce(input, cub::Sum(), valid_items); }

 private:
  TempStorage* ksc_temp;
};

template <typename T, int LOGICAL_WARP_THREADS = 32, int PTX_ARCH = 0>
class WarpReduce {
 public:
  struct TempStorage { T ksc_slot[LOGICAL_WARP_THREADS]; };
  __device__ WarpReduce(TempStorage& storage) : ksc_temp(&storage) {}
  template <typename ReduceOp> __device__ T Reduce(T input, ReduceOp op, int valid_items) {
    int lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % LOGICAL_WARP_THREADS;
    ksc_temp->ksc_slot[lane] = input;
    __syncwarp();
    T acc = input;
    if (lane == 0) {
      int n = valid_items < LOGICAL_WARP_THREADS ? valid_items : LOGICAL_WARP_THREADS;
      for (int i = 1; i < n; ++i) acc = op(acc, ksc_temp->ksc_slot[i]);
    }
    __syncwarp();
    return acc;
  }
  template <typename ReduceOp> __device__ T Reduce(T input, ReduceOp op) {
    return Reduce(input, op, LOGICAL_WARP_THREADS);
  }
  __device__ T Sum(T input) { return Reduce(input, cub::Sum(), LOGICAL_WARP_THREADS); }
  __device__ T Sum(T input, int valid_items) { return Reduce(input, cub::Sum(), valid_items); }

 private:
  TempStorage* ksc_temp;
};

template <typename T, int BLOCK_DIM_X, int ALGORITHM = 0, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int PTX_ARCH = 0>
class BlockScan {
 public:
  struct TempStorage { T ksc_slot[BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z]; };
  __device__ BlockScan(TempStorage& storage) : ksc_temp(&storage) {}
  // every thread's inclusive prefix in its slot (stride doubling); returns the block's aggregate
  template <typename ScanOp> __device__ T ksc_scan(T input, ScanOp op) {
    int me = threadIdx.x + BLOCK_DIM_X * (threadIdx.y + BLOCK_DIM_Y * threadIdx.z);
    ksc_temp->ksc_slot[me] = input;
    __syncthreads();
    for (int d = 1; d < BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z; d *= 2) {
      T mine = ksc_temp->ksc_slot[me];
      T before = me >= d ? ksc_temp->ksc_slot[me - d] : mine;
      __syncthreads();
      if (me >= d) ksc_temp->ksc_slot[me] = op(before, mine);
      __syncthreads();
    }
    return ksc_temp->ksc_slot[BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z - 1];
  }
  template <typename ScanOp> __device__ void InclusiveScan(T input, T& output, ScanOp op, T& block_aggregate) {
    int me = threadIdx.x + BLOCK_DIM_X * (threadIdx.y + BLOCK_DIM_Y * threadIdx.z);
    T total = ksc_scan(input, op);
    T mine = ksc_temp->ksc_slot[me];
    __syncthreads();
    output = mine;
    block_aggregate = total;
  }
  template <typename ScanOp> __device__ void InclusiveScan(T input, T& output, ScanOp op) {
    T total;
    InclusiveScan(input, output, op, total);
  }
  template <typename ScanOp> __device__ void ExclusiveScan(T input, T& output, T initial_value, ScanOp op,
                                                           T& block_aggregate) {
    int me = threadIdx.x + BLOCK_DIM_X * (threadIdx.y + BLOCK_DIM_Y * threadIdx.z);
    T total = ksc_scan(input, op);
    T mine = me > 0 ? op(initial_value, ksc_temp->ksc_slot[me > 0 ? me - 1 : 0]) : initial_value;
    __syncthreads();
    output = mine;
    block_aggregate = total;
  }
  template <typename ScanOp> __device__ void ExclusiveScan(T input, T& output, T initial_value, ScanOp op) {
    T total;
    ExclusiveScan(input, output, initial_value, op, total);
  }
  __device__ void InclusiveSum(T input, T& output, T& block_aggregate) {
    InclusiveScan(input, output, cub::Sum(), block_aggregate);
  }
  __device__ void InclusiveSum(T input, T& output) {
    T total;
    InclusiveScan(input, output, cub::Sum(), total);
  }
  __device__ void ExclusiveSum(T input, T& output, T& block_aggregate) {
    int me = threadIdx.x + BLOCK_DIM_X * (threadIdx.y + BLOCK_DIM_Y * threadIdx.z);
    T total = ksc_scan(input, cub::Sum());
    T mine = me > 0 ? ksc_temp->ksc_slot[me > 0 ? me - 1 : 0] : T(0);
    __syncthreads();
    output = mine;
    block_aggregate = total;
  }
  __device__ void ExclusiveSum(T input, T& output) {
    T total;
    ExclusiveSum(input, output, total);
  }

 private:
  TempStorage* ksc_temp;
};

}  // namespace cub

#ifdef KSIM_HOST
// Device-wide algorithms, for the capture's programs only (host calls: no port ever carries them): run on the host,
// as one address space holds both memories, with a note; no launch is recorded for them. The first call of each
// (d_temp_storage null) asks for the scratch bytes, as with CUB.
#include <algorithm>
#include <vector>
namespace cub {
inline void ksc_host_note(const char* what) {
  ksim_host::note("stubbed", std::string(what) + " was computed on the host (not recorded as a launch)");
}
#define KSC_SCRATCH(tmp, bytes) if (!(tmp)) { (bytes) = 256; return cudaSuccess; }
struct DeviceReduce {
  template <class I, class O, class Op, class T>
  static cudaError_t Reduce(void* tmp, size_t& bytes, I in, O out, int n, Op op, T init, cudaStream_t = 0,
                            bool = false) {
    KSC_SCRATCH(tmp, bytes)
    ksc_host_note("cub::DeviceReduce::Reduce");
    T acc = init;
    for (int i = 0; i < n; i++) acc = op(acc, in[i]);
    *out = acc;
    return cudaSuccess;
  }
  template <class I, class O, class Op>   // CUB 1.x: no initial value (the reduction of the items alone)
  static cudaError_t Reduce(void* tmp, size_t& bytes, I in, O out, int n, Op op) {
    KSC_SCRATCH(tmp, bytes)
    ksc_host_note("cub::DeviceReduce::Reduce");
    if (n <= 0) return cudaSuccess;
    auto acc = in[0];
    for (int i = 1; i < n; i++) acc = op(acc, in[i]);
    *out = acc;
    return cudaSuccess;
  }
  template <class I, class O> static cudaError_t Sum(void* tmp, size_t& bytes, I in, O out, int n, cudaStream_t = 0,
                                                     bool = false) {
    using T = std::decay_t<decltype(*out)>;
    return Reduce(tmp, bytes, in, out, n, cub::Sum(), T());
  }
  template <class I, class O> static cudaError_t Max(void* tmp, size_t& bytes, I in, O out, int n, cudaStream_t = 0,
                                                     bool = false) {
    using T = std::decay_t<decltype(*in)>;
    return Reduce(tmp, bytes, in, out, n, cub::Max(), std::numeric_limits<T>::lowest());
  }
  template <class I, class O> static cudaError_t Min(void* tmp, size_t& bytes, I in, O out, int n, cudaStream_t = 0,
                                                     bool = false) {
    using T = std::decay_t<decltype(*in)>;
    return Reduce(tmp, bytes, in, out, n, cub::Min(), std::numeric_limits<T>::max());
  }
};
struct DeviceScan {
  template <class I, class O, class Op>
  static cudaError_t InclusiveScan(void* tmp, size_t& bytes, I in, O out, Op op, int n, cudaStream_t = 0,
                                   bool = false) {
    KSC_SCRATCH(tmp, bytes)
    ksc_host_note("cub::DeviceScan");
    if (n <= 0) return cudaSuccess;
    auto acc = in[0];
    out[0] = acc;
    for (int i = 1; i < n; i++) out[i] = acc = op(acc, in[i]);
    return cudaSuccess;
  }
  template <class I, class O, class Op, class T>
  static cudaError_t ExclusiveScan(void* tmp, size_t& bytes, I in, O out, Op op, T init, int n, cudaStream_t = 0,
                                   bool = false) {
    KSC_SCRATCH(tmp, bytes)
    ksc_host_note("cub::DeviceScan");
    T acc = init;
    for (int i = 0; i < n; i++) { T v = in[i]; out[i] = acc; acc = op(acc, v); }
    return cudaSuccess;
  }
  template <class I, class O> static cudaError_t InclusiveSum(void* tmp, size_t& bytes, I in, O out, int n,
                                                              cudaStream_t = 0, bool = false) {
    return InclusiveScan(tmp, bytes, in, out, cub::Sum(), n);
  }
  template <class I, class O> static cudaError_t ExclusiveSum(void* tmp, size_t& bytes, I in, O out, int n,
                                                              cudaStream_t = 0, bool = false) {
    using T = std::decay_t<decltype(*out)>;
    return ExclusiveScan(tmp, bytes, in, out, cub::Sum(), T(), n);
  }
};
struct DeviceRadixSort {   // a stable sort by key (begin_bit/end_bit: the whole key)
  template <class K, class V>
  static cudaError_t ksc_sort(void* tmp, size_t& bytes, const K* kin, K* kout, const V* vin, V* vout, int n, bool down) {
    KSC_SCRATCH(tmp, bytes)
    ksc_host_note("cub::DeviceRadixSort");
    std::vector<int> idx(n > 0 ? n : 0);
    for (int i = 0; i < n; i++) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return down ? kin[b] < kin[a] : kin[a] < kin[b]; });
    std::vector<K> ks(n > 0 ? n : 0);
    std::vector<V> vs(vin ? n : 0);
    for (int i = 0; i < n; i++) { ks[i] = kin[idx[i]]; if (vin) vs[i] = vin[idx[i]]; }
    for (int i = 0; i < n; i++) { kout[i] = ks[i]; if (vin && vout) vout[i] = vs[i]; }
    return cudaSuccess;
  }
  template <class K> static cudaError_t SortKeys(void* tmp, size_t& bytes, const K* kin, K* kout, int n, int = 0,
                                                 int = sizeof(K) * 8, cudaStream_t = 0, bool = false) {
    return ksc_sort<K, char>(tmp, bytes, kin, kout, nullptr, nullptr, n, false);
  }
  template <class K> static cudaError_t SortKeysDescending(void* tmp, size_t& bytes, const K* kin, K* kout, int n,
                                                           int = 0, int = sizeof(K) * 8, cudaStream_t = 0, bool = false) {
    return ksc_sort<K, char>(tmp, bytes, kin, kout, nullptr, nullptr, n, true);
  }
  template <class K, class V> static cudaError_t SortPairs(void* tmp, size_t& bytes, const K* kin, K* kout,
                                                           const V* vin, V* vout, int n, int = 0, int = sizeof(K) * 8,
                                                           cudaStream_t = 0, bool = false) {
    return ksc_sort(tmp, bytes, kin, kout, vin, vout, n, false);
  }
  template <class K, class V> static cudaError_t SortPairsDescending(void* tmp, size_t& bytes, const K* kin, K* kout,
                                                                     const V* vin, V* vout, int n, int = 0,
                                                                     int = sizeof(K) * 8, cudaStream_t = 0,
                                                                     bool = false) {
    return ksc_sort(tmp, bytes, kin, kout, vin, vout, n, true);
  }
};
#undef KSC_SCRATCH
}  // namespace cub
#endif  // KSIM_HOST
