"""Porting a whole CUDA program: its main() runs on the CPU, every launch is captured, every kernel is ported
and checked against what the original left in memory; one unportable kernel never stops the others."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
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


def test_a_run_for_one_kernel_names_the_files_other_kernels_and_how_to_port_them(tmp_path):
    """`ksearch port FILE` ports the first kernel: the report must not read as if the file had only that one."""
    f = tmp_path / "two.cu"
    f.write_text("__global__ void first(float* a, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < n) a[i] += 1.0f;\n}\n\n__global__ void second(float* a, int n) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) a[i] *= 2.0f;\n}\n")
    rep = port_file(f, kernels=["first"], write=False)
    assert [k.kernel for k in rep.kernels] == ["first"]
    assert rep.others == ["second (line 6)"]
    assert "not ported in this run: second (line 6); `ksearch port two.cu --all`" in rep.text()
    assert port_file(f, write=False).others == []


def test_a_program_whose_kernels_are_in_its_included_files_names_those_files(tmp_path):
    """Rodinia's main.cu #includes its kernel files: porting main.cu says where the kernels are, not only 'none'."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "k.cuh").write_text("__global__ void scale(float* a, int n) { a[0] *= 2.0f; }\n")
    (tmp_path / "step.cu").write_text('#include "inc/k.cuh"\n__global__ void step(float* a) { a[1] += 1.0f; }\n')
    (tmp_path / "main.cu").write_text('#include <stdio.h>\n#include "step.cu"\nint main() { return 0; }\n')
    rep = port_file(tmp_path / "main.cu", write=False)
    assert not rep.kernels
    assert "its CUDA kernels are in the files it includes: step.cu (step); k.cuh (scale)" in rep.error
    assert "program: none" not in rep.text()      # no program was looked for: say nothing about one


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
    assert "not ported in this run" not in out           # --all: nothing left out
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


def test_kernels_launched_through_a_pointer_table_read_constants_declared_together(tmp_path):
    # a blog-style stencil driver: the kernels sit in a table of function pointers launched as
    # `fp[i]<<<g, b>>>(...)`, and their coefficients are `__constant__ float c_a, c_b;` filled by
    # cudaMemcpyToSymbol. The capture names each launch by the kernel the pointer holds, and both ports get every
    # constant of the shared declaration (they read only the last one, and the others as zeros, before).
    (tmp_path / "stencil.cu").write_text(
        "#include <cstdio>\n"
        "__constant__ float c_a, c_b;\n__constant__ float c_c;\n"
        "__global__ void diff1(const float* f, float* df) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  df[i] = c_a * f[i] + c_b * f[(i + 1) % 128];\n}\n"
        "__global__ void diff2(const float* f, float* df) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  df[i] = c_b * f[i] - c_a * f[(i + 127) % 128] + c_c;\n}\n"
        "int main() {\n  float h[128], *f, *df;\n"
        "  for (int i = 0; i < 128; i++) h[i] = 0.25f * i;\n"
        "  cudaMalloc(&f, sizeof h); cudaMalloc(&df, sizeof h);\n"
        "  cudaMemcpy(f, h, sizeof h, cudaMemcpyHostToDevice);\n"
        "  float a = 1.5f, b = -0.5f, c = 2.0f;\n"
        "  cudaMemcpyToSymbol(c_a, &a, sizeof a); cudaMemcpyToSymbol(c_b, &b, sizeof b);\n"
        "  cudaMemcpyToSymbol(c_c, &c, sizeof c);\n"
        "  void (*fp[2])(const float*, float*) = {diff1, diff2};\n"
        "  for (int k = 0; k < 2; k++) fp[k]<<<2, 64>>>(f, df);\n"
        "  cudaMemcpy(h, df, sizeof h, cudaMemcpyDeviceToHost);\n  printf(\"%f\\n\", h[3]);\n  return 0;\n}\n")
    rep = port_file(tmp_path / "stencil.cu", write=False)
    assert rep.capture.status == "ok", rep.capture.error
    assert rep.capture.launches == 2
    assert {v.kernel: (v.status, v.workload) for v in rep.kernels} == \
        {"diff1": ("verified", "captured"), "diff2": ("verified", "captured")}, [v.reason for v in rep.kernels]


def test_a_kernel_templated_on_an_enum_is_checked_at_the_enumerator_its_launch_names(tmp_path):
    # `template <access_t M>` launched only as `bench<WRITE>` in a branch the program's run does not take: the
    # made-up workload instantiates it with the enumerator the launch writes (an int does not convert to an enum),
    # and the port module takes the enumerator by name (ENUMERATORS)
    (tmp_path / "modes.cu").write_text(
        "enum access_t { READ = 0, WRITE };\n"
        "template <access_t M>\n__global__ void bench(size_t n, float* x) {\n"
        "  size_t i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) { if (M == READ) x[i] += 1.0f; else x[i] = 2.0f * i; }\n}\n"
        "int main(int argc, char** argv) {\n  size_t n = 256; float* x;\n"
        "  cudaMalloc(&x, n * 4); cudaMemset(x, 0, n * 4);\n"
        "  if (argc > 5) bench<WRITE><<<(n + 127) / 128, 128>>>(n, x);\n"
        "  cudaDeviceSynchronize();\n  return 0;\n}\n")
    rep = port_file(tmp_path / "modes.cu", write=False)
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "inferred", v.reason
    assert "bench<WRITE>" in " ".join(v.notes), v.notes


def test_a_functor_passed_by_value_to_a_template_kernel_is_deduced_from_the_capture(tmp_path):
    # `apply<128><<<...>>>(op, ...)` inside `template <class Op> void run(Op op, ...)`: Op is deduced from the
    # argument (Put, whose double both ports take as float, then Shift), the launch names only BS; the functors' member functions carry a macro of
    # CUDA qualifiers (`#define HD __host__ __device__`). Each instantiation is checked on its captured launch.
    (tmp_path / "functor.cu").write_text(
        "#include <cstdio>\n#define HD __host__ __device__\n"
        "struct Scale { float s; HD float operator()(float x) const { return s * x; } };\n"
        "struct Shift { float b; int k; HD float operator()(float x) const { return x + b * k; } };\n"
        "struct Put { double K; HD double operator()(double s) const { return s < K ? K - s : 0.0; } };\n"
        "template <int BS, class Op>\n__global__ void apply(Op op, const float* x, float* y, int n) {\n"
        "  int i = blockIdx.x * BS + threadIdx.x;\n  if (i < n) y[i] = op(x[i]);\n}\n"
        "template <class Op> void run(Op op, const float* x, float* y, int n) {\n"
        "  apply<128><<<(n + 127) / 128, 128>>>(op, x, y, n);\n}\n"
        "int main() {\n  const int n = 300; float h[n], *x, *y;\n"
        "  for (int i = 0; i < n; i++) h[i] = 0.5f * i;\n"
        "  cudaMalloc(&x, sizeof h); cudaMalloc(&y, sizeof h);\n"
        "  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);\n"
        "  run(Put{40.0}, x, y, n);\n  run(Shift{1.5f, 3}, x, y, n);\n"
        "  cudaDeviceSynchronize();\n  return 0;\n}\n")
    rep = port_file(tmp_path / "functor.cu", write=False)
    assert rep.capture.status == "ok" and rep.capture.launches == 2, rep.capture.error
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured" and v.launches_checked == 2, v.reason


def test_legacy_warp_votes_and_cuda_math_library_calls_capture_and_port(tmp_path):
    # pre-CUDA 9 warp intrinsics (__shfl_down, __any, __all, __ballot) in a kernel, a double-rounding intrinsic
    # (__drcp_rn) and CUDA's normcdf in host and device code: the program runs on the capture's runtime (they were
    # undeclared there) and both ports verify (Metal had no rule for __ballot)
    (tmp_path / "vote.cu").write_text(
        "#include <cstdio>\n"
        "__global__ void vote(const int* x, float* out) {\n  int v = x[threadIdx.x];\n  int s = v;\n"
        "  for (int o = 16; o > 0; o /= 2) s += __shfl_down(s, o);\n"
        "  if (threadIdx.x == 0) { out[0] = s; out[1] = __any(v > 30); out[2] = __all(v >= 0);\n"
        "    out[3] = (float)__ballot(v & 1); out[4] = (float)__drcp_rn((double)(s + 1)); out[5] = normcdff(0.5f); }\n}\n"
        "int main() {\n  int h[32]; for (int i = 0; i < 32; i++) h[i] = i;\n"
        "  if (normcdf(0.0) != 0.5) return 1;\n"
        "  int* x; float* o; cudaMalloc(&x, sizeof h); cudaMalloc(&o, 6 * sizeof(float));\n"
        "  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);\n  vote<<<1, 32>>>(x, o);\n"
        "  cudaDeviceSynchronize();\n  return 0;\n}\n")
    rep = port_file(tmp_path / "vote.cu", write=False)
    assert rep.capture.status == "ok", rep.capture.error
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason
    # the CUDA-backend port maps them onto the _sync forms NVRTC has for sm_70 and later
    from ksearch_engine.source import find_kernels
    from ksearch_engine.translate import translate_kernel
    text = (tmp_path / "vote.cu").read_text()
    tr = translate_kernel(find_kernels(text, str(tmp_path / "vote.cu")), "vote", str(tmp_path / "vote.cu"))
    assert "#define __shfl_down(...) ks_shfl_down(__VA_ARGS__)" in tr.launch_cuda_header


def test_an_erf_gelu_ports_to_metal_through_the_headers_erf(tmp_path):
    # GELU with the exact erf form (Metal's standard library has no erf: the port's header brings ks_erf), over
    # inputs from -6 to 6, checked against the original's erff on the captured launch
    (tmp_path / "gelu.cu").write_text(
        "__global__ void gelu(const float* x, float* y, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) { float v = x[i]; y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f)) + erfcf(v) + erf(v); }\n}\n"
        "int main() {\n  const int n = 1200; float h[n], *x, *y;\n"
        "  for (int i = 0; i < n; i++) h[i] = -6.0f + 0.01f * i;\n"
        "  cudaMalloc(&x, sizeof h); cudaMalloc(&y, sizeof h);\n"
        "  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);\n"
        "  gelu<<<(n + 255) / 256, 256>>>(x, y, n);\n  cudaDeviceSynchronize();\n  return 0;\n}\n")
    rep = port_file(tmp_path / "gelu.cu", write=False)
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason


def test_a_class_with_host_only_members_reaches_the_ports_without_them(tmp_path):
    # the unified-memory idiom: a base class whose operator new/delete call cudaMallocManaged; the kernel takes
    # the derived plain-data struct. Neither port's compiler has the host API: host-only members are left out.
    (tmp_path / "managed.cu").write_text(
        "#include <cstdio>\n"
        "class Managed {\npublic:\n"
        "  void *operator new[](size_t len) { void *p; cudaMallocManaged(&p, len); return p; }\n"
        "  void operator delete[](void *p) { cudaDeviceSynchronize(); cudaFree(p); }\n};\n"
        "struct Particle : public Managed {\n  float x, v;\n  __device__ float speed() const { return v; }\n};\n"
        "__global__ void step(Particle *p, float dt, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i].x += p[i].speed() * dt;\n}\n"
        "int main() {\n  int n = 300;\n  Particle *p = new Particle[n];\n"
        "  for (int i = 0; i < n; i++) { p[i].x = i; p[i].v = 1.0f + i % 3; }\n"
        "  step<<<(n + 127) / 128, 128>>>(p, 0.5f, n);\n  cudaDeviceSynchronize();\n"
        "  printf(\"%f\\n\", p[10].x);\n  delete[] p;\n  return 0;\n}\n")
    rep = port_file(tmp_path / "managed.cu", write=False)
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason


def test_preprocessor_shapes_of_real_code(tmp_path):
    # (1) a type macro chosen by #if inside an include guard spelled like a system name (`__JACOBI_H__`),
    # (2) an `else if` branch behind #ifdef in main's option loop (the parser closed main early),
    # (3) a kernel behind #ifdef of a macro nothing defines: not compiled as built, said with the condition
    (tmp_path / "Jacobi.h").write_text(
        "#ifndef __JACOBI_H__\n#define __JACOBI_H__\n#define USE_FLOAT 0\n"
        "#if USE_FLOAT\n#define real float\n#else\n#define real double\n#endif\n#endif\n")
    (tmp_path / "k.cu").write_text(
        "#include <cstdio>\n#include <cstring>\n#include <cstdlib>\n#include \"Jacobi.h\"\n"
        "__global__ void scale(real *out, const real *in, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = in[i] * (real)2.0;\n}\n"
        "#ifdef WITH_OLD_PATH\n__global__ void old_path(float *a) { a[threadIdx.x] = 2.f; }\n#endif\n"
        "int main(int argc, char **argv) {\n  int n = 1024;\n  bool verbose = false;\n"
        "  for (int i = 1; i < argc; ++i) {\n"
        "    if (!strcmp(argv[i], \"-n\")) n = strtol(argv[++i], NULL, 10);\n"
        "#ifdef WITH_DEBUG\n    else if (!strcmp(argv[i], \"-v\")) verbose = true;\n#endif\n"
        "    else { fprintf(stderr, \"unknown option %s\\n\", argv[i]); exit(1); }\n  }\n"
        "  printf(\"n=%d %d\\n\", n, (int)verbose);\n  real *a, *b;\n"
        "  cudaMalloc(&a, n * sizeof(real)); cudaMalloc(&b, n * sizeof(real));\n"
        "  if (argc > 99) scale<<<(n + 255) / 256, 256>>>(b, a, n);\n  return 0;\n}\n")
    rep = port_file(tmp_path / "k.cu", write=False)
    got = {v.kernel: v for v in rep.kernels}
    assert got["scale"].status == "verified", got["scale"].reason
    assert got["old_path"].status == "not_ported"
    assert "#ifdef WITH_OLD_PATH" in got["old_path"].reason and "nothing here defines WITH_OLD_PATH" \
        in got["old_path"].reason


def test_kernels_in_a_c_header_with_cub_device_algorithms_in_its_program(tmp_path):
    # a blog layout: the kernels live in `reduce.h` (an `__inline__` device helper), main.cu includes it and calls
    # CUB's device-wide algorithms (DeviceReduce, DeviceScan, DeviceRadixSort), which the capture runs on the host:
    # their results reach the kernel's captured inputs
    (tmp_path / "reduce.h").write_text(
        "__inline__ __device__ float twice(float v) { return 2.0f * v; }\n"
        "__global__ void add_total(const float* total, const int* keys, const float* scan, float* out, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) out[i] = twice(total[0]) + keys[i] + scan[i];\n}\n")
    (tmp_path / "main.cu").write_text(
        "#include <cstdio>\n#include <cub/cub.cuh>\n#include \"reduce.h\"\n"
        "int main() {\n  const int n = 100; float h[n]; int k[n];\n"
        "  for (int i = 0; i < n; i++) { h[i] = 0.5f * (i % 7); k[i] = (37 * i) % n; }\n"
        "  float *x, *total, *scan, *out; int *keys, *sorted;\n"
        "  cudaMalloc(&x, sizeof h); cudaMalloc(&total, 4); cudaMalloc(&scan, sizeof h); cudaMalloc(&out, sizeof h);\n"
        "  cudaMalloc(&keys, sizeof k); cudaMalloc(&sorted, sizeof k);\n"
        "  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice); cudaMemcpy(keys, k, sizeof k, cudaMemcpyHostToDevice);\n"
        "  void* tmp = nullptr; size_t bytes = 0;\n"
        "  cub::DeviceReduce::Sum(tmp, bytes, x, total, n); cudaMalloc(&tmp, bytes);\n"
        "  cub::DeviceReduce::Sum(tmp, bytes, x, total, n);\n"
        "  cub::DeviceScan::ExclusiveSum(tmp, bytes, x, scan, n);\n"
        "  cub::DeviceRadixSort::SortKeys(tmp, bytes, keys, sorted, n);\n"
        "  add_total<<<1, 128>>>(total, sorted, scan, out, n);\n  cudaDeviceSynchronize();\n  return 0;\n}\n")
    rep = port_file(tmp_path / "reduce.h", write=False)
    assert rep.capture.status == "ok", rep.capture.error
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason
    from ksearch_engine.sim.capture import capture_program
    cap = capture_program(tmp_path / "main.cu", timeout_s=60)
    got = {a.name: np.load(f"{cap.dir}/{a.before}") for a in cap.launches[0].args if a.before}
    h = 0.5 * (np.arange(100) % 7)
    assert got["total"][0] == pytest.approx(h.sum())
    assert list(got["keys"][:100]) == list(range(100))
    np.testing.assert_allclose(got["scan"][:100], np.concatenate([[0], np.cumsum(h)[:-1]]), rtol=1e-6)


def test_an_explicit_specialization_of_a_declared_helper_template_reaches_both_ports(tmp_path):
    # `template <typename T> __device__ T next(T);` declared only, then `template<> __device__ uint64_t next(...)`
    # defined: both headers need the declaration before the specialization
    (tmp_path / "lcg.cu").write_text(
        "#include <cstdint>\n"
        "template <typename T> __device__ T next_rand(T i);\n"
        "template<>\n__device__ __forceinline__ uint64_t next_rand(uint64_t x) {\n"
        "  return (1103515245ull * x + 12345ull) % (1ull << 31);\n}\n"
        "__global__ void fill(uint64_t* out, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) out[i] = next_rand((uint64_t)i);\n}\n")
    rep = port_file(tmp_path / "lcg.cu", write=False)
    v = rep.kernels[0]
    assert v.status == "verified", v.reason


def test_a_missing_local_header_is_named_in_the_reason(tmp_path):
    # the kernel uses a type of `range.hpp`, which is not beside the file: the reason names the header first,
    # not only the compiler's "'util' has not been declared"
    (tmp_path / "k.cu").write_text(
        "#include \"range.hpp\"\n"
        "__global__ void count(const char* text, int* n, size_t len) {\n"
        "  for (auto i : util::lang::range(0, (int)len)) if (text[i] == 'x') atomicAdd(n, 1);\n}\n")
    rep = port_file(tmp_path / "k.cu", write=False)
    v = rep.kernels[0]
    assert v.status != "verified"
    assert "the file includes range.hpp, which is not here (pass its folder with -I" in v.reason, v.reason


def test_counting_and_voting_barriers_port_to_metal(tmp_path):
    # __syncthreads_count / _or / _and: Metal has none; the port counts on a threadgroup atomic between barriers
    (tmp_path / "vote.cu").write_text(
        "__global__ void votes(const float* x, int* out, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  float v = i < n ? x[i] : 0.0f;\n"
        "  int c = __syncthreads_count(v > 0.5f);\n  int any = __syncthreads_or(v > 0.9f);\n"
        "  int all = __syncthreads_and(v >= 0.0f);\n"
        "  if (threadIdx.x == 0) { out[3 * blockIdx.x] = c; out[3 * blockIdx.x + 1] = any;"
        " out[3 * blockIdx.x + 2] = all; }\n}\n"
        "int main() {\n  const int n = 300; float h[n];\n"
        "  for (int i = 0; i < n; i++) h[i] = (i * 37 % 100) / 100.0f - (i == 250 ? 1.0f : 0.0f);\n"
        "  float* x; int* o; cudaMalloc(&x, sizeof h); cudaMalloc(&o, 3 * 3 * sizeof(int));\n"
        "  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);\n  votes<<<3, 128>>>(x, o, n);\n"
        "  cudaDeviceSynchronize();\n  return 0;\n}\n")
    rep = port_file(tmp_path / "vote.cu", write=False)
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason


def test_host_only_members_of_a_class_do_not_stop_the_original_in_the_simulator(tmp_path):
    # a class whose constructor and destructor call a file-scope host helper (blanked as host code when the
    # kernel runs alone in the simulator): its host-only members are blanked with it, members a qualifier macro
    # marks as device code stay
    (tmp_path / "k.cu").write_text(
        "#include <cstdio>\n#include <cstdlib>\n#define HD __host__ __device__\n"
        "static inline void check(int r, const char* what) { if (r) { fprintf(stderr, \"%s\\n\", what); abort(); } }\n"
        "struct Scaled {\n  float s;\n  HD float apply(float x) const { return s * x; }\n};\n"
        "class Holder {\n  void* p;\npublic:\n  Holder(size_t n) { check(cudaMalloc(&p, n), \"alloc\"); }\n"
        "  ~Holder() { check(cudaFree(p), \"free\"); }\n};\n"
        "__global__ void scale(const float* x, float* y, int n, Scaled f) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = f.apply(x[i]);\n}\n")
    rep = port_file(tmp_path / "k.cu", write=False)
    v = rep.kernels[0]
    assert v.status == "verified", v.reason


_FN_TEMPLATE = (
    "#include <cstdlib>\n"
    "typedef void (*op_fn)(float* y, const float* x, int i);\n"
    "__device__ void twice(float* y, const float* x, int i) { y[i] = 2.0f * x[i]; }\n"
    "__device__ void square(float* y, const float* x, int i) { y[i] = x[i] * x[i] + 1.0f; }\n"
    "template <op_fn OP>\n__global__ void apply(float* y, const float* x, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) OP(y, x, i);\n}\n"
    "template <op_fn OP> void run(float* y, const float* x, int n) {\n"
    "  apply<OP><<<(n + 63) / 64, 64>>>(y, x, n);\n}\n"
    "int main(int argc, char** argv) {\n  const int n = 200; float h[n], *x, *y;\n"
    "  for (int i = 0; i < n; i++) h[i] = 0.25f * i;\n"
    "  cudaMalloc(&x, sizeof h); cudaMalloc(&y, sizeof h);\n"
    "  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);\n"
    "  int which = argc > 1 ? atoi(argv[1]) : 2;\n"
    "  if (which == 1) run<twice>(y, x, n); else run<&square>(y, x, n);\n"
    "  cudaDeviceSynchronize();\n  return 0;\n}\n")


def test_a_kernel_templated_on_a_function_is_ported_for_the_function_its_launch_passes(tmp_path):
    # `template <op_fn OP>` launched as apply<OP> inside a host template: the capture names the function the
    # instantiation holds (&square); the port calls it directly, is checked on that launch, and refuses another
    from ksearch_engine.portcheck import check_captured
    from ksearch_engine.source import find_kernels
    from ksearch_engine.translate import translate_kernel

    path = tmp_path / "fnarg.cu"
    path.write_text(_FN_TEMPLATE)
    rep = port_file(path, write=False)
    v = rep.kernels[0]
    assert v.status == "verified" and v.workload == "captured" and v.launches_checked == 1, v.reason
    assert any("OP = square" in n for n in v.notes), v.notes
    parsed = find_kernels(_FN_TEMPLATE, str(path))
    from ksearch_engine.sim.capture import capture_program
    cap = capture_program(path)
    launch = cap.launches_of("apply")
    assert [a.strip("& ") for a in launch[0].template_args] == ["square"]
    wrong = translate_kernel(parsed, "apply", str(path), function_args={"OP": "twice"})
    bad = check_captured(wrong.module_text, _FN_TEMPLATE, parsed.kernel("apply"), path, cap, launch)
    assert not bad.passed and "this port is for OP = twice" in (bad.reason or ""), bad.reason


_STRUCT_POINTERS = (
    "#include <cstring>\n"
    "struct Base { };\n"
    "struct Item : public Base { char* name; int value; };\n"
    "struct Params { const float* x; float* y; int n; float a; float* unused; };\n"
    "__global__ void touch(Item* it) { it->name[0] = 'd'; (*it).name[1] += 1; it->value++; }\n"
    "__global__ void axpy(Params p) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < p.n) p.y[i] = p.a * p.x[i] + p.y[i];\n}\n"
    "__device__ float first(const Params& q) { return q.x[0]; }\n"
    "__global__ void head(Params p) { if (threadIdx.x == 0) p.y[0] = first(p); }\n"
    "int main() {\n"
    "  Item* e; cudaMallocManaged(&e, sizeof(Item)); e->value = 10;\n"
    "  cudaMallocManaged(&e->name, 6); strcpy(e->name, \"hello\");\n"
    "  touch<<<1, 1>>>(e); cudaDeviceSynchronize();\n"
    "  const int n = 100; Params p; float *x, *y; cudaMalloc(&x, n * 4); cudaMalloc(&y, n * 4);\n"
    "  float h[n], g[n]; for (int i = 0; i < n; i++) { h[i] = i * 0.5f; g[i] = 1.0f - i; }\n"
    "  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice); cudaMemcpy(y, g, sizeof g, cudaMemcpyHostToDevice);\n"
    "  p.x = x; p.y = y; p.n = n; p.a = 2.0f; p.unused = 0;\n"
    "  axpy<<<2, 64>>>(p); head<<<1, 32>>>(p); cudaDeviceSynchronize();\n  return 0;\n}\n")


def test_pointer_fields_a_kernel_follows_become_buffers_of_their_own(tmp_path):
    # a pointer to one struct (`it->name`, `(*it).name`) and a struct by value (`p.x`, `p.y`): the capture records
    # what each pointer field points to, both ports take it as a buffer of its own and are checked on it; a field
    # a helper follows keeps the error naming it
    from ksearch_engine.portcheck import check_captured
    from ksearch_engine.sim.capture import capture_program
    from ksearch_engine.source import find_kernels

    path = tmp_path / "fields.cu"
    path.write_text(_STRUCT_POINTERS)
    rep = port_file(path, write=False)
    got = {v.kernel: v for v in rep.kernels}
    for name in ("touch", "axpy"):
        assert got[name].status == "verified" and got[name].workload == "captured", (name, got[name].reason)
    assert any("'it_name'" in n for n in got["touch"].notes), got["touch"].notes
    assert got["head"].status == "not_ported" and "field x" in got["head"].reason, got["head"].reason
    # a port that reads the wrong buffer for the field is caught against what the capture recorded
    wrong = got["axpy"].module_text.replace("p.a * p_x[i]", "p.a * p_y[i]")
    assert wrong != got["axpy"].module_text
    cap = capture_program(path)
    bad = check_captured(wrong, _STRUCT_POINTERS, find_kernels(_STRUCT_POINTERS, str(path)).kernel("axpy"), path,
                         cap, cap.launches_of("axpy"))
    assert not bad.passed and "p_y" in (bad.reason or ""), bad.reason


def test_active_masks_managed_globals_and_old_runtime_queries_capture_and_port(tmp_path):
    # __activemask() feeding a ballot in a partial warp (24 threads: the mask is not all ones), a __managed__
    # variable the host sets and the kernel reads and writes, and the pre-CUDA 4 / deprecated device queries the
    # program calls before launching, beside a file-scope OpenGL interop handle it never uses: the program runs on
    # the capture's runtime and both ports verify on its launch
    (tmp_path / "votes.cu").write_text(
        "#include <cstdio>\n"
        "cudaGraphicsResource* resource = NULL;   // an interop handle the program never uses\n"
        "__managed__ int offset;\n"
        "__global__ void vote(const int* in, unsigned* out) {\n"
        "  unsigned active = __activemask();\n"
        "  unsigned odd = __ballot_sync(active, in[blockIdx.x * 24 + threadIdx.x] & 1);\n"
        "  if (threadIdx.x == 0) { out[2 * blockIdx.x] = odd + offset; out[2 * blockIdx.x + 1] = active; }\n"
        "}\n"
        "__global__ void bump(int by) { offset += by; }\n"
        "int main() {\n"
        "  cudaSharedMemConfig cfg; cudaDeviceGetSharedMemConfig(&cfg);\n"
        "  cudaFuncCache cc; cudaThreadGetCacheConfig(&cc); size_t lim; cudaThreadGetLimit(&lim, cudaLimitStackSize);\n"
        "  int h[3 * 24]; for (int i = 0; i < 3 * 24; i++) h[i] = (i * 7) % 5;\n"
        "  int* in; unsigned* out; cudaMalloc(&in, sizeof h); cudaMalloc(&out, 6 * sizeof(unsigned));\n"
        "  cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);\n"
        "  offset = 5;\n  vote<<<3, 24>>>(in, out);\n  bump<<<1, 1>>>(2);\n  cudaDeviceSynchronize();\n"
        "  unsigned o[6]; cudaMemcpy(o, out, sizeof o, cudaMemcpyDeviceToHost);\n"
        "  printf(\"%u %u %d\\n\", o[0], o[1], offset);\n  return 0;\n}\n")
    rep = port_file(tmp_path / "votes.cu", write=False)
    assert rep.capture.status == "ok", rep.capture.error
    got = {v.kernel: v for v in rep.kernels}
    for v in got.values():
        assert v.status == "verified" and v.workload == "captured", (v.kernel, v.reason)
    assert "simd_active_threads_mask()" in got["vote"].module_text


def test_a_kernel_that_launches_a_kernel_is_not_ported_and_its_child_still_is(tmp_path):
    # dynamic parallelism: the parent is refused naming the launch's line (Metal and MLX's CUDA backend have no
    # device-side launch); the capture stops at the nested launch saying so, and the child is ported on its own
    (tmp_path / "nested.cu").write_text(
        "__global__ void child(int* a, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) a[i] *= 2;\n}\n"
        "__global__ void parent(int* a, int n) {\n"
        "  if (threadIdx.x == 0 && blockIdx.x == 0) {\n"
        "    child<<<(n + 31) / 32, 32>>>(a, n);\n    cudaDeviceSynchronize();\n  }\n}\n"
        "int main() {\n  const int n = 64; int h[n], *d;\n  for (int i = 0; i < n; i++) h[i] = i;\n"
        "  cudaMalloc(&d, sizeof h); cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);\n"
        "  parent<<<1, 32>>>(d, n);\n  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);\n  return 0;\n}\n")
    rep = port_file(tmp_path / "nested.cu", write=False)
    got = {v.kernel: v for v in rep.kernels}
    assert got["parent"].status == "not_ported", got["parent"].reason
    assert "line 7" in got["parent"].reason and "dynamic parallelism" in got["parent"].reason
    assert got["child"].status == "verified", got["child"].reason
    assert "dynamic parallelism" in (rep.capture.error or ""), rep.capture.error
    assert "nested.cu:7" in rep.capture.error


def test_a_framework_extension_without_main_gets_launch_and_a_kernel_wrapper_that_says_why_not(tmp_path):
    # a PyTorch-style C++ extension: the host wrapper reads sizes through the framework's tensor API, which the
    # kernel(*inputs) wrapper cannot follow; the module still loads, launch() is verified on a made-up workload,
    # and kernel() says what to call instead (it was a module that did not load: a duplicate argument)
    import importlib.util
    (tmp_path / "ext.cu").write_text(
        "#include <torch/types.h>\n"
        "__global__ void scale_rows(const float* x, float* y, const int N, const int d, const float s) {\n"
        "  int row = blockIdx.x, col = threadIdx.x;\n"
        "  if (row < N && col < d) y[row * d + col] = s * x[row * d + col];\n}\n"
        "torch::Tensor forward(torch::Tensor x) {\n"
        "  const int N = x.size(0); const int d = x.size(1);\n  const float s = 1.0 / sqrt(d);\n"
        "  auto y = torch::zeros_like(x);\n"
        "  scale_rows<<<N, d>>>(x.data_ptr<float>(), y.data_ptr<float>(), N, d, s);\n  return y;\n}\n")
    (v,) = port_file(tmp_path / "ext.cu", write=False).kernels
    assert v.status == "verified", v.reason
    spec = importlib.util.spec_from_loader("ext_port", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(v.module_text, "ext_mlx.py", "exec"), mod.__dict__)
    with pytest.raises(NotImplementedError, match=r"scale_rows: kernel\(\*inputs\) could not be made .*launch\("):
        mod.kernel(np.zeros((2, 4), np.float32))


def test_a_wrapper_naming_what_nothing_defines_is_refused_and_a_good_one_kept():
    from ksearch_engine.translate.emit import _unusable_wrapper
    head = "import math\n\ndef _dim3(x=1, y=1, z=1):\n    return (x, y, z)\n\n\n"
    good = head + "def launch_config(a, *, n=None):\n    g = _dim3(n)\n    return math.ceil(n / 2), g, len(a)\n"
    assert _unusable_wrapper(good, good[len(head):]) is None
    bad = good.replace("_dim3(n)", "_dim3(BLOCK_SIZE)")
    assert _unusable_wrapper(bad, bad[len(head):]) == "'BLOCK_SIZE' is not defined there"
    dup = head + "def kernel(x, *, x=None):\n    return x\n"
    assert "duplicate argument" in _unusable_wrapper(dup, dup[len(head):])


def test_overloaded_kernels_are_named_as_such_and_the_files_other_kernels_still_capture(tmp_path):
    # two __global__ kernels of one name (overloads on the pointer type): the program's capture compiles (the
    # launches go the generic way, where the arguments pick the overload), the overloads are refused naming their
    # lines, and the file's other kernel is verified on its captured launch
    (tmp_path / "ov.cu").write_text(
        "__global__ void pack(unsigned char* o, const float* x, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[4 * i] = (unsigned char)(255 * x[i]);\n}\n"
        "__global__ void pack(uchar4* o, const float* x, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i].y = (unsigned char)(255 * x[i]);\n}\n"
        "__global__ void halve(float* x, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 0.5f;\n}\n"
        "int main() {\n  const int n = 128; float h[n], *x; unsigned char* a; uchar4* b;\n"
        "  for (int i = 0; i < n; i++) h[i] = i / 128.0f;\n"
        "  cudaMalloc(&x, sizeof h); cudaMalloc(&a, 4 * n); cudaMalloc(&b, 4 * n);\n"
        "  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);\n"
        "  pack<<<2, 64>>>(a, x, n);\n  pack<<<2, 64>>>(b, x, n);\n  halve<<<2, 64>>>(x, n);\n"
        "  cudaDeviceSynchronize();\n  return 0;\n}\n")
    rep = port_file(tmp_path / "ov.cu", write=False)
    assert rep.capture.status == "ok", rep.capture.error
    by_line = {v.line: v for v in rep.kernels}
    for line in (1, 4):
        assert by_line[line].status == "not_ported" and "overloaded" in by_line[line].reason
        assert "lines 1, 4" in by_line[line].reason
    assert by_line[7].status == "verified" and by_line[7].workload == "captured", by_line[7].reason


def test_a_constant_array_of_structs_the_program_fills_reaches_both_ports(tmp_path):
    # `__constant__ Ball balls[8]` (a struct of floats, with a __device__ method) filled by cudaMemcpyToSymbol: both
    # ports take it as a symbol and are checked on what the program put there (they read zeros before, and a
    # made-up workload gave zeros to the original too, so the check could not see it)
    (tmp_path / "balls.cu").write_text(
        "#include <cstdlib>\n"
        "struct Ball { float r, x, y;\n"
        "  __device__ float near(float px, float py) const { float dx = px - x, dy = py - y;\n"
        "    return dx * dx + dy * dy < r * r ? r : 0.0f; } };\n"
        "__constant__ Ball balls[8];\n"
        "__global__ void shade(float* out, int w) {\n"
        "  int px = threadIdx.x + blockIdx.x * blockDim.x, py = blockIdx.y;\n"
        "  float v = 0.0f;\n  for (int i = 0; i < 8; i++) v += balls[i].near((float)px, (float)py);\n"
        "  out[py * w + px] = v;\n}\n"
        "int main() {\n  Ball h[8];\n"
        "  for (int i = 0; i < 8; i++) { h[i].r = 3.0f + i; h[i].x = 4.0f * i; h[i].y = 2.0f * i; }\n"
        "  cudaMemcpyToSymbol(balls, h, sizeof h);\n"
        "  float* out; cudaMalloc(&out, 64 * 16 * sizeof(float));\n"
        "  shade<<<dim3(2, 16), 32>>>(out, 64);\n  cudaDeviceSynchronize();\n  return 0;\n}\n")
    (v,) = port_file(tmp_path / "balls.cu", write=False).kernels
    assert v.status == "verified" and v.workload == "captured", v.reason
    assert "'name': 'balls'" in v.module_text and "'elem_bytes': 12" in v.module_text


def test_a_define_with_a_comment_after_its_value_sizes_a_device_array_of_both_ports(tmp_path):
    # `#define LANES 32 // lanes`: the comment is not part of the value, so `__device__ unsigned d[LANES]` is a
    # symbol both ports take (the Metal port did not declare it)
    from ksearch_engine.translate import analysis
    assert analysis.constants_env(["#define LANES 32 // lanes", "#define TWO (1 /* one */ + 1)"], {}) == \
        {"LANES": 32, "TWO": 2}
    (tmp_path / "dd.cu").write_text(
        "#define LANES 32 // lanes in a warp\n"
        "__device__ unsigned int d_data[LANES];\n"
        "__global__ void rotate() { unsigned v = d_data[(threadIdx.x + 1) % LANES]; __syncwarp();\n"
        "  d_data[threadIdx.x] = v + 1; }\n"
        "int main() {\n  unsigned h[LANES]; for (int i = 0; i < LANES; i++) h[i] = i * 3;\n"
        "  cudaMemcpyToSymbol(d_data, h, sizeof h);\n  rotate<<<1, LANES>>>();\n"
        "  cudaMemcpyFromSymbol(h, d_data, sizeof h);\n  return 0;\n}\n")
    (v,) = port_file(tmp_path / "dd.cu", write=False).kernels
    assert v.status == "verified" and v.workload == "captured", v.reason
