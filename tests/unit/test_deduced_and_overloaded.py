"""Issue 13: two constructs of real training-loop code, on a program written here. (1) A template kernel launched
without template arguments (`scale<<<g, b>>>(out, x, n)` with `const T* x`: C++ deduces T) is checked on its
captured launches with T as deduced. (2) A block reduction written as two overloads of one helper — a template that
reads threadIdx and a wrapper with default arguments that calls it — gets Metal's thread attributes in both."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file

PROGRAM = """
    #include <cstdio>
    __device__ float warp_sum(float v) {
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
        return v;
    }
    template <float (*reduce)(float)>
    __device__ float block_sum(float v, bool sync_after, float fill) {
        __shared__ float partial[32];
        int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
        v = reduce(v);
        if (lane == 0) partial[warp] = v;
        __syncthreads();
        v = lane < warps ? partial[lane] : fill;
        v = reduce(v);
        if (sync_after) __syncthreads();
        return v;
    }
    __device__ float block_sum(float v) { return block_sum<warp_sum>(v, false, 0.0f); }

    template <class T>
    __global__ void row_sums(float* out, const T* x, int cols) {
        float acc = 0.0f;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += (float)x[blockIdx.x * cols + c];
        acc = block_sum(acc);
        if (threadIdx.x == 0) out[blockIdx.x] = acc;
    }

    int main() {
        const int rows = 8, cols = 300;
        float h[rows * cols];
        for (int i = 0; i < rows * cols; i++) h[i] = (float)(i % 7) - 3.0f;
        float *x, *out;
        cudaMalloc(&x, sizeof h); cudaMalloc(&out, rows * sizeof(float));
        cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
        row_sums<<<rows, 128>>>(out, x, cols);
        float r[rows];
        cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost);
        printf("%f\\n", r[0]);
        return 0;
    }
"""


def test_deduced_template_arguments_and_overloaded_block_reduction_verify(tmp_path: Path):
    src = tmp_path / "sums.cu"
    src.write_text(textwrap.dedent(PROGRAM).lstrip())
    (v,) = port_file(src, write=False).kernels
    assert (v.status, v.workload) == ("verified", "captured"), v.reason
