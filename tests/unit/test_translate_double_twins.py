"""A helper overloaded per precision (`float f(float)` beside `double f(double)`) is one function once both ports
compute doubles as float: the ports keep the float overload (C++ would reject the redefinition) and the kernel
verifies. Source written here."""
from __future__ import annotations

import shutil

import pytest

from ksearch_engine.portfile import port_file
from tests.sources import write

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

SRC = """
__device__ inline float clamp_gain(float v, float g) { return v * g > 1.0f ? 1.0f : v * g; }
__device__ inline double clamp_gain(double v, double g) { return v * g > 1.0 ? 1.0 : v * g; }

__global__ void apply_gain(float *out, const float *in, float g, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = clamp_gain(in[i], g);
}
"""


@needs_gxx
def test_a_helper_overloaded_on_float_and_double_ports_once(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "gain.cu", SRC)
    r = port_file(src, write=False)
    k = r.kernels[0]
    assert k.status == "verified", k.reason
    assert any("clamp_gain' on doubles" in n for n in k.notes), k.notes
