"""A #define that names a type (`#define real double`) is that type in the Metal port too: Metal has no double, so
`real` is float there, and a pointer of it takes the address of an element of the float buffer the port gets.
Source written here."""
from __future__ import annotations

import shutil

import pytest

from ksearch_engine.portfile import port_file
from tests.sources import write

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

SRC = """
#define real double

__global__ void shift(real *y, const real *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const real *p = &x[i];
        y[i] = *p + 1.0;
    }
}
"""


@needs_gxx
def test_a_macro_naming_double_is_float_in_the_metal_port(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    r = port_file(write(tmp_path, "shift.cu", SRC), write=False)
    k = r.kernels[0]
    assert k.status == "verified", k.reason
