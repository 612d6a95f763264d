"""Issue 13: device helpers written inside a namespace (`namespace tile { __device__ void load(...) }`, called as
`tile::load<...>(...)` from the kernel, or unqualified from a kernel in the same namespace) reach both ports inside
that namespace, and a program that tunes its kernel with the runtime's carveout hint still runs on the CPU. The
program is written here; both ports are checked in the simulator against the original on its captured launch."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file
from ksearch_engine.source import find_kernels

PROGRAM = """
    #include <cstdio>
    #include <cstdlib>
    #include <cuda_runtime.h>

    namespace tile {
    namespace detail {
    __device__ inline float twice(float v) { return 2.0f * v; }
    }
    template <int W>
    __device__ void load_row(const float *src, float *dst, int row, int n) {
      for (int c = threadIdx.x; c < W && c < n; c += blockDim.x) dst[c] = detail::twice(src[row * n + c]);
    }
    }  // namespace tile

    namespace ops {
    __device__ float plus_one(float v) { return v + 1.0f; }
    __global__ void bump(float *x, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] = plus_one(x[i]);
    }
    }

    template <int W>
    __global__ void rows_twice(const float *src, float *dst, int n) {
      __shared__ float buf[W];
      tile::load_row<W>(src, buf, blockIdx.x, n);
      __syncthreads();
      for (int c = threadIdx.x; c < W && c < n; c += blockDim.x) dst[blockIdx.x * n + c] = buf[c] + 1.0f;
    }

    int main() {
      const int rows = 4, n = 64;
      float *h = (float *)malloc(rows * n * sizeof(float)), *src, *dst;
      for (int i = 0; i < rows * n; i++) h[i] = (float)(i % 13);
      cudaMalloc(&src, rows * n * sizeof(float));
      cudaMalloc(&dst, rows * n * sizeof(float));
      cudaMemcpy(src, h, rows * n * sizeof(float), cudaMemcpyHostToDevice);
      cudaFuncSetAttribute(rows_twice<64>, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
      rows_twice<64><<<rows, 32>>>(src, dst, n);
      ops::bump<<<(rows * n + 127) / 128, 128>>>(dst, rows * n);
      cudaMemcpy(h, dst, rows * n * sizeof(float), cudaMemcpyDeviceToHost);
      printf("%f\\n", h[5]);
      return 0;
    }
"""


def test_helpers_in_namespaces_reach_both_ports_and_verify(tmp_path: Path):
    src = tmp_path / "ns.cu"
    src.write_text(textwrap.dedent(PROGRAM).lstrip())
    parsed = find_kernels(src.read_text(), str(src))
    helpers = {h.name: h.namespaces for h in parsed.helpers}
    assert helpers == {"twice": ["tile", "detail"], "load_row": ["tile"], "plus_one": ["ops"]}
    report = port_file(src, write=False)
    assert report.capture.status == "ok", report.capture.error
    got = {k.kernel: (k.status, k.workload, k.reason) for k in report.kernels}
    assert got["rows_twice"][:2] == ("verified", "captured"), got
    assert got["bump"][:2] == ("verified", "captured"), got
