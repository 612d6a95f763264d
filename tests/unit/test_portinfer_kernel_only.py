"""Kernel files run without their program (portinfer): host code in the file or its headers compiles against the
CPU CUDA runtime's host API, and template kernels no launch instantiates run at the launch sites' template
arguments or at representative ones. Every CUDA text here is written for these tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ksearch_engine.launchsites import kernel_geometries
from ksearch_engine.portinfer import infer_launch, representative_template_args
from ksearch_engine.sim import run_cuda_source
from ksearch_engine.source import find_kernels

# A header of host helpers: a timer class whose member functions call the runtime's event API, a C prototype
# block (`extern "C" {` split across `#ifdef __cplusplus`) naming a type from a header that is not here, and an
# explicit instantiation of a host template defined in the kernel file.
TIMER_HEADER = r"""
#pragma once
#include "image_io_not_here.h"
#ifdef __cplusplus
extern "C" {
#endif
extern void load_frames(FRAME **frames, int count);
extern float *device_scale(int n);
#ifdef __cplusplus
}
#endif
extern "C" int frame_count(FRAME *f);
class StopWatch {
  cudaEvent_t a, b;
public:
  void start() { cudaEventCreate(&a); cudaEventCreate(&b); cudaEventRecord(a, 0); }
  float stop() { float ms; cudaEventRecord(b, 0); cudaEventSynchronize(b); cudaEventElapsedTime(&ms, a, b);
                 return ms; }
};
"""

SCALE_FILE = r"""
#include "stopwatch.h"
__global__ void scale_rows(float *out, const float *in, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = s * in[i];
}
template <typename T>
void scale_host(T *d_out, const T *d_in, int n)
{
    StopWatch w;
    w.start();
    scale_rows<<<(n + 127) / 128, 128>>>(d_out, d_in, 2.0f, n);
    w.stop();
}
template void scale_host<float>(float *d_out, const float *d_in, int n);
"""


def test_host_code_in_headers_compiles_against_the_host_runtime_api(tmp_path):
    (tmp_path / "stopwatch.h").write_text(TIMER_HEADER)
    src = SCALE_FILE
    x = np.arange(256, dtype=np.float32)
    out = run_cuda_source(src, "scale_rows", grid=(2, 1, 1), block=(128, 1, 1),
                          args={"out": np.zeros(256, np.float32), "in": x, "s": 3.0, "n": 256},
                          filename="scale.cu", include_dirs=[str(tmp_path)], check_races=False)
    assert np.allclose(out["out"], 3.0 * x)


# A template kernel that its own file never launches (the program does), with a dynamic shared-memory helper, and
# another whose launch passes the host template's type and a block-size constant of the host function.
TEMPLATE_FILE = r"""
template <class T> struct Scratch {
    __device__ T *get() { extern __shared__ int raw[]; return (T *)raw; }
};
template <typename T, bool ACCUMULATE>
__global__ void block_sum(T *out, const T *in, int n)
{
    T *s = Scratch<T>().get();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? in[i] : T(0);
    __syncthreads();
    if (threadIdx.x == 0) {
        T acc = 0;
        for (int j = 0; j < blockDim.x; j++) acc += s[j];
        if (ACCUMULATE) out[blockIdx.x] += acc; else out[blockIdx.x] = acc;
    }
}
template <typename T, unsigned int blockSize>
__global__ void tile_copy(T *dst, const T *src, int n)
{
    int i = blockIdx.x * blockSize + threadIdx.x;
    if (threadIdx.x < blockSize && i < n) dst[i] = src[i];
}
template <class T>
void copy_all(T *d, const T *s, int n, int threads)
{
    constexpr int kWide = 512;
    dim3 grid((n + threads - 1) / threads), block(threads);
    tile_copy<T, kWide / 2><<<grid, block>>>(d, s, n);
}
template void copy_all<int>(int *d, const int *s, int n, int threads);
"""


def _kernel(text, path, name):
    return next(k for k in find_kernels(text, str(path)).kernels if k.name == name)


def test_a_template_kernel_no_launch_instantiates_runs_at_representative_arguments(tmp_path):
    path = tmp_path / "sums.cu"
    path.write_text(TEMPLATE_FILE)
    k = _kernel(TEMPLATE_FILE, path, "block_sum")
    choices = representative_template_args(k)
    assert choices[0] == ["float", "false"] and ["int", "false"] in choices
    notes: list[str] = []
    rec, args = infer_launch(TEMPLATE_FILE, k, {}, filename=path.name, geometries=[], template_choices=choices,
                             notes=notes)
    assert rec.template_args == ["float", "false"]
    assert rec.shared_mem > 0          # the helper's dynamic shared memory was found by running
    assert notes and "block_sum<float, false>" in notes[0] and "representative" in notes[0]


def test_the_launch_sites_template_arguments_stand_when_its_block_is_a_runtime_value(tmp_path):
    path = tmp_path / "sums.cu"
    path.write_text(TEMPLATE_FILE)
    k = _kernel(TEMPLATE_FILE, path, "tile_copy")
    geoms = kernel_geometries(k, path)
    assert geoms and geoms[0].template_args == ["int", "256"]
    assert geoms[0].block == (256, 1, 1)      # the block-size template parameter gives the block
    notes: list[str] = []
    rec, _ = infer_launch(TEMPLATE_FILE, k, {}, filename=path.name, geometries=geoms,
                          template_choices=representative_template_args(k), notes=notes)
    assert rec.template_args == ["int", "256"] and rec.block == (256, 1, 1)
    assert "tile_copy<int, 256>" in notes[0] and "sums.cu" in notes[0]


# A texture-object kernel and a texture-reference kernel with no program to run them: the workload makes the
# textures over made-up texels, with the addressing the host code sets up.
TEXTURE_FILE = r"""
texture<float, 1, cudaReadModeElementType> t_gain;

__global__ void warp_image(float *out, cudaTextureObject_t src, int width, int height, float shift)
{
    unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height)
        out[y * width + x] = tex2D<float>(src, (x + shift) / (float)width, (y + 0.5f) / (float)height);
}

__global__ void apply_gain(float *data, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] *= tex1Dfetch(t_gain, i);
}

void setup(cudaArray *arr)
{
    cudaResourceDesc res;
    res.resType = cudaResourceTypeArray;
    res.res.array.array = arr;
    cudaTextureDesc desc;
    desc.normalizedCoords = true;
    desc.filterMode = cudaFilterModeLinear;
    desc.addressMode[0] = cudaAddressModeWrap;
    desc.addressMode[1] = cudaAddressModeMirror;
    desc.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex;
    cudaCreateTextureObject(&tex, &res, &desc, NULL);
}
"""


def test_texture_objects_and_references_get_made_up_textures_with_the_host_codes_addressing(tmp_path):
    path = tmp_path / "warp.cu"
    path.write_text(TEXTURE_FILE)
    k = _kernel(TEXTURE_FILE, path, "warp_image")
    expected: dict = {}
    rec, args = infer_launch(TEXTURE_FILE, k, {}, filename=path.name, geometries=[], expected=expected)
    w, h = rec.grid[0] * rec.block[0], rec.grid[1] * rec.block[1]
    assert args["src"].shape == (w * h,) and (args["src__w"], args["src__h"]) == (w, h)
    # wrap x, mirror y, linear filtering, normalized coordinates (ksim_tex.h / translate.textures bits)
    assert args["src__m"] == 0 | (2 << 2) | (1 << 4) | 64 | 128
    assert "out" in expected and np.isfinite(expected["out"]).all() and expected["out"].any()

    g = _kernel(TEXTURE_FILE, path, "apply_gain")
    rec, args = infer_launch(TEXTURE_FILE, g, {}, filename=path.name, geometries=[], expected=(exp := {}))
    n = args["n"]
    assert np.allclose(exp["data"][:n], args["data"][:n] * args["t_gain"][:n])


def test_texture_kernels_without_their_program_verify(tmp_path):
    from ksearch_engine.portfile import port_file

    path = tmp_path / "warp.cu"
    path.write_text(TEXTURE_FILE)
    rep = port_file(path, write=False)
    got = {v.kernel: (v.status, v.workload) for v in rep.kernels}
    assert got == {"warp_image": ("verified", "inferred"), "apply_gain": ("verified", "inferred")}, \
        [v.reason for v in rep.kernels]


# A parameter list with a preprocessor conditional in it (the parameters it keeps are the kernel's).
IFDEF_PARAMS = r"""
#define WITH_STATS
__global__ void histogram_pass(const unsigned int *keys,
#ifdef WITH_STATS
                               unsigned int *stats,
#endif
                               unsigned int *bins, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&bins[keys[i] & 15], 1u);
#ifdef WITH_STATS
        atomicAdd(&stats[0], 1u);
#endif
    }
}
"""


def test_a_parameter_after_an_ifdef_line_keeps_its_own_type(tmp_path):
    path = tmp_path / "hist.cu"
    k = _kernel(IFDEF_PARAMS, path, "histogram_pass")
    assert [(p.name, p.type, p.pointer) for p in k.params] == [
        ("keys", "unsigned int", True), ("stats", "unsigned int", True), ("bins", "unsigned int", True),
        ("n", "int", False)]
    rec, args = infer_launch(IFDEF_PARAMS, k, {}, filename=path.name, geometries=[])
    assert args["stats"].dtype == np.uint32


# A stencil that reads one row before its tile (the program passes a pointer into its allocation), and a kernel
# whose made-up loop count (the grid's thread count) makes it run past the time limit.
STENCIL = r"""
__global__ void smooth_rows(float *out, const float *in, int cols)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float above = in[i - cols];          // the row before: the caller's pointer is one row in
    out[i] = 0.5f * (above + in[i]);
}
__global__ void relax(float *grid, int steps)
{
    __shared__ float row[128];
    row[threadIdx.x] = grid[blockIdx.x * blockDim.x + threadIdx.x];
    for (int s = 0; s < steps; s++) {
        __syncthreads();
        float left = row[(threadIdx.x + 127) % 128];
        __syncthreads();
        row[threadIdx.x] = 0.5f * (row[threadIdx.x] + left);
        for (volatile int spin = 0; spin < 1000000; spin++) {}
    }
    grid[blockIdx.x * blockDim.x + threadIdx.x] = row[threadIdx.x];
}
"""


def test_a_read_just_before_a_buffer_lands_in_its_slack(tmp_path):
    k = _kernel(STENCIL, tmp_path / "st.cu", "smooth_rows")
    rec, args = infer_launch(STENCIL, k, {}, filename="st.cu", geometries=[])
    assert args["in"].nbytes % 4096 != 0      # not whole pages: a small negative index reads the slack


def test_a_made_up_loop_count_that_runs_too_long_is_taken_small(tmp_path):
    k = _kernel(STENCIL, tmp_path / "st.cu", "relax")
    rec, args = infer_launch(STENCIL, k, {}, filename="st.cu", geometries=[], timeout_s=10.0)
    assert args["steps"] == 8


BIAS_SUM = r"""
__global__ void bias_sum(float *dbias, const float *dout, int B, int T, int OC)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o < OC) {
        float sum = 0.0f;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                sum += dout[b * T * OC + t * OC + o];
        dbias[o] = sum;
    }
}
"""


def test_made_up_sizes_whose_product_outgrows_a_buffer_are_taken_small(tmp_path):
    # B, T and OC at the grid's thread count each index B*T*OC floats (hundreds of MB): the loop counts B and T
    # are taken small and the buffers start over, so the kernel runs on a workload that fits
    k = _kernel(BIAS_SUM, tmp_path / "bias.cu", "bias_sum")
    notes: list[str] = []
    rec, args = infer_launch(BIAS_SUM, k, {}, filename="bias.cu", geometries=[], notes=notes)
    assert args["B"] == 8 and args["T"] == 8 and args["OC"] > 8, (args["B"], args["T"], args["OC"])
    assert args["dout"].size >= 8 * 8 * args["OC"]
    assert any("B, T were taken small" in n for n in notes), notes


# A kernel file that a wrapper source (no main: the program is C) #includes inside `extern "C" {`, after the
# header that defines the kernel's struct.
WRAPPER = r"""
#ifdef __cplusplus
extern "C" {
#endif
#include "nodes.h"
#include "walk_kernel.cu"
void walk_on_gpu(struct node *n, int *out) { walk<<<1, 32>>>(n, out); }
#ifdef __cplusplus
}
#endif
"""
NODES_H = "typedef struct node { int key; int next; } node;\n"
WALK_KERNEL = r"""
__global__ void walk(node *nodes, int *out)
{
    int i = threadIdx.x;
    out[i] = nodes[i].key + nodes[i].next;
}
"""


def test_a_kernel_file_included_inside_an_extern_c_block_sees_the_wrappers_types(tmp_path):
    from ksearch_engine.portcheck import file_scope
    from ksearch_engine.portfile import with_program_prefix

    (tmp_path / "wrapper.cu").write_text(WRAPPER)
    (tmp_path / "nodes.h").write_text(NODES_H)
    path = tmp_path / "walk_kernel.cu"
    path.write_text(WALK_KERNEL)
    src = with_program_prefix(path, WALK_KERNEL)
    assert "nodes.h" in src
    k = _kernel(WALK_KERNEL, path, "walk")
    pre, srcs = file_scope(src, path, [str(tmp_path)])
    rec, args = infer_launch(src, k, {}, filename=path.name, geometries=[], preamble=pre, sources=srcs,
                             include_dirs=[str(tmp_path)])
    assert args["nodes"].dtype.names == ("key", "next")


# A read far before a buffer's start faults in the guard of the buffer mapped below, at the same distance past
# that buffer's end however large it grows: no size fixes it, and the search stops at once. A sequential overrun
# faults at the end itself each time, and growing does fix it. (The simulator's answers are given here: where
# the buffers land in memory is the operating system's choice.)
LAG = r"""
__global__ void lag(const float *a, float *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = a[i];
}
"""


def _fake_sim(monkeypatch, offsets):
    import ksearch_engine.portinfer as pi
    from ksearch_engine.sim import SimError

    calls = []

    def fake(source, kernel, grid, block, args, *a, **kw):
        calls.append(args["out"].size)
        if len(calls) <= len(offsets):
            raise SimError(f"kernel 'lag' of lag.cu: memory fault (out-of-bounds access) in thread (0,0,0) of "
                           f"threadgroup (0,0,0), address 0x7f0000000000; the address is {offsets[len(calls) - 1]} "
                           f"bytes past the end of 'out' ({args['out'].nbytes} bytes)", 5, kind="fault")
        return {n: v for n, v in args.items() if hasattr(v, "shape")}
    monkeypatch.setattr(pi, "run_cuda_source", fake)
    return calls


def test_a_fault_that_does_not_move_with_the_buffers_end_stops_the_growth(tmp_path, monkeypatch):
    import pytest

    from ksearch_engine.portinfer import InferError

    k = _kernel(LAG, tmp_path / "lag.cu", "lag")
    calls = _fake_sim(monkeypatch, [1036224] * 12)
    with pytest.raises(InferError) as e:
        infer_launch(LAG, k, {}, filename="lag.cu", geometries=[])
    assert "outside every buffer" in str(e.value) and len(calls) == 2


def test_a_sequential_overrun_still_grows_the_buffer(tmp_path, monkeypatch):
    k = _kernel(LAG, tmp_path / "lag.cu", "lag")
    calls = _fake_sim(monkeypatch, [0, 0])
    rec, args = infer_launch(LAG, k, {}, filename="lag.cu", geometries=[])
    assert calls[2] == 16 * calls[0]


# Rows of a pitched image, each block writing STEPS tiles of TILE elements of one row: the grid the host wrapper
# computes (`w / (STEPS * TILE)`) is 0 at a small stand-in for `w`, and a grid clamped to one block over a row
# narrower than that block writes would make rows overlap (the blocks race on a made-up launch).
TILED_ROWS = r"""
#define TILE 16
#define STEPS 8
__global__ void rows_scale(float *dst, const float *src, int w, int h, int pitch)
{
    int x = blockIdx.x * STEPS * TILE + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    for (int i = 0; i < STEPS; i++)
        dst[y * pitch + x + i * TILE] = 2.0f * src[y * pitch + x + i * TILE];
}
void rows_host(float *d_dst, const float *d_src, int w, int h)
{
    dim3 threads(TILE, 4);
    dim3 blocks(w / (STEPS * TILE), h / 4);
    rows_scale<<<blocks, threads>>>(d_dst, d_src, w, h, w);
}
"""


def test_a_grid_of_runtime_sizes_over_wide_tiles_gets_sizes_that_fill_it(tmp_path):
    path = tmp_path / "rows.cu"
    path.write_text(TILED_ROWS)
    k = _kernel(TILED_ROWS, path, "rows_scale")
    geos = kernel_geometries(k, path)
    assert geos and geos[0].grid[0] >= 1 and geos[0].scalars["w"] >= 8 * 16 * geos[0].grid[0]
    rec, args = infer_launch(TILED_ROWS, k, {}, filename=path.name, geometries=geos)   # no race: rows apart
    assert args["pitch"] == args["w"] and args["w"] >= 128


LOCAL_PICK = r"""
__global__ void pick(int *out, const int *in, int first, int second) {
  int idx = threadIdx.x * 4;
  int v[4];
  for (int i = 0; i < 4; i++) v[i] = in[idx + i];
  int t = v[first];
  v[first] = v[second];
  v[second] = t;
  for (int i = 0; i < 4; i++) out[idx + i] = v[i];
}
"""


def test_made_up_scalars_that_index_a_local_array_stay_inside_it(tmp_path):
    # no program launches it: `first`/`second` are made up, and as subscripts of the 4-element local array they
    # are taken below 4 (at the grid's size they ran off the thread's stack)
    k = _kernel(LOCAL_PICK, tmp_path / "pick.cu", "pick")
    rec, args = infer_launch(LOCAL_PICK, k, {}, filename="pick.cu", geometries=[])
    assert 0 <= args["first"] < 4 and 0 <= args["second"] < 4


RATIO = r"""
__global__ void ratio(const int *num, const int *den, int *q, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) q[i] = num[i] / den[i];
}
"""


def test_made_up_integer_divisors_are_not_zero(tmp_path):
    # random integers from 0 made a divisor zero (the simulator traps it): the integer buffers are made again
    # without zeros, and the run says so
    k = _kernel(RATIO, tmp_path / "ratio.cu", "ratio")
    notes: list[str] = []
    rec, args = infer_launch(RATIO, k, {}, filename="ratio.cu", geometries=[], notes=notes)
    assert (args["den"] != 0).all() and args["den"].size >= 256
    assert any("without zeros" in n for n in notes), notes
