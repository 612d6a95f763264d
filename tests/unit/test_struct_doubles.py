"""Structs holding doubles, by value and behind pointers: both ports compute doubles as float, so launch() hands them
each struct in the ports' layout (doubles as float) and converts written structs back; the check compares those
fields within float tolerance. A kernel-only file gets a made-up workload of such structs. Source written here."""
from __future__ import annotations

import shutil

import pytest

from ksearch_engine.portfile import port_file
from tests.sources import write

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

SRC = """
typedef struct { double scale; int rounds; } params_t;
typedef struct { int id; double mass; double vel[3]; } body_t;

__global__ void push(params_t p, const body_t *in, body_t *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    body_t b = in[i];
    double e = 0.0;
    for (int r = 0; r < p.rounds; r++)
        e += p.scale * b.mass / (r + 1.0);
    for (int d = 0; d < 3; d++)
        b.vel[d] = b.vel[d] * 0.5 + e;
    b.id = i * 2 + 1;
    out[i] = b;
}
"""


@needs_gxx
def test_structs_holding_doubles_verify_by_value_and_behind_pointers(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "bodies.cu", SRC)
    r = port_file(src, write=False)
    k = r.kernels[0]
    assert k.status == "verified", k.reason
    assert any("'out' points to body_t, which holds doubles" in n for n in k.notes), k.notes
