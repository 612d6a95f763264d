"""Issue 13: clock()/clock64() in a kernel. Metal has no clock: the Metal port counts each thread's readings
(specs/translation.yaml time.clock), the simulator's Metal dialect refuses clock() as a Mac would, and the port check
leaves the original's clock-derived outputs out of the comparison."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from ksearch_engine.portfile import port_file
from ksearch_engine.sim import SimError, run_mlx_kernel

SRC = """
    #include <cstdio>
    #include <cstdlib>
    // waits about `ticks` clock ticks (a spin-wait on the clock, as timing samples write it)
    __device__ void spin(clock_t ticks) {
      clock_t start = clock();
      clock_t waited = 0;
      while (waited < ticks) waited = clock() - start;
    }

    __global__ void timed_scale(float *x, long long *elapsed, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      long long t0 = clock64();
      spin(64);
      if (i < n) x[i] = x[i] * 2.0f + 1.0f;
      if (i < n) elapsed[i] = clock64() - t0;
    }

    int main() {
      const int n = 128;
      float *h = (float *)malloc(n * sizeof(float)), *d;
      long long *t;
      for (int i = 0; i < n; i++) h[i] = (float)(i % 9);
      cudaMalloc(&d, n * sizeof(float)); cudaMalloc(&t, n * sizeof(long long));
      cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
      timed_scale<<<n / 64, 64>>>(d, t, n);
      cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
      printf("%f\\n", h[3]);
      return 0;
    }
"""


def test_a_kernel_and_helper_reading_the_clock_port_to_metal_without_clock_and_verify(tmp_path: Path):
    src = tmp_path / "timed.cu"
    src.write_text(textwrap.dedent(SRC).lstrip())
    report = port_file(src, write=False)
    v = {k.kernel: k for k in report.kernels}["timed_scale"]
    assert v.status == "verified", v.reason
    metal = v.module_text.split("CUDA_HEADER")[0]
    code = re.sub(r"//[^\n]*", "", metal.split("METAL_HEADER", 1)[1])
    assert not re.search(r"\bclock(?:64)?\s*\(", code), code
    assert "thread ulong& ks_clock_ticks" in metal and "ulong ks_clock_ticks = 0;" in metal


def test_the_simulators_metal_dialect_has_no_clock():
    import numpy as np
    x = np.zeros(32, dtype=np.int64)
    with pytest.raises(SimError) as e:
        run_mlx_kernel("metal", "clk", ["inp"], ["out"], "out[thread_position_in_grid.x] = clock();", "", [x], [],
                       grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[x.shape], output_dtypes=["int64"])
    assert e.value.kind == "compile" and "no_clock" in str(e.value)
