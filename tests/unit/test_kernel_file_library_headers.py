"""Issue 13: a kernel file whose shared header sets up a library at file scope (`cublasHandle_t handle;`,
`static cublasComputeType_t compute;`, a cuBLASLt handle, a cuRAND generator) compiles in the simulator without
its program — when no program runs the kernel, and when the original is checked on captured launches — against
the same library stand-ins as the program's capture. Sources written here."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file

HEADER = """
    #pragma once
    #include <cuda_runtime.h>
    #include <cublas_v2.h>
    #include <cublasLt.h>
    #include <curand.h>
    static cublasComputeType_t compute_type = CUBLAS_COMPUTE_32F;
    cublasHandle_t blas;
    cublasLtHandle_t blas_lt;
    curandGenerator_t gen;
    template <class T> T ceil_div(T a, T b) { return (a + b - 1) / b; }
"""
KERNELS = """
    #include "setup.h"
    __global__ void gelu_like(float* out, const float* in, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { float x = in[i]; out[i] = 0.5f * x * (1.0f + tanhf(0.79788456f * (x + 0.044715f * x * x * x))); }
    }
    void gelu(float* out, const float* in, int n) {
        const int block = 128;
        gelu_like<<<ceil_div(n, block), block>>>(out, in, n);
    }
"""


def test_a_kernel_file_whose_header_declares_library_handles_verifies_without_its_program(tmp_path: Path):
    (tmp_path / "setup.h").write_text(textwrap.dedent(HEADER).lstrip())
    src = tmp_path / "gelu.cu"
    src.write_text(textwrap.dedent(KERNELS).lstrip())
    (v,) = port_file(src, write=False).kernels
    assert (v.status, v.workload) == ("verified", "inferred"), v.reason
