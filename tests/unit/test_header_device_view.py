"""Issue 13: a local header's helpers are read as nvcc's device pass reads them — an overload kept for old toolkits
or pre-sm_80 GPUs (`#if __CUDACC_VER_MAJOR__ < 12 && __CUDA_ARCH__ < 800`), naming types only those provide, is no
helper of the ports; one the including file switches on with its own #define before the #include is. Sources
written here; both ports checked in the simulator."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file

HEADER = """
    #pragma once
    #if defined(USE_OLD_LOADS) && (__CUDACC_VER_MAJOR__ < 12) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 800)
    __device__ float load_cs(const float* p) { return old_toolkit_only_raw{*p}.value; }
    #else
    __device__ float load_cs(const float* p) { return __ldcs(p); }
    #endif
    #ifdef WITH_BIAS
    __device__ float bias_of(int i) { return 0.25f * (float)(i % 3); }
    #else
    __device__ float bias_of(int i) { return 0.0f; }
    #endif
"""
KERNEL = """
    #define USE_OLD_LOADS
    #define WITH_BIAS
    #include "loads.h"
    __global__ void copy_bias(float* out, const float* in, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = load_cs(in + i) + bias_of(i);
    }
"""


def test_header_helpers_for_other_toolkits_are_left_out_and_the_includers_switches_kept(tmp_path: Path):
    (tmp_path / "loads.h").write_text(textwrap.dedent(HEADER).lstrip())
    src = tmp_path / "copy.cu"
    src.write_text(textwrap.dedent(KERNEL).lstrip())
    (v,) = port_file(src, write=False).kernels
    assert (v.status, v.workload) == ("verified", "inferred"), v.reason
    assert "old_toolkit_only_raw" not in v.module_text and "0.25f" in v.module_text
