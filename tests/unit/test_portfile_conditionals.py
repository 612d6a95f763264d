"""A kernel the preprocessor leaves out as the file is built is said so, naming the condition and its line (not a
compile error of a name "not declared"); a -D the user passes reaches the kernel the ports are checked against, as
it reached the program. All CUDA written here."""
from __future__ import annotations

from ksearch_engine.portfile import port_file
from tests.sources import write

SRC = """
#include "params.h"
#ifdef FROM_PARAMS
__global__ void in_params(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] - 1.0f;
}
#endif
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
    write(tmp_path, "params.h", "#define FROM_PARAMS 1\n")
    src = write(tmp_path, "branches.cu", SRC)
    by = {k.kernel: k for k in port_file(src, write=False).kernels}
    assert by["always"].status == "verified"
    assert by["in_params"].status == "verified", by["in_params"].reason   # its macro comes from a local header
    v = by["slow_only"]
    assert v.status == "not_ported" and "line 14: #ifndef FAST_PATH" in v.reason and "not compiled" in v.reason, v.reason
    assert "not declared" not in v.reason
    # FROM_A_FLAG is defined nowhere in sight: as built without -D flags the kernel is compiled out, and the reason
    # says that nothing here defines it (a -D flag or a header not read here could): it was a compile error before
    v = by["flagged"]
    assert v.status == "not_ported" and "line 20: #ifdef FROM_A_FLAG, and nothing here defines FROM_A_FLAG" \
        in v.reason and "-D NAME=VALUE" in v.reason and "not declared" not in v.reason, v.reason


def test_a_define_the_user_passes_reaches_the_checked_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    write(tmp_path, "params.h", "#define FROM_PARAMS 1\n")
    src = write(tmp_path, "branches.cu", SRC)
    by = {k.kernel: k for k in port_file(src, write=False, defines={"FROM_A_FLAG": "1"}).kernels}
    assert by["flagged"].status == "verified", by["flagged"].reason
    assert by["slow_only"].status == "not_ported"
