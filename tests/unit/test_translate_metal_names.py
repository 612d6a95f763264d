"""Issue 13: user identifiers that are Metal keywords or reserved names (a struct field `kernel`, a typedef
`vertex`, a local `sampler`) are renamed in the Metal port from one table (rewrite.METAL_KEYWORDS), in the kernel,
its helpers and the header's structs alike; the port verifies against the original in the simulator."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file
from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel

SRC = """
    #include <cstdio>
    #include <cstdlib>
    typedef float vertex;
    struct Item { int kernel; vertex patch; };
    __device__ float weigh(const Item &it, int fragment) { return it.patch * fragment + it.kernel; }
    __global__ void score(const Item *items, float *y, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i >= n) return;
      int sampler = i % 3;
      vertex visible = weigh(items[i], sampler + 1);
      y[i] = visible;
    }
    int main() {
      const int n = 64;
      Item *h = (Item *)malloc(n * sizeof(Item)), *d;
      float *hy = (float *)malloc(n * sizeof(float)), *dy;
      for (int i = 0; i < n; i++) { h[i].kernel = i % 5; h[i].patch = 0.5f * (float)(i % 7); }
      cudaMalloc(&d, n * sizeof(Item)); cudaMalloc(&dy, n * sizeof(float));
      cudaMemcpy(d, h, n * sizeof(Item), cudaMemcpyHostToDevice);
      score<<<n / 32, 32>>>(d, dy, n);
      cudaMemcpy(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost);
      printf("%f\\n", hy[3]);
      return 0;
    }
"""


def test_struct_fields_and_locals_named_like_metal_keywords_are_renamed_everywhere():
    tr = translate_kernel(find_kernels(textwrap.dedent(SRC), "t.cu"), "score", "t.cu")
    assert "struct Item { int kernel_; vertex_ patch_; };" in tr.header
    assert "it.patch_ * fragment_ + it.kernel_" in tr.header
    assert "int sampler_ = " in tr.metal_source and "weigh(items[i], sampler_ + 1)" in tr.metal_source


def test_a_port_with_renamed_fields_verifies(tmp_path: Path):
    src = tmp_path / "names.cu"
    src.write_text(textwrap.dedent(SRC).lstrip())
    v = {k.kernel: k for k in port_file(src, write=False).kernels}["score"]
    assert v.status == "verified", v.reason
