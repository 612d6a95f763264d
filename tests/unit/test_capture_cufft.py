"""cuFFT on the capture's CPU runtime (sim/host_headers.py `_CUFFT`): plans are bookkeeping, cufftExec* compute the
transform on the host in double, unnormalized as cuFFT's, so a program that runs an FFT between its own kernels
goes on and the kernel after the transform is captured with the spectrum as its input. Also: a kernel file naming
cufftComplex/cufftReal ports and verifies without its program (translate/headers.LIBRARY_TYPEDEFS).

Every program here is written for these tests; numpy.fft is the reference."""

from __future__ import annotations

import shutil
import textwrap

import numpy as np
import pytest

from ksearch_engine.sim.capture import capture_program
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _c(cap, launch: int, arg: int, when: str = "before", dtype=np.complex64) -> np.ndarray:
    """The complex contents of pointer argument `arg` of launch `launch` (its bytes read as `dtype`)."""
    a = cap.launches[launch].args[arg]
    return np.load(f"{cap.dir}/{getattr(a, when)}").view(np.uint8).view(dtype)


def _r(cap, launch: int, arg: int, when: str = "before", dtype=np.float32) -> np.ndarray:
    a = cap.launches[launch].args[arg]
    return np.load(f"{cap.dir}/{getattr(a, when)}").view(np.uint8).view(dtype)


# A kernel fills a batch of real signals, cuFFT transforms them (R2C, batched 1-D plan, out of place), a second
# kernel reads the spectrum: its launch is recorded with the spectrum as input, and the program's own host check
# of one bin (a DFT summed on the host) passes.
R2C = """
#include <cstdio>
#include <cmath>
#include <cufft.h>
__global__ void fill(cufftReal* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (float)((i * 7) % 11) - 5.0f + 0.125f * (float)(i % 5);
}
__global__ void power(const cufftComplex* s, float* p, int m) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) p[i] = s[i].x * s[i].x + s[i].y * s[i].y;
}
int main() {
  const int n = 60, batch = 3, m = n / 2 + 1;
  cufftReal* x; cufftComplex* s; float* p;
  cudaMalloc(&x, n * batch * sizeof(cufftReal));
  cudaMalloc(&s, m * batch * sizeof(cufftComplex));
  cudaMalloc(&p, m * batch * sizeof(float));
  fill<<<(n * batch + 63) / 64, 64>>>(x, n * batch);
  cufftHandle plan;
  if (cufftPlan1d(&plan, n, CUFFT_R2C, batch) != CUFFT_SUCCESS) { printf("plan failed\\n"); return 1; }
  if (cufftExecR2C(plan, x, s) != CUFFT_SUCCESS) { printf("exec failed\\n"); return 1; }
  power<<<(m * batch + 63) / 64, 64>>>(s, p, m * batch);
  float hx[n * batch], hp[m * batch];
  cudaMemcpy(hx, x, sizeof hx, cudaMemcpyDeviceToHost);
  cudaMemcpy(hp, p, sizeof hp, cudaMemcpyDeviceToHost);
  double re = 0, im = 0;
  const int b = 2, k = 7;
  for (int j = 0; j < n; j++) {
    re += hx[b * n + j] * cos(-2 * M_PI * j * k / n);
    im += hx[b * n + j] * sin(-2 * M_PI * j * k / n);
  }
  if (fabs(hp[b * m + k] - (re * re + im * im)) > 1e-3 * (re * re + im * im)) { printf("MISMATCH\\n"); return 2; }
  printf("host check passed\\n");
  cufftDestroy(plan);
  return 0;
}
"""


def _r2c_input(n: int, batch: int) -> np.ndarray:
    i = np.arange(n * batch)
    return (((i * 7) % 11) - 5.0 + 0.125 * (i % 5)).astype(np.float32).reshape(batch, n)


def test_r2c_between_two_kernels_runs_and_the_second_kernel_gets_the_spectrum(tmp_path):
    src = write(tmp_path, "r2c.cu", R2C)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", (cap.error, cap.stdout_tail)
    assert "host check passed" in cap.stdout_tail
    assert cap.kernels() == ["fill", "power"]
    n, batch, m = 60, 3, 31
    want = np.fft.rfft(_r2c_input(n, batch).astype(np.float64), axis=1)
    got = _c(cap, 1, 0)[:m * batch].reshape(batch, m)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4 * np.abs(want).max())
    power = _r(cap, 1, 1, "after")[:m * batch].reshape(batch, m)
    np.testing.assert_allclose(power, np.abs(want) ** 2, rtol=1e-4, atol=1e-3)
    (note,) = [x for x in cap.notes if "cufftExecR2C" in x.message]
    assert note.kind == "stubbed" and note.line == line_of(R2C, "cufftExecR2C(plan"), note


# 2-D C2C in place through cufftCreate + cufftMakePlan2d (work size returned through the pointer): forward, a
# kernel reading the spectrum, inverse (unnormalized: n * x), a kernel reading the round trip.
C2C = """
#include <cstdio>
#include <cufft.h>
__global__ void fill(cufftComplex* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { a[i].x = (float)(i % 9) - 4.0f; a[i].y = 0.5f * (float)((i * 5) % 7) - 1.5f; }
}
__global__ void look(const cufftComplex* a, cufftComplex* copy, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) copy[i] = a[i];
}
int main() {
  const int nx = 6, ny = 10, n = nx * ny;
  cufftComplex *a, *copy;
  cudaMalloc(&a, n * sizeof(cufftComplex));
  cudaMalloc(&copy, n * sizeof(cufftComplex));
  fill<<<1, 64>>>(a, n);
  cufftHandle plan;
  size_t work = 0;
  cufftCreate(&plan);
  if (cufftMakePlan2d(plan, nx, ny, CUFFT_C2C, &work) != CUFFT_SUCCESS || work == 0) { printf("plan\\n"); return 1; }
  cufftSetStream(plan, 0);
  cufftExecC2C(plan, a, a, CUFFT_FORWARD);
  look<<<1, 64>>>(a, copy, n);
  cufftExecC2C(plan, a, a, CUFFT_INVERSE);
  look<<<1, 64>>>(a, copy, n);
  cufftDestroy(plan);
  return 0;
}
"""


def test_c2c_forward_then_inverse_in_place_gives_n_times_the_input(tmp_path):
    src = write(tmp_path, "c2c.cu", C2C)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", (cap.error, cap.stdout_tail)
    assert [ln.kernel for ln in cap.launches] == ["fill", "look", "look"]
    nx, ny = 6, 10
    i = np.arange(nx * ny)
    x = ((i % 9) - 4.0) + 1j * (0.5 * ((i * 5) % 7) - 1.5)
    spec = _c(cap, 1, 0)[:nx * ny].reshape(nx, ny)
    np.testing.assert_allclose(spec, np.fft.fft2(x.reshape(nx, ny)), atol=1e-4)
    back = _c(cap, 2, 0)[:nx * ny]
    np.testing.assert_allclose(back, nx * ny * x, atol=1e-3)


# cufftPlanMany with an advanced layout: 4 signals of 12 points stored interleaved (istride = 4, idist = 1),
# spectra written with a padded stride (onembed = 16 > 12, ostride = 1, odist = 16); then NULL embeds with strides
# that must be ignored (the contiguous layout), and a 2-D batched plan.
MANY = """
#include <cstdio>
#include <cufft.h>
__global__ void fill(cufftComplex* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { a[i].x = (float)((i * 3) % 13) - 6.0f; a[i].y = (float)(i % 4) - 1.0f; }
}
__global__ void look(const cufftComplex* a, float* mag, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) mag[i] = a[i].x + a[i].y;
}
int main() {
  const int n = 12, batch = 4;
  cufftComplex *in, *out, *out2, *out3;
  float* mag;
  cudaMalloc(&in, n * batch * sizeof(cufftComplex));
  cudaMalloc(&out, 16 * batch * sizeof(cufftComplex));
  cudaMalloc(&out2, n * batch * sizeof(cufftComplex));
  cudaMalloc(&out3, n * batch * sizeof(cufftComplex));
  cudaMalloc(&mag, 16 * batch * sizeof(float));
  cudaMemset(out, 0, 16 * batch * sizeof(cufftComplex));
  fill<<<1, 64>>>(in, n * batch);
  int len[1] = {n}, inembed[1] = {n}, onembed[1] = {16};
  cufftHandle p1, p2, p3;
  cufftPlanMany(&p1, 1, len, inembed, batch, 1, onembed, 1, 16, CUFFT_C2C, batch);
  cufftExecC2C(p1, in, out, CUFFT_FORWARD);
  look<<<1, 64>>>(out, mag, 16 * batch);
  cufftPlanMany(&p2, 1, len, NULL, 7, 99, NULL, 5, 77, CUFFT_C2C, batch);
  cufftExecC2C(p2, in, out2, CUFFT_FORWARD);
  look<<<1, 64>>>(out2, mag, n * batch);
  int dims[2] = {3, 4};
  cufftPlanMany(&p3, 2, dims, NULL, 1, 0, NULL, 1, 0, CUFFT_C2C, batch);
  cufftExecC2C(p3, in, out3, CUFFT_INVERSE);
  look<<<1, 64>>>(out3, mag, n * batch - 1);   // (other scalars: recorded as a launch of its own)
  return 0;
}
"""


def test_plan_many_reads_and_writes_the_advanced_layout_and_null_embeds_mean_contiguous(tmp_path):
    src = write(tmp_path, "many.cu", MANY)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", (cap.error, cap.stdout_tail)
    assert [ln.kernel for ln in cap.launches] == ["fill", "look", "look", "look"]
    n, batch = 12, 4
    i = np.arange(n * batch)
    flat = (((i * 3) % 13) - 6.0) + 1j * ((i % 4) - 1.0)
    # advanced: signal b's point j at j * istride + b * idist; its bin k at b * odist + k * ostride
    interleaved = flat.reshape(n, batch).T
    out = _c(cap, 1, 0)[:16 * batch].reshape(batch, 16)
    np.testing.assert_allclose(out[:, :n], np.fft.fft(interleaved, axis=1), atol=1e-4)
    assert np.all(out[:, n:] == 0)   # the padding is not written
    contiguous = _c(cap, 2, 0)[:n * batch].reshape(batch, n)
    np.testing.assert_allclose(contiguous, np.fft.fft(flat.reshape(batch, n), axis=1), atol=1e-4)
    two_d = _c(cap, 3, 0)[:n * batch].reshape(batch, 3, 4)
    np.testing.assert_allclose(two_d, np.fft.ifft2(flat.reshape(batch, 3, 4)) * 12, atol=1e-4)


# Double precision, in place: D2Z on a real array padded to 2 * (n / 2 + 1) per row (cuFFT's in-place layout),
# a kernel reads the spectrum, Z2D back (n * x in the first n of each row); a 3-D Z2Z through cufftPlan3d.
DOUBLE = """
#include <cstdio>
#include <cufft.h>
__global__ void fill(double* x, int rows, int n, int pitch) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * n) x[(i / n) * pitch + i % n] = (double)((i * 5) % 9) - 3.5;
}
__global__ void look(const cufftDoubleComplex* s, double* re, int m) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) re[i] = s[i].x - s[i].y;
}
__global__ void look_real(const double* x, double* re, int m) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) re[i] = x[i];
}
int main() {
  const int n = 10, rows = 2, h = n / 2 + 1, pitch = 2 * h;
  double *x, *re;
  cufftDoubleComplex* z;
  cudaMalloc(&x, rows * pitch * sizeof(double));
  cudaMalloc(&re, 64 * sizeof(double));
  cudaMalloc(&z, 2 * 3 * 4 * sizeof(cufftDoubleComplex));
  fill<<<1, 64>>>(x, rows, n, pitch);
  cufftHandle fwd, inv, p3;
  cufftPlan1d(&fwd, n, CUFFT_D2Z, rows);
  cufftPlan1d(&inv, n, CUFFT_Z2D, rows);
  cufftExecD2Z(fwd, x, (cufftDoubleComplex*)x);
  look<<<1, 64>>>((cufftDoubleComplex*)x, re, rows * h);
  cufftExecZ2D(inv, (cufftDoubleComplex*)x, x);
  look_real<<<1, 64>>>(x, re, rows * pitch);
  cufftDoubleComplex hz[24];
  for (int i = 0; i < 24; i++) { hz[i].x = i % 5; hz[i].y = -(i % 3); }
  cudaMemcpy(z, hz, sizeof hz, cudaMemcpyHostToDevice);
  cufftPlan3d(&p3, 2, 3, 4, CUFFT_Z2Z);
  cufftExecZ2Z(p3, z, z, CUFFT_FORWARD);
  look<<<1, 64>>>(z, re, 24);
  if (cufftExecR2C(p3, (cufftReal*)x, (cufftComplex*)z) != CUFFT_INVALID_VALUE) { printf("wrong type ran\\n"); return 1; }
  return 0;
}
"""


def test_double_precision_in_place_real_transforms_use_the_padded_layout(tmp_path):
    src = write(tmp_path, "double.cu", DOUBLE)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", (cap.error, cap.stdout_tail)
    assert [ln.kernel for ln in cap.launches] == ["fill", "look", "look_real", "look"]
    n, rows, h = 10, 2, 6
    i = np.arange(n * rows)
    x = (((i * 5) % 9) - 3.5).reshape(rows, n)
    spec = _c(cap, 1, 0, dtype=np.complex128)[:rows * h].reshape(rows, h)
    np.testing.assert_allclose(spec, np.fft.rfft(x, axis=1), atol=1e-12)
    back = _r(cap, 2, 0, dtype=np.float64)[:rows * 2 * h].reshape(rows, 2 * h)
    np.testing.assert_allclose(back[:, :n], n * x, atol=1e-11)
    k = np.arange(24)
    z = (k % 5) - 1j * (k % 3)
    np.testing.assert_allclose(_c(cap, 3, 0, dtype=np.complex128)[:24].reshape(2, 3, 4),
                               np.fft.fftn(z.reshape(2, 3, 4)), atol=1e-12)
    assert any(nt.kind == "program" and "CUFFT_Z2Z" in nt.message for nt in cap.notes), cap.notes


# C2R with a 2-D plan on a Hermitian half spectrum made by R2C: the round trip is n * x.
C2R = """
#include <cufft.h>
__global__ void fill(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (float)((i * 11) % 7) - 2.0f;
}
__global__ void look(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
int main() {
  const int nx = 4, ny = 9, n = nx * ny;
  float *x, *y, *back;
  cufftComplex* s;
  cudaMalloc(&x, n * sizeof(float)); cudaMalloc(&y, n * sizeof(float)); cudaMalloc(&back, n * sizeof(float));
  cudaMalloc(&s, nx * (ny / 2 + 1) * sizeof(cufftComplex));
  fill<<<1, 64>>>(x, n);
  cufftHandle f, b;
  cufftPlan2d(&f, nx, ny, CUFFT_R2C);
  cufftPlan2d(&b, nx, ny, CUFFT_C2R);
  cufftExecR2C(f, x, s);
  cufftExecC2R(b, s, back);
  look<<<1, 64>>>(back, y, n);
  return 0;
}
"""


def test_c2r_of_a_2d_r2c_is_n_times_the_input(tmp_path):
    src = write(tmp_path, "c2r.cu", C2R)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", (cap.error, cap.stdout_tail)
    nx, ny = 4, 9
    x = ((np.arange(nx * ny) * 11) % 7 - 2.0).astype(np.float32)
    np.testing.assert_allclose(_r(cap, 1, 0)[:nx * ny], nx * ny * x, atol=1e-4)


# A cuFFT callback (cufftXt.h) is not emulated: the call stops the program, named with its line; the transform
# before it ran and the launch after it is never reached.
CALLBACK = """
#include <cstdio>
#include <cufft.h>
#include <cufftXt.h>
__device__ cufftReal load_scaled(void* in, size_t i, void*, void*) { return 2.0f * ((cufftReal*)in)[i]; }
__device__ cufftCallbackLoadR d_load = load_scaled;
__global__ void fill(cufftReal* x, int n) { int i = threadIdx.x; if (i < n) x[i] = (float)i; }
int main() {
  const int n = 16;
  cufftReal* x; cufftComplex* s;
  cudaMalloc(&x, n * sizeof(cufftReal)); cudaMalloc(&s, (n / 2 + 1) * sizeof(cufftComplex));
  fill<<<1, 32>>>(x, n);
  cufftHandle plan;
  cufftPlan1d(&plan, n, CUFFT_R2C, 1);
  cufftExecR2C(plan, x, s);
  cufftCallbackLoadR h_load;
  cudaMemcpyFromSymbol(&h_load, d_load, sizeof h_load);
  cufftXtSetCallback(plan, (void**)&h_load, CUFFT_CB_LD_REAL, nullptr);
  fill<<<1, 32>>>(x, n);
  return 0;
}
"""


def test_a_cufft_callback_stops_the_program_naming_the_call_and_line(tmp_path):
    src = write(tmp_path, "callback.cu", CALLBACK)
    cap = capture_program(src, timeout_s=60)
    assert [ln.kernel for ln in cap.launches] == ["fill"], (cap.status, cap.error)
    (stop,) = [x for x in cap.notes if "cufftXtSetCallback" in x.message]
    assert "not emulated" in stop.message and stop.line == line_of(CALLBACK, "cufftXtSetCallback("), stop


# The kernel-only path: a file of kernels on cufftComplex / cufftReal (no main) ports and verifies.
KERNELS = """
#include <cufft.h>
__device__ cufftComplex cmul(cufftComplex a, cufftComplex b) {
  cufftComplex c;
  c.x = a.x * b.x - a.y * b.y;
  c.y = a.x * b.y + a.y * b.x;
  return c;
}
__global__ void convolve(const cufftComplex* __restrict__ in, cufftComplex* __restrict__ out,
                         const cufftComplex* __restrict__ filter, int m, int rows) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= m) return;
  for (int r = 0; r < rows; r++) out[k * rows + r] = cmul(in[r * m + k], filter[k]);
}
__global__ void to_real(const char* in, cufftReal* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (cufftReal)((float)in[i] / 127.0f);
}
"""


def test_a_kernel_file_on_cufft_types_ports_and_verifies_without_its_program(tmp_path):
    from ksearch_engine.portfile import port_file

    src = tmp_path / "spectra.cu"
    src.write_text(textwrap.dedent(KERNELS).lstrip())
    res = {v.kernel: v for v in port_file(src, write=False).kernels}
    assert set(res) == {"convolve", "to_real"}
    for v in res.values():
        assert (v.status, v.workload) == ("verified", "inferred"), (v.kernel, v.reason)


def test_library_typedefs_are_one_table_for_parameters_and_port_headers():
    from ksearch_engine.translate.headers import LIBRARY_TYPEDEFS, type_aliases, with_library_typedefs

    aliases = type_aliases([])
    assert {k: aliases[k] for k in ("cufftReal", "cufftComplex", "cufftDoubleComplex", "cuComplex")} == \
        {"cufftReal": "float", "cufftComplex": "float2", "cufftDoubleComplex": "double2", "cuComplex": "float2"}
    assert set(LIBRARY_TYPEDEFS) <= set(aliases)
    own = ["typedef float2 cufftComplex;"]   # a file that defines one keeps its own
    assert with_library_typedefs(own, "cufftComplex* a; cufftReal r;") == ["typedef float cufftReal;"] + own
    assert with_library_typedefs(own, "float* a; // cufftReal") is own
