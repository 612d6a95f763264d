"""Cooperative-groups tiles of more than one warp: on a GPU a block makes them with the scratch of a __shared__
`block_tile_memory<N>` passed to `this_thread_block(scratch)`; both ports must carry that form."""
from __future__ import annotations

import numpy as np

from tests.sources import assert_ported

WIDE_TILES = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

template <unsigned int Threads, unsigned int TileSize>
__global__ void tile_sums(const float *x, float *sums, int n)
{
    __shared__ cg::block_tile_memory<Threads> scratch;
    cg::thread_block block = cg::this_thread_block(scratch);
    auto tile = cg::tiled_partition<TileSize>(block);
    int i = blockIdx.x * Threads + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    float s = cg::reduce(tile, v, cg::plus<float>());
    if (tile.thread_rank() == 0)
        sums[blockIdx.x * (Threads / TileSize) + tile.meta_group_rank()] = s;
}

"""


def test_block_tile_memory_scratch_and_tiles_wider_than_a_warp_port_to_both_backends():
    """Two 64-thread tiles per 128-thread block, each summed with cg::reduce: the Metal port declares the scratch
    (unused there) and builds the block from its thread attributes."""
    from ksearch_engine.source import find_kernels
    from ksearch_engine.translate import translate_kernel
    from ksearch_engine.translate.check import check_port

    x = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    tr = translate_kernel(find_kernels(WIDE_TILES, "t.cu"), "tile_sums", "t.cu")
    assert "block_tile_memory" in tr.module_text
    res = check_port(tr.module_text, WIDE_TILES, "tile_sums",
                     {"args": {"x": x, "sums": np.zeros(4, np.float32), "n": 250}, "grid": (2, 1, 1),
                      "block": (128, 1, 1), "shared_mem": 0, "template_args": ["128", "64"]}, filename="t.cu")
    assert_ported(res)
