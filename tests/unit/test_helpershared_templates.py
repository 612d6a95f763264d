"""Shared arrays that a template `__device__` helper declares, sized by its template parameter, where the kernel
instantiates the helper with fixed arguments (`tile_sum<8>(...)`): the Metal port declares them in the kernel with
those arguments (translate/helpershared.py). Kernels written here."""
import numpy as np

from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel
from ksearch_engine.translate.check import check_port

SRC = """
template <int TILE> __device__ void tile_transpose_scale(float *dst, const float *src, int width, float f)
{
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * TILE + tx, row = blockIdx.y * TILE + ty;
    __shared__ float tile[TILE][TILE + 1];
    tile[ty][tx] = src[row * width + col];
    __syncthreads();
    int out = (blockIdx.x * TILE + ty) * width + blockIdx.y * TILE + tx;
    dst[out] = f * tile[tx][ty];
}

extern "C" __global__ void transpose8(float *dst, const float *src, int width, float f)
{
    tile_transpose_scale<8>(dst, src, width, f);
}
"""


def _port(kernel, tile):
    parsed = find_kernels(SRC, "t.cu")
    tr = translate_kernel(parsed, kernel, "t.cu")
    assert not [i for i in tr.report if "template parameter" in i.message], [i.message for i in tr.report]
    width = 2 * tile
    src = np.arange(width * width, dtype=np.float32)
    res = check_port(tr.module_text, SRC, kernel,
                     {"args": {"dst": np.zeros(width * width, np.float32), "src": src, "width": width, "f": 0.5},
                      "grid": (2, 2, 1), "block": (tile, tile, 1), "shared_mem": 0, "template_args": []},
                     filename="t.cu")
    return tr, res


def test_a_template_helpers_shared_array_is_declared_in_the_kernel_with_the_kernels_arguments():
    tr, res = _port("transpose8", 8)
    assert "threadgroup float tile[(8)][(8) + 1];" in tr.metal_source
    # the helper takes a pointer to its rows; the simulator reads that parameter as a pointer, not an array
    assert "threadgroup float (*tile)[(8) + 1]" in tr.launch_metal_header
    assert res.original_error is None, res.original_error
    assert res.dialects == {"metal": "passed", "cuda": "passed"}, res.message
