"""Optimizing a kernel whose program passes NULL for a pointer the kernel tests (`if (weights) ... else ...`): the
task holds that parameter as a null pointer (launch() gets None, the original in the simulator a null pointer),
never as a numpy object array (was: 'Object arrays cannot be saved when allow_pickle=False', a raw traceback).
Kernel and program written here."""
from __future__ import annotations

import numpy as np

from ksearch_engine.evaluate import Evaluator
from ksearch_engine.resolve import resolve

SRC = r"""
#include <cstdio>
#include <cstdlib>
__global__ void scale_opt(float *out, const float *weights, const float *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (weights) out[i] = in[i] * weights[i];
  else out[i] = in[i] * 2.0f + 1.0f;
}
int main() {
  const int n = 256;
  float *h = (float *)malloc(n * sizeof(float)), *d_in, *d_out;
  for (int i = 0; i < n; i++) h[i] = (float)(i % 13) - 6.0f;
  cudaMalloc(&d_in, n * sizeof(float)); cudaMalloc(&d_out, n * sizeof(float));
  cudaMemcpy(d_in, h, n * sizeof(float), cudaMemcpyHostToDevice);
  scale_opt<<<n / 64, 64>>>(d_out, NULL, d_in, n);
  cudaMemcpy(h, d_out, n * sizeof(float), cudaMemcpyDeviceToHost);
  printf("%f\n", h[3]);
  return 0;
}
"""


def test_a_null_pointer_argument_becomes_part_of_the_task_and_the_root_passes(tmp_path):
    src = tmp_path / "optional_weights.cu"
    src.write_text(SRC)
    r = resolve(str(src), "scale_opt")
    t = r.task
    assert [i.name for i in t.inputs] == ["out", "weights", "in", "n"] and t.outputs == ["out"]
    w = t.workloads[0]
    assert w.dims["weights_len"] == 0          # a null pointer: no elements
    with Evaluator(t, backend="sim") as ev:
        ok = ev.evaluate(t.initial, timing=False)
        # a candidate that ignores the null test (reads the missing weights as zeros) must fail verification
        wrong = t.initial.replace("* 2.0f + 1.0f", "* 2.0f + 1.5f").replace("*2.0f+1.0f", "*2.0f+1.5f")
        assert wrong != t.initial
        bad = ev.evaluate(wrong, timing=False)
    assert ok.status == "passed", ok.message
    assert bad.status == "failed"
