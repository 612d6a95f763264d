"""The launch geometry a kernel was written for, read from its source when no program runs it (launchsites), and
portinfer using it: tile kernels that race on a made-up block verify on the block their launch site gives."""
from __future__ import annotations

from pathlib import Path

import pytest

from ksearch_engine.launchsites import kernel_geometries
from ksearch_engine.portinfer import InferError, infer_launch
from ksearch_engine.source import find_kernels

# A tile kernel: each thread loads one element of a TILE x TILE tile, then reads its neighbour's. On a block other
# than TILE x TILE part of the tile is never written (or written by two threads): the simulator calls it a race.
TILE_KERNEL = r"""
#ifdef BIG_TILES
#define TILE 32
#else
#define TILE 8
#endif
__global__ void flip_tiles(float *out, const float *in, int width)
{
    __shared__ float tile[TILE][TILE];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    tile[threadIdx.y][threadIdx.x] = in[y * width + x];
    __syncthreads();
    out[y * width + x] = tile[threadIdx.x][TILE - 1 - threadIdx.y];
}
"""

HOST = r"""
#include "tiles.cuh"
static const int ROWS = 2;
void run(float *d_out, float *d_in, int w)
{
    dim3 threads(TILE, TILE);
    dim3 grid(w / TILE, ROWS);
    flip_tiles<<<grid, threads>>>(d_out, d_in, w);
}
"""


def _kernel(path: Path, name: str):
    parsed = find_kernels(path.read_text(), str(path))
    return next(k for k in parsed.kernels if k.name == name)


@pytest.fixture()
def tiles(tmp_path) -> Path:
    (tmp_path / "tiles.cuh").write_text(TILE_KERNEL)
    (tmp_path / "host.cu").write_text(HOST)
    return tmp_path / "tiles.cuh"


def test_the_block_grid_and_scalars_come_from_the_launch_site_in_the_program(tiles):
    k = _kernel(tiles, "flip_tiles")
    geoms = kernel_geometries(k, tiles)
    assert geoms, "no geometry read from host.cu's launch"
    g = geoms[0]
    assert g.block == (8, 8, 1)                      # dim3 threads(TILE, TILE), TILE from #else
    # w is known only at run time: one stand-in n for the grid w / TILE and the scalar w
    n = g.scalars["width"]
    assert g.grid == (n // 8, 2, 1)
    assert "host.cu:8" in g.origin


def test_a_define_given_on_the_command_line_picks_the_other_branch(tiles):
    k = _kernel(tiles, "flip_tiles")
    g = kernel_geometries(k, tiles, given_defines={"BIG_TILES": "1"})[0]
    assert g.block == (32, 32, 1)


def test_the_tile_kernel_verifies_in_the_simulator_on_the_geometry_of_its_launch(tiles):
    from ksearch_engine.portcheck import check_inferred
    from ksearch_engine.translate import translate_kernel

    parsed = find_kernels(tiles.read_text(), str(tiles))
    k = parsed.kernel("flip_tiles")
    tr = translate_kernel(parsed, "flip_tiles", str(tiles))
    res = check_inferred(tr.module_text, tiles.read_text(), k, tiles, {}, include_dirs=[str(tiles.parent)])
    assert res.passed, res.reason
    rec = res.checked[0][0]
    assert rec.block == (8, 8, 1) and rec.line == 8


def test_without_the_source_geometry_the_made_up_block_does_not_run(tiles):
    # the control: on the made-up 16x16 block the 8x8 tile is overrun; the test above must not pass by luck
    k = _kernel(tiles, "flip_tiles")
    with pytest.raises(InferError) as e:
        infer_launch(tiles.read_text(), k, {}, filename=tiles.name, include_dirs=[str(tiles.parent)])
    assert "flip_tiles" in str(e.value) and "line" in str(e.value)


RACY = r"""
#define BLOCK 64
__global__ void last_writer(int *out)
{
    __shared__ int s[BLOCK];
    s[0] = threadIdx.x;          // every thread writes the same word
    __syncthreads();
    out[blockIdx.x * BLOCK + threadIdx.x] = s[0];
}
void go(int *d) { last_writer<<<4, BLOCK>>>(d); }
"""


def test_an_original_that_races_under_its_own_geometry_stays_unverified_with_the_reason(tmp_path):
    f = tmp_path / "racy.cu"
    f.write_text(RACY)
    k = _kernel(f, "last_writer")
    geoms = kernel_geometries(k, f)
    assert geoms[0].block == (64, 1, 1) and geoms[0].grid == (4, 1, 1)
    with pytest.raises(InferError) as e:
        infer_launch(RACY, k, {}, filename=f.name, geometries=geoms)
    msg = str(e.value)
    assert "races" in msg and "racy.cu:10" in msg and "Traceback" not in msg


TEMPLATED = r"""
template <int W>
__global__ void window_sum(float *out, const float *in)
{
    __shared__ float w[W];
    w[threadIdx.x] = in[blockIdx.x * W + threadIdx.x];
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < W; i++) s += w[i];
    out[blockIdx.x * W + threadIdx.x] = s;
}
template <int WIN>
void launch_sum(float *o, const float *i, int n)
{
    window_sum<WIN><<<n / WIN, WIN>>>(o, i);
}
void sums(float *o, const float *i) { launch_sum<32>(o, i, 1024); }
"""


def test_template_arguments_are_followed_through_a_host_template_to_its_call(tmp_path):
    f = tmp_path / "win.cu"
    f.write_text(TEMPLATED)
    k = _kernel(f, "window_sum")
    g = kernel_geometries(k, f)[0]
    assert g.template_args == ["32"] and g.block == (32, 1, 1)
    rec, _ = infer_launch(TEMPLATED, k, {}, filename=f.name, geometries=[g])
    assert rec.template_args == ["32"] and rec.block == (32, 1, 1)


DRIVER = r"""
#define THREADS 128
void host(CUmodule mod, CUdeviceptr d)
{
    CUfunction fn;
    cuModuleGetFunction(&fn, mod, "scale");
    void *args[] = {&d};
    cuLaunchKernel(fn, 4, 1, 1, THREADS, 1, 1, sizeof(float) * THREADS, 0, args, 0);
}
"""


def test_a_driver_api_launch_names_its_kernel_through_the_module_lookup(tmp_path):
    (tmp_path / "scale_kernel.cu").write_text(
        "extern \"C\" __global__ void scale(float *x) { extern __shared__ float s[]; "
        "s[threadIdx.x] = x[threadIdx.x]; x[threadIdx.x] = 2.0f * s[threadIdx.x]; }\n")
    (tmp_path / "driver.cpp").write_text(DRIVER)
    f = tmp_path / "scale_kernel.cu"
    g = kernel_geometries(_kernel(f, "scale"), f)[0]
    assert (g.grid, g.block, g.shared_mem) == ((4, 1, 1), (128, 1, 1), 512)


def test_a_spaced_launch_and_the_kernel_files_own_constant_win_over_a_neighbours(tmp_path):
    (tmp_path / "other_variant.cu").write_text("const int threads_per_block = 128;\n")
    f = tmp_path / "mine.cu"
    f.write_text("const int threads_per_block = 256;\n"
                 "__global__ void inc(int *a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; "
                 "if (i < n) a[i] += 1; }\n"
                 "void go(int *a, int n) { int blocks = (n + threads_per_block - 1) / threads_per_block;\n"
                 "  inc << < blocks, threads_per_block >> > (a, n); }\n")
    g = kernel_geometries(_kernel(f, "inc"), f)[0]
    assert g.block == (256, 1, 1)
    assert g.grid == (-(-g.scalars["n"] // 256), 1, 1)


# A host template sizes the kernel's dynamic shared memory by its own type parameter, and reassigns it in one branch;
# the block size is a runtime value, so the instantiation's own block-size argument gives the block.
WARPSUM_KERNEL = r"""
template <class T, unsigned int BlockSize>
__global__ void group_sums(const T *in, T *out, unsigned int n)
{
    extern __shared__ unsigned char raw[];
    T *part = reinterpret_cast<T *>(raw);
    unsigned int i = blockIdx.x * BlockSize + threadIdx.x;
    T v = i < n ? in[i] : T(0);
    if (threadIdx.x % (BlockSize / 2) == 0) part[threadIdx.x / (BlockSize / 2)] = 0;
    __syncthreads();
    atomicAdd(&part[threadIdx.x / (BlockSize / 2)], v);
    __syncthreads();
    if (threadIdx.x < 2) out[blockIdx.x * 2 + threadIdx.x] = part[threadIdx.x];
}

template <class T> void sums(int threads, int blocks, int which, const T *d_in, T *d_out, unsigned int n)
{
    int smem = threads * sizeof(T);
    if (which == 1) {
        constexpr int groups = 2;
        smem = groups * sizeof(T);
        switch (threads) {
        case 256: group_sums<T, 256><<<blocks, threads, smem>>>(d_in, d_out, n); break;
        }
    }
}

void run_all(int threads, int blocks, float *fi, float *fo, double *di, double *dout, unsigned int n)
{
    sums<float>(threads, blocks, 1, fi, fo, n);
    sums<double>(threads, blocks, 1, di, dout, n);
}
"""


def test_dynamic_shared_memory_sized_by_the_host_templates_type_parameter(tmp_path):
    """`smem = groups * sizeof(T)` inside `template <class T> void sums(...)`: the bytes come from each instantiation
    the program calls (8 for float, 16 for double), not a made-up size per thread (which here would be 256 x 32
    bytes, a quarter of the Apple GPU's threadgroup memory for two floats)."""
    path = tmp_path / "sums.cu"
    path.write_text(WARPSUM_KERNEL)
    geoms = kernel_geometries(_kernel(path, "group_sums"), path)
    got = {(tuple(g.template_args), g.block, g.shared_mem) for g in geoms}
    assert {(g.template_args[0], g.shared_mem) for g in geoms} >= {("float", 8), ("double", 16)}, got
    assert all(g.block == (256, 1, 1) for g in geoms), got
