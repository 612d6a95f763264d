"""A launch whose grid and sizes come from the file's own constants (`#define ROWS (TILE * ROW_TILES)`), too big to
run on the CPU: launchsites takes it at the host-side sizes divided by a power of two, so that the grid and the
sizes passed with it agree (a clamped grid with the full sizes overruns every made-up buffer). Constants the
kernel's own device code reads are never changed. Every CUDA text here is written for these tests."""
from __future__ import annotations

from pathlib import Path

from ksearch_engine.launchsites import kernel_geometries
from ksearch_engine.source import find_kernels

# row_sums: its sizes are scalar arguments; ROW_TILES and COLS reach it only through the launch. tile_marks reads
# ROW_TILES in its own body (another kernel: it does not stop row_sums' launch from shrinking). stripe reads
# ROWS itself: its launch stays at the file's sizes.
PROGRAM = r"""
#define TILE 4
#define ROW_TILES 4096
#define COLS 512
#define ROWS (TILE * ROW_TILES)
#define THREADS 128

__global__ void row_sums(const float *m, float *out, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc = 0.0f;
    for (int j = 0; j < cols; ++j)
        acc += m[(size_t)r * cols + j];
    out[r] = acc;
}

__global__ void tile_marks(int *marks)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < ROW_TILES) marks[t] = t * TILE;
}

__global__ void stripe(float *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < ROWS) out[i] = 1.0f;
}

void run(const float *d_m, float *d_out, int *d_marks)
{
    int blocks = ROWS / THREADS;
    row_sums<<<blocks, THREADS>>>(d_m, d_out, ROWS, COLS);
    tile_marks<<<(ROW_TILES + THREADS - 1) / THREADS, THREADS>>>(d_marks);
    stripe<<<blocks, THREADS>>>(d_out);
}
"""


def _kernel(path: Path, name: str):
    return next(k for k in find_kernels(path.read_text(), str(path)).kernels if k.name == name)


def test_a_launch_too_big_by_the_files_constants_is_taken_at_smaller_host_sizes(tmp_path):
    path = tmp_path / "rows.cu"
    path.write_text(PROGRAM)
    g = kernel_geometries(_kernel(path, "row_sums"), path)[0]
    rows, cols = g.scalars["rows"], g.scalars["cols"]
    # grid and sizes agree: every row has its thread, no more
    assert g.grid[0] * g.block[0] == rows and g.grid[0] <= 64
    assert rows < 4 * 4096 and cols < 512 and rows * cols <= 4 << 20
    assert "ROW_TILES = " in g.origin and "(was 4096)" in g.origin and "rows.cu:33" in g.origin


def test_a_constant_the_kernels_device_code_reads_is_not_changed(tmp_path):
    path = tmp_path / "rows.cu"
    path.write_text(PROGRAM)
    g = kernel_geometries(_kernel(path, "stripe"), path)[0]
    assert " with " not in g.origin     # ROWS (and ROW_TILES under it) is the kernel's own: the grid is only clamped


def test_the_scaled_launch_verifies_both_ports(tmp_path):
    from ksearch_engine.portfile import port_file

    path = tmp_path / "rows.cu"
    path.write_text(PROGRAM)
    rep = port_file(path, kernels=["row_sums"], write=False, capture_timeout=20)
    v = rep.kernels[0]
    assert v.status == "verified", v.reason
    assert any("ROW_TILES = " in n for n in v.notes), v.notes
