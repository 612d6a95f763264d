"""Pointer arguments inside their allocations (`halo<<<...>>>(d_in + R, ...)`), read at negative indices (a stencil's
halo): the capture records the allocation's elements before the pointer (ArgRecord.head), and the check gives the
ports the whole allocation sliced at the pointer (`x[R:]`, as an MLX user passes it; MLX hands the kernel a pointer
inside the same buffer), so `in[i - 2]` reads the halo as on a GPU. A read before the allocation's own start still
faults and names the file and line. The CUDA text is written for this test."""
from __future__ import annotations

import numpy as np
import pytest

from ksearch_engine.portfile import port_file
from ksearch_engine.sim import SimError, run_cuda_source

PROGRAM = r"""
#include <cstdio>
__global__ void halo(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i - 2] + in[i] + in[i + 2];
}
__global__ void before_alloc(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i - 3] + in[i];
}
__global__ void forward_only(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i] + in[i + 1];
}
int main() {
  const int n = 256, R = 2;
  float h[n + 2 * R];
  for (int i = 0; i < n + 2 * R; i++) h[i] = 0.5f * i + 1.0f;
  float *d_in, *d_out;
  cudaMalloc(&d_in, (n + 2 * R) * sizeof(float));
  cudaMalloc(&d_out, n * sizeof(float));
  cudaMemcpy(d_in, h, (n + 2 * R) * sizeof(float), cudaMemcpyHostToDevice);
  halo<<<n / 64, 64>>>(d_in + R, d_out, n);
  before_alloc<<<n / 64, 64>>>(d_in + R, d_out, n);
  forward_only<<<n / 64, 64>>>(d_in + R, d_out, n);
  float o[n];
  cudaMemcpy(o, d_out, n * sizeof(float), cudaMemcpyDeviceToHost);
  printf("%f %f\n", o[0], o[n - 1]);
  return 0;
}
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("interior")
    (d / "stencil.cu").write_text(PROGRAM)
    return port_file(d / "stencil.cu", write=False)


def verdict(report, name):
    return next(k for k in report.kernels if k.kernel == name)


def test_a_halo_read_before_an_interior_pointer_verifies_on_the_captured_launch(report):
    assert report.capture.status == "ok", report.capture
    v = verdict(report, "halo")
    assert v.status == "verified", v.reason
    assert v.workload == "captured" and v.launches_checked == 1
    assert v.dialects == {"metal": "passed", "cuda": "passed"}


def test_a_read_before_the_allocations_start_is_an_out_of_bounds_fault_naming_file_and_line(report):
    v = verdict(report, "before_alloc")
    assert v.status != "verified"
    line = next(i for i, t in enumerate(PROGRAM.splitlines(), 1) if "in[i - 3]" in t)
    assert "fault" in v.reason and "before the start of the allocation 'in' points into" in v.reason, v.reason
    assert "stencil.cu" in v.reason and f"line {line}" in v.reason, v.reason


def test_an_interior_pointer_read_only_forward_verifies_as_before(report):
    v = verdict(report, "forward_only")
    assert v.status == "verified", v.reason
    assert v.dialects == {"metal": "passed", "cuda": "passed"}


def test_the_capture_records_the_allocation_before_an_interior_pointer(tmp_path):
    from ksearch_engine.sim.capture import capture_program

    (tmp_path / "stencil.cu").write_text(PROGRAM)
    cap = capture_program(tmp_path / "stencil.cu", workdir=str(tmp_path / "cap"))
    rec = cap.launches_of("halo")[0]
    a_in, a_out = rec.args[0], rec.args[1]
    assert a_in.offset_bytes == 8 and a_in.head and a_in.head_after is None
    h = 0.5 * np.arange(260, dtype=np.float32) + 1.0
    assert np.array_equal(cap.load(a_in.head), h[:2]) and np.array_equal(cap.load(a_in.before), h[2:])
    assert a_out.offset_bytes == 0 and a_out.head is None   # pointers at their allocation's start: as before


def test_the_simulator_reads_an_allocation_before_the_pointer_and_faults_before_its_start():
    h = (0.5 * np.arange(260) + 1.0).astype(np.float32)
    args = {"in": h[2:].copy(), "out": np.zeros(256, np.float32), "n": 256}
    out = run_cuda_source(PROGRAM, "halo", (4, 1, 1), (64, 1, 1), dict(args), heads={"in": h[:2]},
                          filename="stencil.cu", check_races=False)
    assert np.array_equal(out["out"], h[:-4] + h[2:-2] + h[4:])
    assert out["in"].shape == (258,)   # results hold each buffer from its pointer on
    with pytest.raises(SimError) as e:
        run_cuda_source(PROGRAM, "before_alloc", (4, 1, 1), (64, 1, 1), dict(args), heads={"in": h[:2]},
                        filename="stencil.cu", check_races=False)
    line = next(i for i, t in enumerate(PROGRAM.splitlines(), 1) if "in[i - 3]" in t)
    assert e.value.kind == "fault" and e.value.line == line
    assert "4 bytes before the start of the allocation 'in' points into" in str(e.value)


def test_two_arguments_into_one_allocation_where_the_lower_one_writes_still_verify(tmp_path):
    # `k(d, d + n)`: the second pointer's head is the first's region, which the kernel writes through the first;
    # those writes are compared there, so the launch stays checkable (it was refused as writes before a pointer)
    (tmp_path / "two.cu").write_text(
        "__global__ void halves(float* lo, const float* hi, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) lo[i] = lo[i] + hi[i];\n}\n"
        "int main() {\n  const int n = 128; float h[2 * n], *d;\n  for (int i = 0; i < 2 * n; i++) h[i] = i;\n"
        "  cudaMalloc(&d, sizeof h); cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);\n"
        "  halves<<<2, 64>>>(d, d + n, n);\n  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);\n  return 0;\n}\n")
    (v,) = port_file(tmp_path / "two.cu", write=False).kernels
    assert v.status == "verified" and v.workload == "captured", v.reason


def test_a_halo_read_through_a_pointer_not_declared_const_verifies(tmp_path):
    # `float *in` (not const) that the kernel only reads: launch() passes it as given, so the slice x[R:] keeps the
    # halo before it (a copy, as for a buffer the kernel writes, would start at the pointer), and hands it back
    src = PROGRAM.replace("__global__ void halo(const float *in", "__global__ void halo(float *in")
    (tmp_path / "nc.cu").write_text(src)
    got = {v.kernel: v for v in port_file(tmp_path / "nc.cu", write=False).kernels}
    assert got["halo"].status == "verified" and got["halo"].workload == "captured", got["halo"].reason
    assert "'stored': False" in got["halo"].module_text
