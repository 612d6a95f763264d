"""Kernel-only inference where made-up scalars bound loops over a fixed-size `__constant__` table the program fills
(`c_mask[r * width + c]`, r < rows, c < width, the table 9 x 9): the scalars are lowered until the subscript stays
in the table (portinfer._coupled_scalars), the table gets made-up contents that both ports and the original read
(launch() symbols), and a size written `[A * B]` is an array, not a pointer (translate/symbols.py). Kernel written
here."""
from pathlib import Path

from ksearch_engine.portcheck import check_inferred
from ksearch_engine.portinfer import _coupled_scalars
from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel

SRC = """
#define MASK_SIDE (4 * 2 + 1)
__constant__ float c_mask[MASK_SIDE * MASK_SIDE];

__global__ void masked_max(int w, int h, int rows, int width, const float *img, float *out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= w * h) return;
    int px = t % w, py = t / w;
    float best = 0.0f;
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < width; c++) {
            int y = py + r - rows / 2, x = px + c - width / 2;
            if (y >= 0 && y < h && x >= 0 && x < w && c_mask[r * width + c] > 0.5f)
                best = fmaxf(best, img[y * w + x]);
        }
    }
    out[t] = best;
}
"""


def test_scalars_bounding_a_loop_over_a_fixed_table_are_lowered_until_its_subscript_fits():
    k = find_kernels(SRC, "t.cu").kernel("masked_max")
    got = _coupled_scalars(SRC, k, {"w": 256, "h": 256, "rows": 256, "width": 256}, {})
    assert got["w"] == 256 and got["h"] == 256
    assert got["rows"] * got["width"] <= 81 and got["rows"] == got["width"] == 8


def test_a_kernel_reading_a_filled_constant_table_verifies_on_a_made_up_workload(tmp_path: Path):
    path = tmp_path / "mask.cu"
    path.write_text(SRC)
    parsed = find_kernels(SRC, str(path))
    k = parsed.kernel("masked_max")
    tr = translate_kernel(parsed, "masked_max", str(path))
    assert "c_mask" in tr.module_text and "ks_sym_c_mask" in tr.module_text
    res = check_inferred(tr.module_text, SRC, k, path, {})
    assert res.passed, res.reason
    args = res.checked[0][1]
    assert args["c_mask"].size == 81 and args["c_mask"].any()     # made-up contents, not zeros


def test_a_fault_sentence_about_another_allocation_does_not_stop_a_buffer_from_growing(monkeypatch):
    """A fault message may say how far past two things the address is (the buffer, and an allocation of the host
    runtime): growth is judged by the buffer's own distance, so a row-per-thread overrun that faults right at the
    end each time keeps growing instead of being called 'outside every buffer'."""
    import numpy as np

    from ksearch_engine import portinfer
    from ksearch_engine.sim.errors import SimError

    src = """
__global__ void rows(float *out, const float *inp, int N, int C) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < N) { const float *x = inp + r * C; out[r] = x[C - 1]; }
}"""
    k = find_kernels(src, "t.cu").kernel("rows")
    calls = []

    def fake_run(source, name, grid, block, args, *a, **kw):
        calls.append(args["inp"].size)
        if len(calls) < 3:
            raise SimError("kernel 'rows': memory fault; the address is 4096 bytes past the end of allocation #3 "
                           "(64 bytes); the address is 0 bytes past the end of 'inp' (1024 bytes)", kind="fault")
        return {"out": np.zeros_like(args["out"])}

    monkeypatch.setattr(portinfer, "run_cuda_source", fake_run)
    rec, args = portinfer.infer_launch(src, k, {}, filename="t.cu")
    assert len(calls) == 3 and calls[2] == 16 * calls[0]


VEC_SRC = """
__constant__ float3 c_axis[2];

__global__ void project(int n, const float *xyz, float *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float3 p = make_float3(xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]);
    out[2 * i] = p.x * c_axis[0].x + p.y * c_axis[0].y + p.z * c_axis[0].z;
    out[2 * i + 1] = p.x * c_axis[1].x + p.y * c_axis[1].y + p.z * c_axis[1].z;
}
"""


def test_a_constant_table_of_vector_elements_gets_made_up_contents_of_its_own_size(tmp_path: Path):
    """`__constant__ float3 c_axis[2]` holds 6 floats (24 bytes): the made-up table is that size, not 3x it."""
    path = tmp_path / "axis.cu"
    path.write_text(VEC_SRC)
    parsed = find_kernels(VEC_SRC, str(path))
    tr = translate_kernel(parsed, "project", str(path))
    res = check_inferred(tr.module_text, VEC_SRC, parsed.kernel("project"), path, {})
    assert res.passed, res.reason
    assert res.checked[0][1]["c_axis"].size == 6 and res.checked[0][1]["c_axis"].any()
