"""Reads before the array a kernel is given (`in[i - 1]` at i = 0, as code does where its program passes `p + 1`):
a few bytes before read the buffer's zero slack, as on a made-up workload; further before, the simulator's fault
names the array and says the address is before its start, not past the end of whatever buffer lies below it. The
CUDA text is written for this test."""
from __future__ import annotations

import numpy as np

from ksearch_engine.sim import run_cuda_source

SHIFT = r"""
__global__ void shift_right(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i - BACK] + in[i];
}
"""


def test_a_read_just_before_an_arrays_start_reads_its_zero_slack():
    n = 1024   # a whole number of pages: without slack, the array would start on a page boundary
    out = run_cuda_source("#define BACK 1\n" + SHIFT, "shift_right", grid=(4, 1, 1), block=(256, 1, 1),
                          args={"in": np.ones(n, np.float32), "out": np.zeros(n, np.float32), "n": n},
                          filename="shift.cu", check_races=False)
    assert out["out"][0] == 1.0 and np.all(out["out"][1:] == 2.0)


def test_an_address_further_before_an_arrays_start_is_named_as_such():
    # where a fault lands below a buffer's mapping depends on what the system mapped there: the naming itself,
    # on real buffers of the runtime
    from ksearch_engine.sim.runtime import Buffer, describe_address

    below, arr = Buffer(4096), Buffer(4096)
    try:
        regions = [("out", below, False), ("in", arr, True)]
        msg = describe_address(arr.addr - 6000, regions)
        assert "6000 bytes before the start of 'in'" in msg, msg
        assert "past the end" not in msg
        assert "past the end of 'out'" in describe_address(below.addr + below.nbytes + 8, regions)
    finally:
        below.close()
        arr.close()
