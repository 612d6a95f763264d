"""Issue 13: a kernel whose template parameter is a function (`template <step_fn f> __global__ ...`, with
`using step_fn = float (*)(float);`) is ported for the device function its launch passes (the port calls it
directly: Metal has no function pointers); one that no launch instantiates is refused with a message naming the
parameter and its line, and the file's other kernels still port and verify. Written here."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file

SOURCE = """
    using step_fn = float (*)(float);
    __device__ float twice(float v) { return 2.0f * v; }
    template <step_fn f>
    __global__ void apply(float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] = f(x[i]);
    }
    __global__ void add_one(float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] += 1.0f;
    }
    void run(float* x, int n) {
        apply<twice><<<(n + 127) / 128, 128>>>(x, n);
        add_one<<<(n + 127) / 128, 128>>>(x, n);
    }
"""


def test_a_function_template_parameter_is_ported_for_the_launchs_function_or_refused_by_name(tmp_path: Path):
    src = tmp_path / "fn.cu"
    src.write_text(textwrap.dedent(SOURCE).lstrip())
    got = {v.kernel: v for v in port_file(src, write=False).kernels}
    assert got["apply"].status == "verified", got["apply"].reason
    assert "twice(" in got["apply"].module_text and "f(x[i])" not in got["apply"].module_text
    assert got["add_one"].status == "verified", got["add_one"].reason
    # no launch says which function: refused, naming the parameter and the line
    alone = tmp_path / "alone.cu"
    alone.write_text(textwrap.dedent(SOURCE.split("    void run(")[0]).lstrip())
    got = {v.kernel: v for v in port_file(alone, write=False).kernels}
    assert got["apply"].status == "not_ported"
    assert "template parameter 'f' is a function (step_fn)" in got["apply"].reason
    assert got["apply"].reason.startswith("line 3:"), got["apply"].reason
    assert got["add_one"].status == "verified", got["add_one"].reason
