"""A kernel that reads just before the array it is given (`in[i - 1]` at i = 0, as code does where its program
passes `p + 1`): the simulator's fault names that array and says the address is before its start, not past the end
of whatever buffer happens to lie below it. The CUDA text is written for this test."""
from __future__ import annotations

import numpy as np
import pytest

from ksearch_engine.sim import SimError, run_cuda_source

SHIFT = r"""
__global__ void shift_right(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i - 1] + in[i];
}
"""


def test_a_read_before_an_arrays_start_is_named_as_such():
    n = 1024   # a whole number of pages: the array starts on a page boundary
    with pytest.raises(SimError) as e:
        run_cuda_source(SHIFT, "shift_right", grid=(4, 1, 1), block=(256, 1, 1),
                        args={"in": np.ones(n, np.float32), "out": np.zeros(n, np.float32), "n": n},
                        filename="shift.cu", check_races=False)
    msg = str(e.value)
    assert "bytes before the start of 'in'" in msg, msg
    assert "past the end" not in msg
    assert "shift.cu" in msg and "line 5" in msg
