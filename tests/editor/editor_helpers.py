"""Paths and small helpers shared by the real-editor tests (VS Code through code-server, Neovim)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPS = Path(os.environ.get("KSEARCH_EDITOR_DEPS", REPO / ".editor-deps"))
ARTIFACTS = REPO / "test-artifacts" / "editor"
INSTALL_HINT = "run `bash scripts/install-editor-deps.sh` first (it installs code-server, chromium, Neovim, the .vsix)"

# A small kernel for when examples/ has no softmax: one block per row, shared-memory reductions.
FALLBACK_KERNEL = """\
// Row softmax, one block per row.
#include <cuda_runtime.h>
#include <math.h>

__global__ void softmax_kernel(const float* x, float* y, int rows, int cols) {
    __shared__ float buf[256];
    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    const float* xr = x + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = tid; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    buf[tid] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] = fmaxf(buf[tid], buf[tid + s]);
        __syncthreads();
    }
    m = buf[0];
    __syncthreads();
    float sum = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) sum += expf(xr[c] - m);
    buf[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    sum = buf[0];
    for (int c = tid; c < cols; c += blockDim.x) y[(size_t)row * cols + c] = expf(xr[c] - m) / sum;
}

void softmax(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    softmax_kernel<<<rows, 256, 0, stream>>>(x, y, rows, cols);
}
"""

KERNEL = "softmax_kernel"


@dataclass(frozen=True)
class EditorTools:
    node: Path
    code_server: Path
    playwright: Path
    chromium: Path
    nvim: Path
    vsix: Path


def kernel_line(source: Path, kernel: str = KERNEL) -> int:
    """1-based line of the kernel's definition (the line holding `__global__ ... name(`)."""
    for number, line in enumerate(source.read_text().splitlines(), start=1):
        if f"{kernel}(" in line and "__global__" in line:
            return number
    raise AssertionError(f"{source} has no __global__ {kernel}(")


def walk_files(root: Path, skip_hidden: bool = False):
    """Every file under root; os.walk ignores folders that vanish while code-server or the server works."""
    for dirpath, dirnames, filenames in os.walk(root):
        if skip_hidden:
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            yield Path(dirpath) / name


def python_files(folder: Path) -> set[Path]:
    """Python files under folder, outside hidden folders such as .ksearch (os.walk ignores folders that
    vanish while the server works)."""
    return {p for p in walk_files(folder, skip_hidden=True) if p.suffix == ".py"}


def new_python_files(folder: Path, before: set[Path]) -> list[Path]:
    """Python files under folder (outside hidden folders) that were not there before."""
    return sorted(python_files(folder) - before)
