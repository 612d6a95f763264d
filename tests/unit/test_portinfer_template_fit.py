"""Kernel-only inference of template kernels (kernels and project layouts written here):
* a block-size template parameter with no value anywhere takes a representative that keeps the kernel's static
  shared arrays within CUDA's 48 KB and a P x P tile of a 1-D block within 1024 threads, and the made-up block
  covers that tile (portinfer._fit_block_params, _tile_block);
* a header's template kernel takes the template arguments of launches in the files that include it, directly or
  through another header, in the folders above it (launchsites._includers)."""
from pathlib import Path

from ksearch_engine.launchsites import kernel_geometries, related_sources
from ksearch_engine.portinfer import _geometry, representative_template_args, static_shared_bytes
from ksearch_engine.source import find_kernels

TILED = """
template <int BLOCK_SIZE>
__global__ void tiled_scale(const float *in, float *out, int n) {
  __shared__ float buf[BLOCK_SIZE * BLOCK_SIZE];
  __shared__ float other[BLOCK_SIZE * BLOCK_SIZE];
  const int r = threadIdx.x / BLOCK_SIZE, c = threadIdx.x % BLOCK_SIZE;
  int g = (blockIdx.y * BLOCK_SIZE + r) * n + blockIdx.x * BLOCK_SIZE + c;
  buf[r * BLOCK_SIZE + c] = in[g];
  other[c * BLOCK_SIZE + r] = 2.0f * in[g];
  __syncthreads();
  out[g] = buf[c * BLOCK_SIZE + r] + other[r * BLOCK_SIZE + c];
}
"""

WIDE = """
template <int BLOCK_SIZE>
__global__ void staged(const double *in, double *out) {
  __shared__ double stage[BLOCK_SIZE * 64];
  stage[threadIdx.x] = in[blockIdx.x * BLOCK_SIZE + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * BLOCK_SIZE + threadIdx.x] = stage[BLOCK_SIZE - 1 - threadIdx.x];
}
"""


def test_a_representative_block_size_keeps_the_tile_within_1024_threads_and_the_block_covers_it():
    k = find_kernels(TILED, "t.cu").kernel("tiled_scale")
    targs = representative_template_args(k)
    assert targs == [["32"]]
    assert static_shared_bytes(k, {"BLOCK_SIZE": 32}) == 2 * 32 * 32 * 4
    assert _geometry(k, {}, TILED, targs[0])[1] == (1024, 1, 1)


def test_a_representative_block_size_keeps_static_shared_memory_within_48_kb():
    k = find_kernels(WIDE, "t.cu").kernel("staged")
    (targs,) = representative_template_args(k)
    assert static_shared_bytes(k, {"BLOCK_SIZE": int(targs[0])}) <= 48 << 10
    assert targs == ["64"]          # 128 x 64 doubles would be 64 KB


def test_a_headers_template_arguments_come_from_a_launch_in_a_file_that_includes_it_through_another(tmp_path: Path):
    kdir = tmp_path / "src" / "kern"
    kdir.mkdir(parents=True)
    (kdir / "tiled.cuh").write_text("#pragma once\n" + TILED)
    (tmp_path / "src" / "all_kernels.cuh").write_text('#pragma once\n#include "kern/tiled.cuh"\n')
    (tmp_path / "src" / "launch.cu").write_text("""#include "all_kernels.cuh"
void run_tiled(const float *in, float *out, int n) {
  const unsigned TILE = 16;
  dim3 grid(n / TILE, n / TILE);
  tiled_scale<TILE><<<grid, TILE * TILE>>>(in, out, n);
}
""")
    header = kdir / "tiled.cuh"
    names = [p.name for p, _ in related_sources(header)]
    assert "launch.cu" in names and "all_kernels.cuh" in names
    k = find_kernels(header.read_text(), str(header)).kernel("tiled_scale")
    geoms = kernel_geometries(k, header)
    assert geoms and geoms[0].template_args == ["16"] and geoms[0].block == (256, 1, 1), geoms
