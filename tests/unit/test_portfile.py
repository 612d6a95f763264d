"""Porting a whole CUDA program: its main() runs on the CPU, every launch is captured, every kernel is ported
and checked against what the original left in memory; one unportable kernel never stops the others."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ksearch_engine.portfile import find_program, module_path_for, port_file

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("prog")
    shutil.copy(DATA / "multi_kernel.cu", d / "multi_kernel.cu")
    return d / "multi_kernel.cu"


@pytest.fixture(scope="module")
def report(program):
    return port_file(program, write=False)


def verdict(report, name):
    return next(k for k in report.kernels if k.kernel == name)


def test_every_launched_kernel_is_verified_on_its_captured_launches(report):
    assert report.capture.status == "ok", report.capture
    assert report.capture.launches == 3
    for name in ("axpy_inplace", "block_sum", "histogram64"):
        v = verdict(report, name)
        assert v.status == "verified", (name, v.reason)
        assert v.workload == "captured" and v.launches_checked == 1
        assert set(v.dialects) == {"metal", "cuda"} and set(v.dialects.values()) == {"passed"}


def test_a_kernel_main_never_launches_gets_a_workload_by_running_it(report):
    v = verdict(report, "scale_unused")
    assert v.status == "verified", v.reason
    assert v.workload == "inferred"


def test_an_unportable_kernel_is_named_with_its_construct_and_line_and_stops_nothing_else(report, program):
    v = verdict(report, "lane_id_ptx")
    assert v.status == "not_ported"
    asm_line = next(i for i, line in enumerate(program.read_text().splitlines(), 1) if "asm volatile" in line)
    assert "asm" in v.reason.lower() and str(asm_line) in v.reason, v.reason
    assert report.counts() == {"kernels": 5, "verified": 4, "unverified": 0, "not_ported": 1}
    text = report.text()
    assert "total: 5 kernels: 4 verified (80%)" in text and "Traceback" not in text


def test_a_wrong_port_is_caught_against_the_capture(program):
    from ksearch_engine.portcheck import check_captured
    from ksearch_engine.sim.capture import capture_program
    from ksearch_engine.source import find_kernels
    from ksearch_engine.translate import translate_kernel

    src = program.read_text()
    parsed = find_kernels(src, str(program))
    tr = translate_kernel(parsed, "axpy_inplace", str(program))
    cap = capture_program(program)
    launches = cap.launches_of("axpy_inplace")
    good = check_captured(tr.module_text, src, parsed.kernel("axpy_inplace"), program, cap, launches)
    assert good.passed, good.reason
    wrong = tr.module_text.replace("a * x[i] + y[i]", "a * x[i] + 1.01f * y[i]")
    assert wrong != tr.module_text
    bad = check_captured(wrong, src, parsed.kernel("axpy_inplace"), program, cap, launches)
    assert not bad.passed and "y" in (bad.reason or "")


def test_each_kernel_has_its_own_module(program):
    assert module_path_for(program, "block_sum", 5).name == "multi_kernel_block_sum_mlx.py"
    assert module_path_for(program, "k", 1).name == "multi_kernel_mlx.py"


def test_a_kernel_file_included_by_a_program_is_captured_through_that_program(tmp_path):
    (tmp_path / "ops_kernel.cuh").write_text(
        "__global__ void twice(const float* a, float* b, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) b[i] = 2.0f * a[i];\n}\n")
    (tmp_path / "ops.cu").write_text(
        '#include "ops_kernel.cuh"\n#include <cuda_runtime.h>\nint main() {\n  int n = 300; float *a, *b;\n'
        "  cudaMalloc(&a, n * 4); cudaMalloc(&b, n * 4); cudaMemset(a, 0, n * 4);\n"
        "  twice<<<(n + 63) / 64, 64>>>(a, b, n);\n  cudaDeviceSynchronize();\n  return 0;\n}\n")
    assert find_program(tmp_path / "ops_kernel.cuh") == tmp_path / "ops.cu"
    rep = port_file(tmp_path / "ops_kernel.cuh", write=False)
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason


def test_cli_port_all_prints_the_coverage_and_writes_one_module_per_port(program, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    shutil.copy(program, work / "multi_kernel.cu")
    r = subprocess.run([sys.executable, "-m", "ksearch_engine.cli", "port", str(work / "multi_kernel.cu"), "--all",
                        "--store", str(tmp_path / "s.db")], capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    assert "total: 5 kernels: 4 verified" in out
    written = sorted(p.name for p in work.glob("*_mlx.py"))
    assert written == ["multi_kernel_axpy_inplace_mlx.py", "multi_kernel_block_sum_mlx.py",
                       "multi_kernel_histogram64_mlx.py", "multi_kernel_scale_unused_mlx.py"]
    j = subprocess.run([sys.executable, "-m", "ksearch_engine.cli", "port", str(work / "multi_kernel.cu"), "--all",
                        "--json", "--force", "--store", str(tmp_path / "s.db")], capture_output=True, text=True,
                       timeout=900)
    done = [json.loads(line) for line in j.stdout.splitlines() if line.startswith("{")][-1]
    assert done["type"] == "done" and done["report"]["kernels"][4]["status"] == "not_ported"


def test_a_kernel_file_linked_with_a_sibling_main_is_captured_through_that_program(tmp_path):
    # main.cpp never #includes the .cu: it calls the .cu's host function, as nvcc would link the two
    (tmp_path / "scale.cu").write_text(
        "__global__ void scaleKernel(float* b, const float* a, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) b[i] = 3.0f * a[i];\n}\n"
        'extern "C" void scale(float* b, const float* a, int n) {\n'
        "  scaleKernel<<<(n + 63) / 64, 64>>>(b, a, n);\n}\n")
    (tmp_path / "main.cpp").write_text(
        "#include <cuda_runtime.h>\n"
        "static unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }\n"   # CUDA has a device umin
        'extern "C" void scale(float* b, const float* a, int n);\n'
        "int main() {\n  int n = umin(200, 300); float *a, *b;\n"
        "  cudaMalloc(&a, n * 4); cudaMalloc(&b, n * 4); cudaMemset(a, 0, n * 4);\n"
        "  scale(b, a, n);\n  cudaDeviceSynchronize();\n  return 0;\n}\n")
    (tmp_path / "other.cu").write_text("__global__ void unused(float* x) { x[0] = 1.0f; }\n")
    from ksearch_engine.portfile import find_program_and_sources
    assert find_program_and_sources(tmp_path / "scale.cu") == (tmp_path / "main.cpp", [tmp_path / "scale.cu"])
    assert find_program_and_sources(tmp_path / "other.cu") == (None, [])
    rep = port_file(tmp_path / "scale.cu", write=False)
    assert rep.capture.status == "ok", rep.capture.error
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason


def test_a_kernel_header_included_through_another_file_finds_the_main(tmp_path):
    (tmp_path / "k.cuh").write_text("__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n")
    (tmp_path / "mid.cuh").write_text('#include "k.cuh"\n')
    (tmp_path / "prog.cu").write_text('#include "mid.cuh"\nint main() { return 0; }\n')
    assert find_program(tmp_path / "k.cuh") == tmp_path / "prog.cu"


def test_program_prefix_closes_the_conditionals_left_open_at_the_include(tmp_path):
    from ksearch_engine.portfile import program_prefix
    (tmp_path / "k.cuh").write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    prog = tmp_path / "p.cu"
    prog.write_text("#define A 1\n#if A\n#ifdef B\n#endif\n/* #if 0 */\n#include \"k.cuh\"\n#endif\nint main(){}\n")
    pre = program_prefix(prog, tmp_path / "k.cuh")
    assert pre.count("#endif") == 2 and pre.rstrip().endswith("#endif")
    import subprocess
    r = subprocess.run(["g++", "-E", "-x", "c++", "-"], input=pre, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


MODES = r"""
#include <cstdlib>
#include <cstring>
__global__ void fill_one(float* o) { o[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f; }
__global__ void fill_idx(float* o) { int i = blockIdx.x * blockDim.x + threadIdx.x; o[i] = (float)i; }
int main(int argc, char** argv) {
    int which = 0;                      // -kernel=N chooses the kernel, as many sample programs do
    for (int i = 1; i < argc; ++i)
        if (strncmp(argv[i], "-kernel=", 8) == 0) which = atoi(argv[i] + 8);
    float* d;
    cudaMalloc(&d, 64 * sizeof(float));
    if (which == 0) fill_one<<<2, 32>>>(d);
    else if (which == 1) fill_idx<<<2, 32>>>(d);
    cudaDeviceSynchronize();
    return 0;
}
"""


def test_a_kernel_chosen_by_the_programs_own_option_is_captured_with_it(tmp_path, monkeypatch):
    """The bare run launches one kernel; the other is launched by re-running the program with the option it
    reads (-kernel=1), and its verdict says so."""
    src = tmp_path / "modes.cu"
    src.write_text(MODES)
    r = port_file(src, write=False)
    by = {k.kernel: k for k in r.kernels}
    if by["fill_one"].workload != "captured":
        # seen once in CI and never here (not under load, nor after the cluster tests): the bare run recorded no
        # launch. Its reasons are kept as a warning and the file is ported once more in a fresh capture cache;
        # a capture that fails twice fails the test
        first = f"capture {r.capture.status}: {r.capture.error}; notes: {by['fill_one'].notes + r.capture.notes}"
        warnings.warn(f"modes.cu: the first capture gave no launch of fill_one ({first})")
        monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache2"))
        r = port_file(src, write=False)
        by = {k.kernel: k for k in r.kernels}
    assert by["fill_one"].status == "verified" and by["fill_one"].workload == "captured", (
        by["fill_one"].reason, by["fill_one"].notes, r.capture.status, r.capture.error, r.capture.notes)
    assert by["fill_idx"].status == "verified" and by["fill_idx"].workload == "captured", by["fill_idx"].reason
    assert any("-kernel=1" in n for n in by["fill_idx"].notes)


def test_a_bool_scalar_parameter_reaches_both_ports(tmp_path):
    # `bool training` as the last argument (an RNN cell's flag): the port module passes it as MLX's bool_
    # (there is no mx.bool: the launch stopped on an AttributeError before both ports ran)
    (tmp_path / "cell.cu").write_text(
        "__global__ void cell(int n, const float* x, float* y, bool training) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) y[i] = training ? 2.0f * x[i] : x[i];\n}\n"
        "int main() {\n  int n = 100; float *x, *y;\n"
        "  cudaMalloc(&x, n * 4); cudaMalloc(&y, n * 4); cudaMemset(x, 0, n * 4);\n"
        "  cell<<<(n + 63) / 64, 64>>>(n, x, y, true);\n  cell<<<1, 128>>>(n, x, y, false);\n"
        "  cudaDeviceSynchronize();\n  return 0;\n}\n")
    rep = port_file(tmp_path / "cell.cu", write=False)
    assert rep.capture.status == "ok", rep.capture.error
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason
