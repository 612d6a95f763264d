"""A kernel that reads lengths as differences of an integer buffer (`len = limits[b + 1] - limits[b]`, as merges,
CSR row pointers and segment tables do): random made-up contents make negative lengths that send it outside every
buffer; portinfer then makes its integer buffers as non-decreasing offsets from 0, and the ports verify on that.
The CUDA text is written for this test."""
from __future__ import annotations

from ksearch_engine.portfile import port_file

SEGMENTS = r"""
__global__ void reverse_segments(const unsigned int *limits, const float *src, float *dst)
{
    unsigned int start = limits[blockIdx.x];
    unsigned int len = limits[blockIdx.x + 1] - start;
    for (unsigned int i = threadIdx.x; i < len; i += blockDim.x)
        dst[start + len - 1 - i] = src[start + i];
}

void reverse_all(const unsigned int *d_limits, const float *d_src, float *d_dst, int segments)
{
    reverse_segments<<<segments, 64>>>(d_limits, d_src, d_dst);
}
"""


def test_integer_buffers_read_as_limits_are_made_up_as_offsets(tmp_path):
    path = tmp_path / "segments.cu"
    path.write_text(SEGMENTS)
    v = port_file(path, write=False).kernels[0]
    assert v.status == "verified", v.reason
    assert v.workload == "inferred"
    assert any("limits" in n and "non-decreasing offsets" in n for n in v.notes), v.notes
