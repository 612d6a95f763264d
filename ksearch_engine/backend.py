"""Backends: which MLX device runs candidates here, and which candidate kinds each can run.

`mlx-metal` (Apple GPU), `mlx-cuda` (NVIDIA), `mlx-cpu` (ops only), and `sim`: MLX on the CPU with custom
kernels run by our CPU simulator, which checks correctness and never yields a time.
"""
from __future__ import annotations

import functools
import re
from typing import Literal

from pydantic import BaseModel

BackendName = Literal["mlx-metal", "mlx-cuda", "mlx-cpu", "sim"]
CandidateKind = Literal["ops", "metal", "cuda", "gpu"]  # gpu: carries both a Metal and a CUDA port
BACKENDS: tuple[str, ...] = ("mlx-metal", "mlx-cuda", "mlx-cpu", "sim")

_RUNS = {
    "mlx-metal": {"ops", "metal", "gpu"},
    "mlx-cuda": {"ops", "cuda", "gpu"},
    "mlx-cpu": {"ops"},
    "sim": {"ops", "metal", "cuda", "gpu"},
}


class BackendInfo(BaseModel):
    name: str
    device: str
    mlx_version: str
    timed: bool  # whether measurements on it are real latencies


def candidate_kind(source: str) -> CandidateKind:
    """Read a candidate's kind from its text: which custom-kernel API it builds, if any."""
    metal = re.search(r"\bmetal_kernel\s*\(", source) is not None
    cuda = re.search(r"\b(precompiled_)?cuda_kernel\s*\(", source) is not None
    if metal and cuda:
        return "gpu"
    return "metal" if metal else "cuda" if cuda else "ops"


def can_run(backend: str, kind: str) -> tuple[bool, str]:
    """Whether `backend` runs a candidate of `kind`, and if not, why (for a 'not runnable here' report)."""
    if kind in _RUNS.get(backend, set()):
        return True, ""
    why = {
        "metal": "Metal kernels need an Apple GPU (mlx-metal); check it here with --backend sim, time it on a Mac",
        "gpu": "custom GPU kernels need an Apple GPU (mlx-metal) or MLX's CUDA backend (mlx-cuda); check them here with --backend sim",
        "cuda": "CUDA kernels need MLX's CUDA backend on an NVIDIA GPU (mlx-cuda); check it here with --backend sim",
    }.get(kind, f"backend {backend} cannot run {kind} candidates")
    return False, why


@functools.lru_cache(maxsize=1)
def detect() -> BackendInfo:
    """The best backend present: mlx-metal, then mlx-cuda, then mlx-cpu."""
    import mlx.core as mx

    name = "mlx-cpu"
    try:
        if mx.metal.is_available():
            name = "mlx-metal"
        elif mx.cuda.is_available():
            name = "mlx-cuda"
    except Exception:  # an MLX build without one of the modules
        pass
    return BackendInfo(name=name, device=_device_name(), mlx_version=mx.__version__, timed=True)


def info(backend: str | None) -> BackendInfo:
    """Describe a named backend (or the detected one when None)."""
    best = detect()
    if backend in (None, "auto", best.name):
        return best
    if backend == "sim":
        return BackendInfo(name="sim", device="CPU simulator", mlx_version=best.mlx_version, timed=False)
    if backend == "mlx-cpu":
        return BackendInfo(name="mlx-cpu", device=best.device if best.name == "mlx-cpu" else "CPU",
                           mlx_version=best.mlx_version, timed=True)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend '{backend}': choose one of {', '.join(BACKENDS)}")
    raise ValueError(f"backend '{backend}' is not present on this machine (found {best.name}: {best.device})")


def _device_name() -> str:
    import mlx.core as mx

    try:
        d = mx.device_info()
        return str(d.get("device_name") or d.get("architecture") or "unknown device")
    except Exception:
        return "unknown device"
