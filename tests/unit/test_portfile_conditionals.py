"""A kernel the preprocessor leaves out as the file is built is said so, naming the condition and its line (not a
compile error of a name "not declared"); a -D the user passes reaches the kernel the ports are checked against, as
it reached the program. All CUDA written here."""
from __future__ import annotations

from ksearch_engine.portfile import port_file
from tests.sources import write

SRC = """
#define FAST_PATH
__global__ void always(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
#ifndef FAST_PATH
__global__ void slow_only(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 3.0f;
}
#endif
#ifdef FROM_A_FLAG
__global__ void flagged(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 5.0f;
}
#endif
"""


def test_a_kernel_in_a_branch_not_taken_is_named_with_its_condition(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "branches.cu", SRC)
    by = {k.kernel: k for k in port_file(src, write=False).kernels}
    assert by["always"].status == "verified"
    for name, cond in (("slow_only", "line 7: #ifndef FAST_PATH"), ("flagged", "line 13: #ifdef FROM_A_FLAG")):
        v = by[name]
        assert v.status == "not_ported" and cond in v.reason and "not compiled" in v.reason, v.reason
        assert "not declared" not in v.reason


def test_a_define_the_user_passes_reaches_the_checked_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "branches.cu", SRC)
    by = {k.kernel: k for k in port_file(src, write=False, defines={"FROM_A_FLAG": "1"}).kernels}
    assert by["flagged"].status == "verified", by["flagged"].reason
    assert by["slow_only"].status == "not_ported"
