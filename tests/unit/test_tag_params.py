"""Empty tag parameters passed by value: `std::bool_constant<Atomic>` (named or not), `std::integral_constant<int, N>`,
`std::true_type`, an empty struct of the file. A tag carries no data: its value is its type, which the template
arguments already fix. The ports take no input for it, `launch(...)` keeps CUDA's parameter order (it takes
anything at the tag's place and ignores it), and the capture and the simulator pass the tag's one byte.

Every kernel here is small CUDA written for this test; both ports are checked against the original in the CPU
simulator."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ksearch_engine.portfile import port_file
from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel
from ksearch_engine.translate.check import check_port
from tests.sources import assert_ported

ACCUMULATE = """
#include <type_traits>
template <bool Add>
__global__ void accumulate(float* out, const float* x, int n, std::bool_constant<Add>) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if constexpr (Add) {
        out[i] += 2.0f * x[i];
    } else {
        out[i] = 2.0f * x[i];
    }
}
"""


def _check(src: str, kernel: str, args: dict, template_args: list[str], grid=(2, 1, 1), block=(64, 1, 1)):
    parsed = find_kernels(src, "t.cu")
    tr = translate_kernel(parsed, kernel, "t.cu")
    # (no launch site here: launch() takes the template arguments as given, so only the kernel's own errors count)
    tr.report = [i for i in tr.report if i.scope != "launch_config"]
    res = check_port(tr.module_text, src, kernel, {"args": args, "grid": grid, "block": block, "shared_mem": 0,
                                                    "template_args": template_args}, filename="t.cu")
    return tr, res


def test_unnamed_bool_constant_tag_is_no_input():
    tr, res = None, None
    rng = np.random.default_rng(0)
    for flag in ("true", "false"):
        args = {"out": rng.uniform(size=128).astype(np.float32), "x": rng.uniform(size=128).astype(np.float32),
                "n": 100, "": b"\0"}   # the tag's one byte, as the capture records it
        tr, res = _check(ACCUMULATE, "accumulate", args, [flag])
        assert not tr.errors, [i.message for i in tr.errors]
        assert_ported(res)
    # no MLX input stands for the tag; launch() still takes it at its place
    assert tr.launch_input_names == ["out_inout", "x_in", "n_arg"]
    assert [p["name"] for p in tr.params] == ["out", "x", "n", ""] and tr.params[-1]["tag"]
    assert "x" in tr.input_names and not any("arg" in n and n != "n_arg" for n in tr.input_names)


def test_named_tags_of_several_kinds_read_in_the_body():
    # a named std::integral_constant read through its value, a std::true_type in the middle, a file's empty struct
    # (a functor: no data, a member function) called in the body, another one never named there
    src = """
#include <type_traits>
struct Exact {};
struct PlusOne { __device__ float operator()(float v) const { return v + 1.0f; } };
template <int K>
__global__ void scale(std::integral_constant<int, K> k, float* y, std::true_type, int n, Exact e, PlusOne f) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = f(y[i] * (float)decltype(k)::value + (float)k.value);
}
"""
    y = np.arange(128, dtype=np.float32)
    tr, res = _check(src, "scale", {"k": b"\0", "y": y, "": b"\0", "n": 128, "e": b"\0", "f": b"\0"}, ["3"])
    assert not tr.errors, [i.message for i in tr.errors]
    assert tr.launch_input_names == ["y_inout", "n_arg"]
    assert [p.get("tag", False) for p in tr.params] == [True, False, True, False, True, True]
    assert_ported(res)


def _one(tmp_path: Path, name: str, text: str, kernel: str | None = None):
    f = tmp_path / name
    f.write_text(text)
    r = port_file(f, write=False)
    return next(v for v in r.kernels if kernel is None or v.kernel == kernel)


def test_captured_launches_with_tag_arguments_are_verified(tmp_path):
    # the program passes std::bool_constant<...>{} (the template argument is deduced from it); both branches run
    v = _one(tmp_path, "acc.cu", ACCUMULATE + """
#include <stdio.h>
int main() {
    const int n = 200;
    float *out, *x;
    cudaMallocManaged(&out, n * sizeof(float));
    cudaMallocManaged(&x, n * sizeof(float));
    for (int i = 0; i < n; i++) { out[i] = 1.0f; x[i] = 0.5f * i; }
    accumulate<<<(n + 63) / 64, 64>>>(out, x, n, std::bool_constant<false>{});
    accumulate<<<(n + 63) / 64, 64>>>(out, x, n, std::bool_constant<true>{});
    cudaDeviceSynchronize();
    printf("%f\\n", out[3]);
    return 0;
}
""")
    assert v.status == "verified", v.reason
    assert v.workload == "captured" and v.launches_checked == 2, v
    # the template argument the compiler deduced from each tag, recorded with the launch
    assert sorted(rec.template_args for rec, _ in v.checked) == [["false"], ["true"]]


def test_kernel_only_file_with_a_tag_is_verified_on_a_made_up_workload(tmp_path):
    # no program: the workload is made up, the tag's byte included
    v = _one(tmp_path, "acc2.cu", ACCUMULATE + """
void run(float* out, const float* x, int n) {
    accumulate<<<(n + 255) / 256, 256>>>(out, x, n, std::bool_constant<true>{});
}
""")
    assert v.status == "verified", v.reason
