"""Thrust on the capture's CPU runtime (sim/host_thrust.py): a program that keeps its data in thrust::device_vector,
fills it with Thrust's algorithms and launches its kernel on thrust::raw_pointer_cast pointers is captured, the
kernel's buffers being the vectors' allocations at their sizes, and port_file verifies the kernel on that workload.
What the stand-in does not provide (a header, an algorithm it declares but does not emulate, a name it lacks)
stops the capture with one line naming it.

Every program here is written for these tests."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ksearch_engine.sim.capture import capture_program
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


# x = 0, 1, ..., n-1 by thrust::sequence; the kernel writes y = 2x + 1 through raw pointers; the program checks
# thrust::reduce of y (n^2, exact in float at this n) and a host_vector copy of y, then runs a few more algorithms
# with and without execution policies and checks them too.
AFFINE = """
#include <cstdio>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/sequence.h>
#include <thrust/reduce.h>
#include <thrust/functional.h>
#include <thrust/transform.h>
#include <thrust/sort.h>
#include <thrust/scan.h>
#include <thrust/extrema.h>
#include <thrust/fill.h>
#include <thrust/copy.h>
#include <thrust/execution_policy.h>

struct halve {
  __host__ __device__ float operator()(float v) const { return 0.5f * v; }
};

__global__ void affine(const float* x, float* y, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}

int main() {
  const int n = 700;
  thrust::device_vector<float> x(n);
  thrust::sequence(x.begin(), x.end());
  thrust::device_vector<float> y(n, -1.0f);
  affine<<<(n + 127) / 128, 128>>>(thrust::raw_pointer_cast(x.data()), thrust::raw_pointer_cast(&y[0]), 2.0f, 1.0f, n);
  cudaDeviceSynchronize();
  float sum = thrust::reduce(thrust::device, y.begin(), y.end(), 0.0f, thrust::plus<float>());
  thrust::host_vector<float> h = y;
  int bad = sum == (float)n * n ? 0 : 1;
  for (int i = 0; i < n; i++) bad += h[i] != 2.0f * i + 1.0f;
  thrust::transform(y.begin(), y.end(), y.begin(), halve());
  thrust::transform(thrust::device, x.begin(), x.end(), y.begin(), x.begin(),
                    [] __host__ __device__ (float a, float b) { return b - a; });        // every x is now 0.5
  bad += thrust::reduce(x.begin(), x.end()) != 0.5f * n;
  thrust::device_vector<int> k(8);
  thrust::sequence(thrust::device, k.begin(), k.end(), 1);
  thrust::sort(k.begin(), k.end(), thrust::greater<int>());                              // 8 7 ... 1
  thrust::inclusive_scan(k.begin(), k.end(), k.begin());                                 // 8 15 ... 36
  thrust::host_vector<int> hk(k.begin(), k.end());
  thrust::exclusive_scan(thrust::host, hk.begin(), hk.end(), hk.begin(), 0);
  bad += hk[0] != 0 || hk[1] != 8 || k[7] != 36 || *thrust::max_element(k.begin(), k.end()) != 36;
  thrust::device_ptr<int> p = thrust::device_pointer_cast(thrust::raw_pointer_cast(k.data()));
  thrust::fill(p, p + 2, 5);
  std::vector<int> back(8);
  thrust::copy(k.begin(), k.end(), back.begin());
  bad += back[1] != 5 || back[2] != 21;
  printf("sum %.0f bad %d\\n", sum, bad);
  return bad ? 1 : 0;
}
"""


def test_a_thrust_program_runs_and_its_kernel_is_recorded_on_the_vectors_allocations(tmp_path):
    src = write(tmp_path, "affine.cu", AFFINE)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", (cap.error, cap.stdout_tail)
    assert "sum 490000 bad 0" in cap.stdout_tail, cap.stdout_tail
    assert cap.exit_code == 0, cap.exit_code
    (launch,) = cap.launches
    x, y = launch.args[0], launch.args[1]
    assert (x.kind, x.nbytes, x.memory, y.kind, y.nbytes) == ("buffer", 700 * 4, "device", "buffer", 700 * 4), launch
    xs = np.load(f"{cap.dir}/{x.before}").view(np.uint8).view(np.float32)[:700]
    np.testing.assert_array_equal(xs, np.arange(700, dtype=np.float32))   # thrust::sequence's values
    ys = np.load(f"{cap.dir}/{y.after}").view(np.uint8).view(np.float32)[:700]
    np.testing.assert_array_equal(ys, 2 * np.arange(700, dtype=np.float32) + 1)


def test_port_file_captures_and_verifies_the_kernel_of_a_thrust_program(tmp_path, monkeypatch):
    from ksearch_engine.portfile import port_file

    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "affine.cu", AFFINE)
    (v,) = port_file(src, write=False).kernels
    assert v.kernel == "affine"
    assert (v.status, v.workload) == ("verified", "captured"), (v.kernel, v.reason)


# What the stand-in does not provide stops the capture with one line naming it: a Thrust header it has not, an
# algorithm a provided header declares but it does not emulate (the launch before it is kept), a name it lacks.
@pytest.mark.parametrize("swap, named, kernels", [
    (("#include <thrust/fill.h>", "#include <thrust/iterator/counting_iterator.h>"),
     "thrust/iterator/counting_iterator.h", None),
    (("  thrust::device_vector<int> k(8);",
      "  thrust::device_vector<int> k(8), v(8), ko(8), vo(8);\n"
      "  auto ends = thrust::reduce_by_key(k.begin(), k.end(), v.begin(), ko.begin(), vo.begin());\n"
      "  int groups = ends.first - ko.begin();"),
     "thrust::reduce_by_key", ["affine"]),
    (("  thrust::device_vector<int> k(8);",
      "  thrust::device_vector<int> k(8);\n  thrust::merge(k.begin(), k.end(), k.begin(), k.end(), k.begin());"),
     "thrust::merge", None),
])
def test_what_the_thrust_stand_in_lacks_stops_the_capture_naming_it(tmp_path, swap, named, kernels):
    text = AFFINE.replace(*swap)
    assert text != AFFINE
    src = write(tmp_path, "affine.cu", text)
    cap = capture_program(src, timeout_s=60)
    assert cap.status != "ok" and cap.error and "\n" not in cap.error, (cap.status, cap.error)
    assert named in cap.error and "Traceback" not in cap.error, cap.error
    assert "stand-in" in cap.error and ("port its kernels by hand" in cap.error or "port the kernels" in cap.error)
    (note,) = [n for n in cap.notes if n.kind == "gpu_only"]
    needle = "#include <thrust/iterator" if named.startswith("thrust/") else named + "("
    assert named in note.message and note.line == line_of(text, needle), note
    assert cap.kernels() == (kernels or []), cap.kernels()
