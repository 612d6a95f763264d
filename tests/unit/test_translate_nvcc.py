"""The CUDA-backend ports compile with nvcc inside the signature MLX's cuda_kernel generates
(mlx/backend/cuda/custom_kernel.cpp: header, then `namespace mlx::core::cu { __global__ void name(const T* in...,
T* out...) { constexpr/using template args; body } }`). Skipped where nvcc is not installed."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
ROOT = Path(__file__).resolve().parents[2]
CTYPE = {"float32": "float", "int32": "int", "uint32": "uint32_t", "float16": "__half", "bfloat16": "__nv_bfloat16",
         "int64": "int64_t", "bool": "bool"}
MLX_DEFAULT_HEADER = """#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda/std/limits>
#define inf cuda::std::numeric_limits<float>::infinity()
"""


def mlx_cuda_source(tr, cfg_template: list[tuple[str, object]], scalar_dtypes: dict[str, str]) -> str:
    """The text MLX compiles for a cuda_kernel (its build_kernel), for one set of template arguments."""
    dtypes = {i["name"]: i["dtype"] for i in tr.task_hint["inputs"]}
    dtypes.update({o["name"]: o["dtype"] for o in tr.task_hint["outputs"]})
    params = []
    for n in tr.input_names:
        dt = scalar_dtypes[n[:-4]] if n.endswith("_arg") else dtypes[n]
        params.append(f"    const {CTYPE[dt]}* {n}")
    params += [f"    {CTYPE[dtypes[n]]}* {n}" for n in tr.output_names]
    consts = "".join(f"  constexpr int {n} = {int(v)};\n" for n, v in cfg_template if isinstance(v, int))
    return (MLX_DEFAULT_HEADER + tr.cuda_header + "\nnamespace mlx::core::cu {\nnamespace cg = cooperative_groups;\n"
            f"__global__ void custom_kernel_{tr.kernel}(\n" + ",\n".join(params) + ") {\n" + consts + "\n"
            + tr.cuda_source + "\n}\n} // namespace mlx::core::cu\n")


def _port_source(path: Path, mutate=None) -> str:
    result = find_kernels(path.read_text(), str(path))
    k = result.kernels[0]
    tr = translate_kernel(result, k.name, str(path))
    if mutate:
        tr = tr.model_copy(update={"cuda_source": mutate(tr.cuda_source)})
    from ksearch_engine.translate.translator import analysis
    scalar_dtypes = {p.name: analysis.C_TO_MX.get(p.type, "float32") for p in k.params if not p.pointer}
    template = [(n, v) for n, v in tr.task_hint["template"].items()]
    # dynamic shared memory constants are Metal-only; the CUDA port keeps extern __shared__
    return mlx_cuda_source(tr, template, scalar_dtypes)


def _compile(tmp_path: Path, sources: dict[str, str]) -> subprocess.CompletedProcess:
    files = []
    for name, text in sources.items():
        f = tmp_path / f"{name}.cu"
        f.write_text(text)
        files.append(str(f))
    return subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", "-fdevice-syntax-only", "-c", *files,
                           "-o", str(tmp_path / "out.o")] if len(files) == 1 else
                          [NVCC, "-arch=sm_90", "-std=c++17", "-fdevice-syntax-only", "-c", *files],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_every_cuda_port_compiles_in_mlx_generated_signature(tmp_path):
    examples = sorted((ROOT / "examples").glob("*/*.cu"))
    # one translation unit: one nvcc start-up for all eight ports
    text = "\n".join(f"namespace port_{p.stem} {{\n}}\n" + _port_source(p).replace(
        "namespace mlx::core::cu", f"namespace mlx::core::cu::{p.stem}") for p in examples)
    proc = _compile(tmp_path, {"ports": text})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert text.count("__global__ void custom_kernel_") == len(examples)


def test_a_broken_cuda_port_does_not_compile(tmp_path):
    src = _port_source(ROOT / "examples/softmax/softmax.cu",
                       mutate=lambda s: s.replace("__syncthreads();", "threadgroup_barrier(mem_flags::mem_threadgroup);", 1))
    proc = _compile(tmp_path, {"broken": src})
    assert proc.returncode != 0 and "threadgroup_barrier" in proc.stderr
