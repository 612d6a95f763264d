"""Kernel-only inference: where the original races on made-up random integers (index data whose promises, such as
sorted bounds, random contents break), the integer contents are made all zero and the kernel runs once more; that
workload is taken only when the original is deterministic on it and changes something, and the verdict notes it.
Sources written here."""
from __future__ import annotations

import shutil

import pytest

from ksearch_engine.portfile import port_file
from tests.sources import write

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# one query per block: for sorted bounds exactly one thread finds the slot; random bounds make many write it
ROUTE = """
__global__ void route(const int *keys, const int *bounds, int *slot, float *val, const float *w)
{
    int b = blockIdx.x;
    int t = threadIdx.x;
    if (bounds[t] <= keys[b] && keys[b] < bounds[t + 1]) slot[b] = t;
    __syncthreads();
    if (t == 0) val[b] = w[b] * 2.0f + (float)slot[b];
}
"""

# the same search with nothing else: on zeros it changes nothing, so zeros check nothing
PICK = """
__global__ void pick(const int *keys, const int *bounds, int *slot)
{
    int b = blockIdx.x;
    int t = threadIdx.x;
    if (bounds[t] <= keys[b] && keys[b] < bounds[t + 1]) slot[b] = t;
}
"""


@needs_gxx
def test_a_kernel_racing_on_random_index_data_is_checked_on_zeros(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    r = port_file(write(tmp_path, "route.cu", ROUTE), write=False)
    k = r.kernels[0]
    assert k.status == "verified" and k.workload == "inferred", k.reason
    assert any("integers (buffers, struct fields) are all zero" in n and "raced" in n for n in k.notes), k.notes


@needs_gxx
def test_zeros_on_which_the_kernel_changes_nothing_are_not_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    r = port_file(write(tmp_path, "pick.cu", PICK), write=False)
    k = r.kernels[0]
    assert k.status != "verified" and "race" in (k.reason or ""), k.reason
