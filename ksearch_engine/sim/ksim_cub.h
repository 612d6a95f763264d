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
