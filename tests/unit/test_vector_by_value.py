"""Issue 13: CUDA vector types passed by value (`int2 size`, `int4 bounds`, `float3 scale`) travel to both ports
as their bytes — CUDA's float3 is 12 bytes, read through Metal's packed_float3 — on captured launches and on a
workload found by running the kernel (each vector made like a struct of x, y, z, w). Programs written here."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file

KERNEL = """
    #include <cstdio>
    __global__ void shift_box(float *out, const float *in, int2 size, int4 bounds, float3 scale)
    {
        int x = blockIdx.x * blockDim.x + threadIdx.x;
        int y = blockIdx.y;
        if (x >= size.x || y >= size.y) return;
        float v = in[y * size.x + x];
        bool inside = x >= bounds.x && x < bounds.z && y >= bounds.y && y < bounds.w;
        out[y * size.x + x] = inside ? v * scale.x + scale.y : v - scale.z;
    }
"""
MAIN = """
    int main() {
        const int w = 40, h = 6;
        float hin[w * h];
        for (int i = 0; i < w * h; i++) hin[i] = (float)(i % 11);
        float *din, *dout;
        cudaMalloc(&din, sizeof hin); cudaMalloc(&dout, sizeof hin);
        cudaMemcpy(din, hin, sizeof hin, cudaMemcpyHostToDevice);
        shift_box<<<dim3(2, h), 32>>>(dout, din, make_int2(w, h), make_int4(3, 1, 30, 5),
                                      make_float3(2.0f, 0.5f, 1.0f));
        cudaMemcpy(hin, dout, sizeof hin, cudaMemcpyDeviceToHost);
        printf("%f\\n", hin[50]);
        return 0;
    }
"""


def _port(tmp_path: Path, text: str):
    src = tmp_path / "vec.cu"
    src.write_text(textwrap.dedent(text).lstrip())
    (v,) = port_file(src, write=False).kernels
    return v


def test_vector_types_by_value_verify_on_the_captured_launch(tmp_path):
    v = _port(tmp_path, KERNEL + MAIN)
    assert (v.status, v.workload) == ("verified", "captured"), v.reason
    assert "packed_float3" in v.module_text   # the Metal port reads CUDA's 12-byte float3


def test_vector_types_by_value_verify_on_a_workload_found_by_running_the_kernel(tmp_path):
    v = _port(tmp_path, KERNEL)
    assert (v.status, v.workload) == ("verified", "inferred"), v.reason
