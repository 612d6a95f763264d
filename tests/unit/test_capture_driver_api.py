"""Programs that load their kernels at run time instead of launching them with <<<>>>: one compiles its kernel
file with NVRTC (reads the .cu, nvrtcCreateProgram / nvrtcCompileProgram / nvrtcGetCUBIN, cuModuleLoadData), one
loads a prebuilt module named after its kernel file (a .fatbin that is not there) and launches through
cuLaunchKernel's parameter slots. The kernel file alone is ported: the program naming it in a string is found,
the kernel file is compiled into it, the program runs on the CPU stand-in of the driver API and NVRTC, and the
port is verified on the captured launch (a kernel of the file that the preprocessor leaves out is not registered).
A module's __constant__ is set through cuModuleGetGlobal. A texture call the stand-in lacks stops the capture by name
and line.

Everything here is written for these tests and runs on the CPU runtime for real."""

from __future__ import annotations

import shutil

import pytest

from ksearch_engine.portfile import find_program_and_sources, port_file
from ksearch_engine.sim.capture import capture_program
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

BLEND_KERNEL = """
// C++ linkage: the program finds it through nvrtcGetLoweredName
__global__ void blend(const float *a, const float *b, float *out, float t, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (1.0f - t) * a[i] + t * b[i];
}

template <typename T>
__global__ void shift(T *x, T by, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += by;
}
"""

NVRTC_HOST = """
#include <cuda.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DRV(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { printf("driver error %d\\n", (int)r_); exit(1); } } while (0)
#define RTC(x) do { nvrtcResult r_ = (x); if (r_ != NVRTC_SUCCESS) { printf("%s\\n", nvrtcGetErrorString(r_)); exit(1); } } while (0)

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) { printf("cannot open %s\\n", path); exit(1); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = (char *)malloc(n + 1);
    fread(s, 1, n, f);
    s[n] = 0;
    fclose(f);
    return s;
}

int main(int argc, char **argv)
{
    char *src = read_all("blend_kernel.cu");
    nvrtcProgram prog;
    RTC(nvrtcCreateProgram(&prog, src, "blend_kernel.cu", 0, NULL, NULL));
    RTC(nvrtcAddNameExpression(prog, "blend"));
    RTC(nvrtcAddNameExpression(prog, "shift<int>"));
    const char *opts[] = {"--gpu-architecture=sm_90"};
    RTC(nvrtcCompileProgram(prog, 1, opts));
    size_t logn;
    RTC(nvrtcGetProgramLogSize(prog, &logn));
    size_t n_cubin;
    RTC(nvrtcGetCUBINSize(prog, &n_cubin));
    char *cubin = (char *)malloc(n_cubin);
    RTC(nvrtcGetCUBIN(prog, cubin));
    const char *blend_name, *shift_name;
    RTC(nvrtcGetLoweredName(prog, "blend", &blend_name));
    RTC(nvrtcGetLoweredName(prog, "shift<int>", &shift_name));

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction blend_fn, shift_fn;
    DRV(cuInit(0));
    DRV(cuDeviceGet(&dev, 0));
    DRV(cuCtxCreate(&ctx, 0, dev));
    DRV(cuModuleLoadData(&mod, cubin));
    DRV(cuModuleGetFunction(&blend_fn, mod, blend_name));
    DRV(cuModuleGetFunction(&shift_fn, mod, shift_name));

    int n = 3000;
    float t = 0.25f;
    size_t bytes = n * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes), *hc = (float *)malloc(bytes);
    for (int i = 0; i < n; i++) { ha[i] = (float)i; hb[i] = (float)(2 * i); }
    CUdeviceptr da, db, dc;
    DRV(cuMemAlloc(&da, bytes));
    DRV(cuMemAlloc(&db, bytes));
    DRV(cuMemAlloc(&dc, bytes));
    DRV(cuMemcpyHtoD(da, ha, bytes));
    DRV(cuMemcpyHtoD(db, hb, bytes));
    void *args[] = {&da, &db, &dc, &t, &n};
    DRV(cuLaunchKernel(blend_fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    DRV(cuCtxSynchronize());
    DRV(cuMemcpyDtoH(hc, dc, bytes));
    int ok = hc[100] == 125.0f;

    int m = 64, by = 7;
    CUdeviceptr dx;
    DRV(cuMemAlloc(&dx, m * sizeof(int)));
    DRV(cuMemsetD32(dx, 1, m));
    void *sargs[] = {&dx, &by, &m};
    DRV(cuLaunchKernel(shift_fn, 1, 1, 1, 64, 1, 1, 0, NULL, sargs, NULL));
    int hx[64];
    DRV(cuMemcpyDtoH(hx, dx, sizeof hx));
    ok = ok && hx[5] == 8;
    printf("%s\\n", ok ? "PASS" : "FAIL");
    RTC(nvrtcDestroyProgram(&prog));
    DRV(cuModuleUnload(mod));
    DRV(cuCtxDestroy(ctx));
    return ok ? 0 : 1;
}
"""

SUM_KERNEL = """
extern "C" __global__ void pair_sum(const int *in, int *out, int pairs)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pairs) out[i] = in[2 * i] + in[2 * i + 1];
}

#ifdef PAIR_SUM_DEBUG
// not compiled as the file is built: its registration for the driver API is dropped, the rest still runs
extern "C" __global__ void pair_dump(const int *in, int *out) { out[0] = in[0]; }
#endif
"""

DRIVER_HOST = """
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <fstream>
#include <sstream>
#include <string>

#define MODULE_FILE "pair_sum_kernel64.fatbin"
#define DRV(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { printf("driver error %d\\n", (int)r_); exit(1); } } while (0)

// where a module is looked for, as sample programs do: the first folder that has it
static std::string find_module(const char *name)
{
    const char *dirs[] = {"./", "./data/", "../modules/"};
    for (const char *d : dirs) {
        std::string p = std::string(d) + name;
        FILE *f = fopen(p.c_str(), "rb");
        if (f) { fclose(f); return p; }
    }
    return "";
}

int main(int argc, char **argv)
{
    std::string path = find_module(MODULE_FILE);
    if (path.empty()) { printf("module %s not found\\n", MODULE_FILE); return 1; }
    std::ifstream in(path.c_str(), std::ios::binary);
    std::ostringstream image;
    image << in.rdbuf();
    if (image.str().empty()) { printf("empty module\\n"); return 1; }

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    DRV(cuInit(0));
    DRV(cuDeviceGet(&dev, 0));
    DRV(cuCtxCreate(&ctx, 0, dev));
    DRV(cuModuleLoadData(&mod, image.str().c_str()));
    DRV(cuModuleGetFunction(&fn, mod, "pair_sum"));

    int pairs = 500;
    int *h = (int *)malloc(2 * pairs * sizeof(int));
    for (int i = 0; i < 2 * pairs; i++) h[i] = i % 13;
    CUdeviceptr din, dout;
    DRV(cuMemAlloc(&din, 2 * pairs * sizeof(int)));
    DRV(cuMemAlloc(&dout, pairs * sizeof(int)));
    DRV(cuMemcpyHtoD(din, h, 2 * pairs * sizeof(int)));
    // the parameters packed in one buffer (cuLaunchKernel's `extra`)
    char buf[64];
    size_t at = 0;
    *(CUdeviceptr *)(buf + at) = din; at += sizeof(CUdeviceptr);
    *(CUdeviceptr *)(buf + at) = dout; at += sizeof(CUdeviceptr);
    *(int *)(buf + at) = pairs; at += sizeof(int);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &at, CU_LAUNCH_PARAM_END};
    DRV(cuLaunchKernel(fn, (pairs + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, NULL, extra));
    DRV(cuCtxSynchronize());
    int *out = (int *)malloc(pairs * sizeof(int));
    DRV(cuMemcpyDtoH(out, dout, pairs * sizeof(int)));
    printf("%s\\n", out[3] == 6 % 13 + 7 % 13 ? "PASS" : "FAIL");
    DRV(cuMemFree(din));
    DRV(cuMemFree(dout));
    DRV(cuCtxDestroy(ctx));
    return 0;
}
"""

TEXTURE_HOST = """
#include <cuda.h>
#include <stdio.h>

int main()
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    cuInit(0);
    cuDeviceGet(&dev, 0);
    cuCtxCreate(&ctx, 0, dev);
    cuModuleLoad(&mod, "pair_sum_kernel.ptx");
    cuModuleGetFunction(&fn, mod, "pair_sum");
    CUDA_RESOURCE_DESC res = {};
    CUDA_TEXTURE_DESC tex = {};
    CUtexObject obj;
    cuTexObjectCreate(&obj, &res, &tex, NULL);
    printf("done\\n");
    return 0;
}
"""


def test_an_nvrtc_programs_kernel_file_is_found_and_verified_on_its_captured_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    kernel = write(tmp_path, "blend_kernel.cu", BLEND_KERNEL)
    host = write(tmp_path, "blend.cpp", NVRTC_HOST)
    assert find_program_and_sources(kernel) == (host, [kernel])
    report = port_file(kernel, kernels=["blend"], capture_timeout=120, write=False)
    assert report.capture is not None and report.capture.status == "ok", report.capture
    assert any("reads it for NVRTC" in n for n in report.capture.notes), report.capture.notes
    (v,) = report.kernels
    assert v.workload == "captured", v
    assert v.status == "verified", v.reason


def test_a_template_kernel_is_launched_by_its_name_expression(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    write(tmp_path, "blend_kernel.cu", BLEND_KERNEL)
    host = write(tmp_path, "blend.cpp", NVRTC_HOST)
    cap = capture_program(host, timeout_s=120, workdir=tmp_path / "cap")
    assert cap.status == "ok", (cap.error, cap.stdout_tail)
    assert "PASS" in cap.stdout_tail
    shift = cap.launches_of("shift")
    assert len(shift) == 1 and shift[0].template_args == ["int"], cap.launches
    assert [a.value for a in shift[0].args[1:]] == [7, 64]
    assert shift[0].line == line_of(NVRTC_HOST, "cuLaunchKernel(shift_fn")


def test_a_module_named_after_its_kernel_file_is_stood_in_for_and_the_kernel_verified(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    kernel = write(tmp_path, "pair_sum_kernel.cu", SUM_KERNEL)
    host = write(tmp_path, "pair_sum.cpp", DRIVER_HOST)
    assert find_program_and_sources(kernel) == (host, [kernel])
    report = port_file(kernel, kernels=["pair_sum"], capture_timeout=120, write=False)
    assert report.capture is not None and report.capture.status == "ok", report.capture
    # the module file is not there: the capture's marker stood in for it, and says so
    assert any("pair_sum_kernel64.fatbin is not there" in n and "marker file" in n for n in report.capture.notes), \
        report.capture.notes
    assert not (tmp_path / "pair_sum_kernel64.fatbin").exists()   # nothing written into the program's folder
    (v,) = report.kernels
    assert v.workload == "captured", v
    assert v.status == "verified", v.reason


def test_a_texture_object_through_the_driver_api_stops_the_capture_naming_the_call_and_line(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    write(tmp_path, "pair_sum_kernel.cu", SUM_KERNEL)
    host = write(tmp_path, "tex.cpp", TEXTURE_HOST)
    cap = capture_program(host, timeout_s=60, workdir=tmp_path / "cap")
    assert cap.status == "failed"
    line = line_of(TEXTURE_HOST, "cuTexObjectCreate(")
    assert f"tex.cpp:{line}:" in cap.error and "cuTexObjectCreate" in cap.error, cap.error
    assert "Traceback" not in cap.error
    assert any(n.kind == "gpu_only" and "cuTexObjectCreate" in n.message for n in cap.notes), cap.notes


GAIN_KERNEL = """
__constant__ float gain;

extern "C" __global__ void amplify(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= gain;
}
"""

GAIN_HOST = """
#include <cuda.h>
#include <stdio.h>

int main()
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    cuInit(0);
    cuDeviceGet(&dev, 0);
    cuCtxCreate(&ctx, 0, dev);
    if (cuModuleLoad(&mod, "gain_kernel.cubin") != CUDA_SUCCESS) { printf("no module\\n"); return 1; }
    cuModuleGetFunction(&fn, mod, "amplify");
    CUdeviceptr g;
    size_t gbytes;
    if (cuModuleGetGlobal(&g, &gbytes, mod, "gain") != CUDA_SUCCESS || gbytes != sizeof(float)) return 1;
    float two = 2.0f;
    cuMemcpyHtoD(g, &two, sizeof two);
    float h[32];
    for (int i = 0; i < 32; i++) h[i] = (float)i;
    CUdeviceptr d;
    cuMemAlloc(&d, sizeof h);
    cuMemcpyHtoD(d, h, sizeof h);
    int n = 32;
    void *args[] = {&d, &n};
    cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, args, 0);
    cuMemcpyDtoH(h, d, sizeof h);
    printf("%s\\n", h[5] == 10.0f ? "PASS" : "FAIL");
    return 0;
}
"""


def test_a_modules_constant_is_set_through_cu_module_get_global(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    write(tmp_path, "gain_kernel.cu", GAIN_KERNEL)
    host = write(tmp_path, "gain.cpp", GAIN_HOST)
    cap = capture_program(host, timeout_s=60, workdir=tmp_path / "cap")
    assert cap.status == "ok", (cap.error, cap.stdout_tail)
    assert "PASS" in cap.stdout_tail
    (ln,) = cap.launches_of("amplify")
    assert [s.name for s in ln.symbols] == ["gain"]
    # the module file is not there: cuModuleLoad resolved it by its name, and a note says so
    assert any(n.kind == "module" and "gain_kernel.cubin is not there" in n.message and
               n.line == line_of(GAIN_HOST, "cuModuleLoad(") for n in cap.notes), cap.notes
