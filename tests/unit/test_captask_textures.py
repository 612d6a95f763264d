"""Optimizing a kernel that reads a texture object: the original cannot run in the simulator outside its program
(only the program sets its texture up), so the task's reference is its port, checked against what the original
wrote on the captured launches (was: 'its reference failed to run: ... unknown: tex__w, tex__h, ...', cuda-samples
simpleTextureDrv / simpleSurfaceWrite). Program written here."""
from __future__ import annotations

from ksearch_engine.evaluate import Evaluator
from ksearch_engine.resolve import resolve

PROGRAM = r"""
#include <cstdio>
#include <cuda_runtime.h>
__global__ void shade(float* out, int w, int h, float k, cudaTextureObject_t img) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(img, x + 0.5f, y + 0.5f) * k + (float)x;
}
int main() {
  const int w = 16, h = 8;
  float pix[w * h];
  for (int i = 0; i < w * h; i++) pix[i] = (float)((i * 5) % 9) - 3.0f;
  cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
  cudaArray_t arr; cudaMallocArray(&arr, &cd, w, h);
  cudaMemcpy2DToArray(arr, 0, 0, pix, w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice);
  cudaResourceDesc rd = {}; rd.resType = cudaResourceTypeArray; rd.res.array.array = arr;
  cudaTextureDesc td = {}; td.filterMode = cudaFilterModePoint;
  td.addressMode[0] = cudaAddressModeClamp; td.addressMode[1] = cudaAddressModeClamp;
  cudaTextureObject_t img; cudaCreateTextureObject(&img, &rd, &td, NULL);
  float* o; cudaMalloc(&o, w * h * sizeof(float));
  shade<<<dim3(2, 1), dim3(8, 8)>>>(o, w, h, 0.5f, img);
  float back[w * h];
  cudaMemcpy(back, o, sizeof back, cudaMemcpyDeviceToHost);
  printf("%f\n", back[3]);
  return 0;
}
"""


def test_a_texture_kernel_gets_a_task_whose_root_passes_and_a_wrong_candidate_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "shade.cu"
    src.write_text(PROGRAM)
    r = resolve(str(src), "shade")
    t = r.task
    assert t.outputs == ["out"]
    with Evaluator(t, backend="sim") as ev:
        ok = ev.evaluate(t.initial, timing=False)
        wrong = t.initial.replace("(float)x", "(float)(x + 1)").replace("(float)(x)", "(float)(x + 1)")
        assert wrong != t.initial
        bad = ev.evaluate(wrong, timing=False)
    assert ok.status == "passed", ok.message
    assert bad.status == "failed"
