"""Issue 13 (llm.c's `if (mean != nullptr)`, quasirandom's inverseCNDKernel called with d_Input = NULL): a launch
that passes NULL for a pointer the kernel tests is checked, the ports getting None for it (launch()'s nullable
parameters) and the original a null pointer in the simulator."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from ksearch_engine.portfile import port_file
from ksearch_engine.sim import run_cuda_source

SRC = """
    #include <cstdio>
    #include <cstdlib>
    __global__ void norm_rows(float *out, float *mean, const float *inp, int rows, int cols) {
      int r = blockIdx.x * blockDim.x + threadIdx.x;
      if (r >= rows) return;
      float s = 0.0f;
      for (int c = 0; c < cols; c++) s += inp[r * cols + c];
      float m = s / cols;
      for (int c = 0; c < cols; c++) out[r * cols + c] = inp[r * cols + c] - m;
      if (mean != nullptr) mean[r] = m;
    }
    int main() {
      const int rows = 64, cols = 8;
      float *h = (float *)malloc(rows * cols * sizeof(float)), *d_in, *d_out;
      for (int i = 0; i < rows * cols; i++) h[i] = (float)(i % 11);
      cudaMalloc(&d_in, rows * cols * sizeof(float)); cudaMalloc(&d_out, rows * cols * sizeof(float));
      cudaMemcpy(d_in, h, rows * cols * sizeof(float), cudaMemcpyHostToDevice);
      norm_rows<<<rows / 32, 32>>>(d_out, NULL, d_in, rows, cols);   // no means wanted
      cudaMemcpy(h, d_out, rows * cols * sizeof(float), cudaMemcpyDeviceToHost);
      printf("%f\\n", h[5]);
      return 0;
    }
"""


def test_the_simulator_passes_none_as_a_null_pointer():
    src = "__global__ void k(float* y, const float* b) { int i = threadIdx.x; y[i] = (b ? b[i] : 2.0f) + 1.0f; }"
    res = run_cuda_source(src, "k", (1, 1, 1), (8, 1, 1), {"y": np.zeros(8, np.float32), "b": None})
    assert res["y"].tolist() == [3.0] * 8 and "b" not in res


def test_a_launch_passing_null_for_a_tested_pointer_is_checked(tmp_path: Path):
    src = tmp_path / "norm.cu"
    src.write_text(textwrap.dedent(SRC).lstrip())
    v = {k.kernel: k for k in port_file(src, write=False).kernels}["norm_rows"]
    assert v.status == "verified", v.reason
    assert v.workload == "captured"
    assert "KS_NULL_mean" in v.module_text
