"""Kernel-only inference: the block shape a made-up workload uses comes from the shared tiles the kernel indexes by
the thread's y and x (`tile[ty][tx]`, directly, through a helper the kernel instantiates `helper<8>(...)`, or a
function-like macro), not a 1-D block that leaves most of the tile unwritten (portinfer._shared_block_shape).
Kernels written here."""
from ksearch_engine.portinfer import _geometry
from ksearch_engine.source import find_kernels

HELPER = """
#define TILE_AT(r, c) tile[r][c]
template <int T, typename idx_t> __device__ void blur_rows(float *out, const float *in, idx_t width)
{
    idx_t cx = threadIdx.x;
    idx_t cy = threadIdx.y;
    __shared__ float tile[T][T];
    TILE_AT(cy, cx) = in[(blockIdx.y * T + cy) * width + blockIdx.x * T + cx];
    __syncthreads();
    float s = TILE_AT(cy, cx) + TILE_AT(cy, (cx + 1) % T);
    out[(blockIdx.y * T + cy) * width + blockIdx.x * T + cx] = 0.5f * s;
}
extern "C" __global__ void blur8(float *out, const float *in, long width) { blur_rows<8, long>(out, in, width); }
"""

OWN = """
#define ROWS 4
template <int W> __global__ void stencil3d(float *out, const float *in)
{
    __shared__ float box[2][ROWS][W];
    box[threadIdx.z][threadIdx.y][threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = box[1 - threadIdx.z][threadIdx.y][threadIdx.x];
}
"""


def _geom(src, name, defines=None, targs=None):
    pr = find_kernels(src, "t.cu")
    return _geometry(pr.kernel(name), defines or {}, src, targs)


def test_a_helpers_tile_sized_by_the_kernels_template_argument_gives_the_block_shape():
    assert _geom(HELPER, "blur8") == ((2, 2, 1), (8, 8, 1))


def test_a_3d_tile_of_the_kernel_gives_a_3d_block_from_defines_and_template_arguments():
    assert _geom(OWN, "stencil3d", {"ROWS": 4}, ["16"])[1] == (16, 4, 2)


def test_without_a_tile_a_2d_kernel_keeps_the_16x16_block():
    src = "__global__ void k(float *o) { o[threadIdx.y * 16 + threadIdx.x] = 1.0f; }"
    assert _geom(src, "k")[1] == (16, 16, 1)
