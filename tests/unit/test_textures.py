"""Texture reads, end to end: a small CUDA program binds texture references / creates texture objects, the CPU
capture records what each launch read (sim/ksim_tex.h), the translator turns the fetches into buffer reads
(translate/textures.py), and both ports must reproduce the captured outputs. The expected values are also
computed here, in numpy, from CUDA's definition of the texture unit (so a bug shared by the simulator and the
port still fails)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel
from ksearch_engine.translate.textures import TextureError, rewrite
from tests.sources import port_and_capture

PROGRAM = r"""
#include <cstdio>
#include <cuda_runtime.h>
texture<float, 1, cudaReadModeElementType> texIn;
texture<uchar4, 1, cudaReadModeNormalizedFloat> texRGBA;
__global__ void fetch_ref(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch(texIn, i + 2) * 2.0f;
}
__global__ void fetch_norm(float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch(texRGBA, i);
}
__global__ void sample2d(float* out, int w, int h, cudaTextureObject_t tex) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(tex, (x + 0.3f) / w * 1.7f, (y + 0.6f) / h * 1.3f - 0.2f);
}
__global__ void layered(float* out, int w, int h, cudaTextureObject_t tex) {
  int x = threadIdx.x, y = threadIdx.y, l = blockIdx.x;
  out[(l * h + y) * w + x] = tex2DLayered<float>(tex, x * 1.5f - 2.0f, y + 0.5f, l);
}
int main() {
  const int n = 64, w = 16, h = 8, layers = 3;
  float hbuf[n + 1];
  for (int i = 0; i <= n; i++) hbuf[i] = i * 0.5f;
  float *d, *o;
  cudaMalloc(&d, (n + 1) * sizeof(float)); cudaMalloc(&o, n * sizeof(float));
  cudaMemcpy(d, hbuf, sizeof hbuf, cudaMemcpyHostToDevice);
  cudaBindTexture(0, texIn, d, (n + 1) * sizeof(float));
  fetch_ref<<<2, 32>>>(o, n);
  unsigned char rgba[4 * n];
  for (int i = 0; i < 4 * n; i++) rgba[i] = (unsigned char)(i * 7);
  unsigned char* dr; cudaMalloc(&dr, sizeof rgba);
  cudaMemcpy(dr, rgba, sizeof rgba, cudaMemcpyHostToDevice);
  cudaBindTexture(0, texRGBA, dr, sizeof rgba);
  float4* o4; cudaMalloc(&o4, n * sizeof(float4));
  fetch_norm<<<2, 32>>>(o4, n);
  float img[w * h];
  for (int i = 0; i < w * h; i++) img[i] = (i * 37 % 11) * 0.25f;
  cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
  cudaArray_t arr; cudaMallocArray(&arr, &cd, w, h);
  cudaMemcpy2DToArray(arr, 0, 0, img, w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice);
  cudaResourceDesc rd = {}; rd.resType = cudaResourceTypeArray; rd.res.array.array = arr;
  cudaTextureDesc td = {}; td.normalizedCoords = 1; td.filterMode = cudaFilterModeLinear;
  td.addressMode[0] = cudaAddressModeWrap; td.addressMode[1] = cudaAddressModeClamp;
  cudaTextureObject_t tex; cudaCreateTextureObject(&tex, &rd, &td, NULL);
  float* o2; cudaMalloc(&o2, w * h * sizeof(float));
  sample2d<<<dim3(2, 1), dim3(8, 8)>>>(o2, w, h, tex);
  float vol[w * h * layers];
  for (int i = 0; i < w * h * layers; i++) vol[i] = (float)(i % 13) - 4.0f;
  cudaArray_t arr3; cudaMalloc3DArray(&arr3, &cd, make_cudaExtent(w, h, layers), cudaArrayLayered);
  cudaMemcpy3DParms p = {}; p.srcPtr = make_cudaPitchedPtr(vol, w * sizeof(float), w, h); p.dstArray = arr3;
  p.extent = make_cudaExtent(w, h, layers); p.kind = cudaMemcpyHostToDevice; cudaMemcpy3D(&p);
  cudaResourceDesc rd3 = {}; rd3.resType = cudaResourceTypeArray; rd3.res.array.array = arr3;
  cudaTextureDesc td3 = {}; td3.filterMode = cudaFilterModePoint; td3.addressMode[0] = cudaAddressModeBorder;
  td3.addressMode[1] = cudaAddressModeClamp;
  cudaTextureObject_t tex3; cudaCreateTextureObject(&tex3, &rd3, &td3, NULL);
  float* o3; cudaMalloc(&o3, w * h * layers * sizeof(float));
  layered<<<layers, dim3(w, h)>>>(o3, w, h, tex3);
  printf("done\n");
  return 0;
}
"""


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    return port_and_capture(tmp_path_factory.mktemp("tex"), "texprog.cu", PROGRAM)


def _after(cap, kernel):
    rec = next(r for r in cap.launches if r.kernel == kernel)
    return cap.load(rec.args[0].after)


def test_every_texture_kernel_verified(ported):
    rep, _ = ported
    got = {k.kernel: (k.status, k.reason) for k in rep.kernels}
    assert got == {k: ("verified", None) for k in ("fetch_ref", "fetch_norm", "sample2d", "layered")}, got


def test_fetch_out_of_range_reads_zero_and_normalized_float(ported):
    _, cap = ported
    out = _after(cap, "fetch_ref").view(np.float32)
    ref = np.array([(i + 2) * 0.5 * 2 if i + 2 <= 64 else 0.0 for i in range(64)], np.float32)
    np.testing.assert_array_equal(out, ref)
    norm = _after(cap, "fetch_norm").view(np.float32).reshape(64, 4)
    bytes_ = (np.arange(256) * 7 % 256).astype(np.float32).reshape(64, 4) / 255.0
    np.testing.assert_allclose(norm, bytes_, rtol=1e-6)


def _addr(i, n, mode):
    if mode == "wrap":
        return i % n
    return min(max(i, 0), n - 1)


def test_linear_filtering_wrap_clamp_normalized(ported):
    _, cap = ported
    w, h = 16, 8
    img = ((np.arange(w * h) * 37 % 11) * 0.25).reshape(h, w)
    out = _after(cap, "sample2d").view(np.float32).reshape(h, w)
    for y in range(h):
        for x in range(w):
            u = np.float32((x + 0.3) / w * 1.7) * w - 0.5
            v = np.float32((y + 0.6) / h * 1.3 - 0.2) * h - 0.5
            i, j = int(np.floor(u)), int(np.floor(v))
            a, b = np.round((u - i) * 256) / 256, np.round((v - j) * 256) / 256   # 8-bit weights
            t = lambda ii, jj: img[_addr(jj, h, "clamp"), _addr(ii, w, "wrap")]  # noqa: E731
            want = (1 - a) * (1 - b) * t(i, j) + a * (1 - b) * t(i + 1, j) + (1 - a) * b * t(i, j + 1) \
                + a * b * t(i + 1, j + 1)
            assert abs(out[y, x] - want) < 1e-4, (x, y, out[y, x], want)


def test_layered_point_border_and_clamp(ported):
    _, cap = ported
    w, h, L = 16, 8, 3
    vol = (np.arange(w * h * L) % 13 - 4.0).reshape(L, h, w)
    out = _after(cap, "layered").view(np.float32).reshape(L, h, w)
    for l_ in range(L):
        for y in range(h):
            for x in range(w):
                i = int(np.floor(np.float32(x * 1.5 - 2.0)))
                want = vol[l_, min(y, h - 1), i] if 0 <= i < w else 0.0
                assert out[l_, y, x] == want, (l_, y, x)


def test_capture_names_each_texture(ported):
    _, cap = ported
    recs = [json.loads(ln) for ln in Path(cap.dir, "textures.jsonl").read_text().splitlines()]
    keys = {r["key"] for r in recs}
    assert {"ref:texIn", "ref:texRGBA"} <= keys and sum(k.startswith("obj:") for k in keys) == 2
    rgba = next(r for r in recs if r["key"] == "ref:texRGBA")
    assert (rgba["dtype"], rgba["comps"], rgba["w"]) == ("float32", 4, 64)


def test_port_reads_a_buffer_with_the_index_arithmetic():
    src = PROGRAM
    parsed = find_kernels(src, "texprog.cu")
    tr = translate_kernel(parsed, "sample2d", "texprog.cu")
    assert not [i for i in tr.report if i.severity == "error"]
    assert "ks_tex2D_float" in tr.module_text and "tex__m" in tr.module_text
    assert "cudaTextureObject_t" not in tr.module_text


def test_surface_write_is_not_ported_with_its_line():
    # (2-D surfaces are ported: tests/unit/test_surfaces.py; cubemap surfaces are not)
    src = ("__global__ void w(float* o, cudaSurfaceObject_t s, int n) {\n  int x = threadIdx.x;\n"
           "  surfCubemapwrite(o[x], s, x * 4, 0, 0);\n}\n")
    parsed = find_kernels(src, "s.cu")
    with pytest.raises(TextureError) as e:
        rewrite(src, parsed.kernel("w"))
    assert e.value.line == 2 and "surfCubemapwrite" in e.value.construct
    tr = translate_kernel(parsed, "w", "s.cu")
    err = [i for i in tr.report if i.severity == "error"][0]
    assert err.line == 2 and "surface" in err.message


def test_texture_passed_on_is_not_ported():
    src = ("texture<float, 1, cudaReadModeElementType> t;\n__device__ float f(float x) { return x; }\n"
           "__global__ void k(float* o) {\n  o[0] = tex1Dfetch(t, 0);\n  o[1] = f(t);\n}\n")
    with pytest.raises(TextureError) as e:
        rewrite(src, find_kernels(src, "k.cu").kernel("k"))
    assert e.value.line == 4 and "other than in a fetch" in e.value.message
