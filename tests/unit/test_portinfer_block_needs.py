"""Kernel-only inference: a kernel that states the block it needs (`assert(blockDim.x == THREADS)`, a rejecting
`if (...) return;` or `__trap()`, in the kernel or a helper it calls, over defines, constexprs and template arguments)
runs on a made-up block that meets those checks (blockneeds), not on one its own check rejects; a block-size
template parameter with no value anywhere takes one the kernel's `static_assert`s accept. Kernels written here."""
from pathlib import Path

from ksearch_engine.blockneeds import block_needs, fit_block
from ksearch_engine.launchsites import kernel_geometries
from ksearch_engine.portinfer import infer_launch, representative_template_args
from ksearch_engine.source import find_kernels

ASSERTED = """#include <cassert>
#define LANES 48
__global__ void shift_lanes(float *out, const float *in, int n)
{
    // one block of LANES threads per row
    assert(blockDim.x == LANES && "rows are LANES wide");
    int i = blockIdx.x * LANES + threadIdx.x;
    if (i < n) out[i] = in[blockIdx.x * LANES + (threadIdx.x + 1) % LANES];
}
"""

REJECTING = """
constexpr int kRows = 4;
template <int R> __device__ void need_rows(void)
{
    if (blockDim.y != R) { printf("need %d rows\\n", R); __trap(); }
    if (blockDim.x > 512) return;      // a helper's return: not a check on the kernel's block
}
__global__ void row_pairs(float *out, const float *in, int n)
{
    need_rows<kRows>();
    if (blockDim.x * blockDim.y != 256 || n < 0) return;
    if (threadIdx.x >= blockDim.x / 2) return;  // (names the thread: not a check on the block)
    int r = blockIdx.x * kRows + threadIdx.y;
    out[r * 64 + threadIdx.x] = in[r * 64 + 2 * threadIdx.x] + in[r * 64 + 2 * threadIdx.x + 1];
}
"""

BOUNDED = """#include <cstdio>
__global__ void __launch_bounds__(256) pick96(float *dst, const float *src, const int *idx)
{
    if (blockDim.x % 96 != 0)
        __trap();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    dst[i] = src[idx[i] & 63];
}
"""

TEMPLATED = """#include <cassert>
template <int BLOCK_THREADS>
__global__ void segment_total(const float *in, float *out)
{
    static_assert(BLOCK_THREADS >= 256 && BLOCK_THREADS % 64 == 0, "whole warps, at least 256");
    assert(blockDim.x == BLOCK_THREADS);
    __shared__ float part[BLOCK_THREADS];
    part[threadIdx.x] = in[blockIdx.x * BLOCK_THREADS + threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < BLOCK_THREADS; ++i) s += part[i];
        out[blockIdx.x] = s;
    }
}
"""


def _kernel(text, path, name):
    return find_kernels(text, str(path)).kernel(name)


def test_an_asserted_block_width_from_a_define_makes_the_kernel_verify_and_the_note_names_the_line(tmp_path: Path):
    from ksearch_engine.portfile import port_file

    path = tmp_path / "lanes.cu"
    path.write_text(ASSERTED)
    rep = port_file(path, write=False)
    (v,) = rep.kernels
    assert (v.status, v.workload) == ("verified", "inferred"), v.reason
    assert any("(48, 1, 1)" in n and "lanes.cu line 6" in n for n in v.notes), v.notes


def test_checks_of_the_kernel_and_a_trapping_helper_give_a_2d_block(tmp_path: Path):
    path = tmp_path / "rows.cu"
    path.write_text(REJECTING)
    k = _kernel(REJECTING, path, "row_pairs")
    needs = block_needs(k, REJECTING, {}, filename=path.name)
    # understood: the product (the `n < 0` beside it names a parameter) and the helper's trap at its template
    # argument; left out: the thread's own test and the helper's return
    assert sorted((n.text, n.line) for n in needs) == [
        ("if (blockDim.x * blockDim.y != 256) return;", 11), ("if (blockDim.y != R) __trap();", 5)]
    notes: list[str] = []
    rec, _ = infer_launch(REJECTING, k, {}, filename=path.name, geometries=[], notes=notes)
    assert rec.block == (64, 4, 1)       # the made-up 16 x 16 block, moved as little as meets both
    assert notes and "rows.cu line 5" in notes[0] and "rows.cu line 11" in notes[0]


def test_a_launch_bounds_block_the_kernels_trap_rejects_is_left_out(tmp_path: Path):
    path = tmp_path / "pick.cu"
    path.write_text(BOUNDED)
    k = _kernel(BOUNDED, path, "pick96")
    geoms = kernel_geometries(k, path)
    assert geoms and geoms[0].block == (256, 1, 1)      # __launch_bounds__(256)
    rec, args = infer_launch(BOUNDED, k, {}, filename=path.name, geometries=geoms)
    assert rec.block == (96, 1, 1)
    assert fit_block((128, 1, 1), block_needs(k, BOUNDED, {}, filename=path.name)) == (96, 1, 1)


def test_a_block_size_template_parameter_takes_a_value_its_static_assert_accepts(tmp_path: Path):
    from ksearch_engine.portfile import port_file

    path = tmp_path / "total.cu"
    path.write_text(TEMPLATED)
    k = _kernel(TEMPLATED, path, "segment_total")
    assert representative_template_args(k) == [["256"]]
    rep = port_file(path, write=False)
    (v,) = rep.kernels
    assert (v.status, v.workload) == ("verified", "inferred"), v.reason
    assert any("segment_total<256>" in n for n in v.notes), v.notes


def test_a_check_on_a_runtime_value_leaves_the_made_up_block_as_it_was():
    src = "__global__ void k(float *o, int w) { assert(blockDim.x == w); o[threadIdx.x] = 1.0f; }"
    k = find_kernels(src, "t.cu").kernel("k")
    needs = block_needs(k, src, {}, filename="t.cu")
    assert needs == [] and fit_block((128, 1, 1), needs) == (128, 1, 1)
