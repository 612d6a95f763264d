"""Captures at smaller sizes (sim/capture_scale.py, capture.py's _smaller): a program whose launches are too big
for the byte budget, or too slow to check, is run again with the host-side sizes those launches show divided by a
power of two; programs written for these tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ksearch_engine.sim import capture as capture_mod
from ksearch_engine.sim import capture_scale as cs
from ksearch_engine.sim.capture import capture_program
from tests.sources import line_of, write

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


# two kernels; the size is a host-only #define, the kernels take it as a parameter; TILE is the kernels' own
BIG = """
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#define NUM_ITEMS (1 << 18)
#define TILE 256
__global__ void scale_by(float* x, int n, float a) {
  int i = blockIdx.x * TILE + threadIdx.x;
  if (i < n) x[i] = x[i] * a;
}
__global__ void add_into(const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] += x[i];
}
int main() {
  float* h = (float*)malloc(NUM_ITEMS * sizeof(float));
  for (int i = 0; i < NUM_ITEMS; i++) h[i] = (float)(i % 97);
  float *dx, *dy;
  cudaMalloc(&dx, NUM_ITEMS * sizeof(float));
  cudaMalloc(&dy, NUM_ITEMS * sizeof(float));
  cudaMemcpy(dx, h, NUM_ITEMS * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, h, NUM_ITEMS * sizeof(float), cudaMemcpyHostToDevice);
  scale_by<<<(NUM_ITEMS + TILE - 1) / TILE, TILE>>>(dx, NUM_ITEMS, 2.0f);
  add_into<<<64, 128>>>(dx, dy, NUM_ITEMS);
  cudaMemcpy(h, dy, NUM_ITEMS * sizeof(float), cudaMemcpyDeviceToHost);
  printf("y[5]=%.1f n=%d\\n", h[5], NUM_ITEMS);
  return 0;
}
"""


@needs_gxx
def test_oversized_launches_are_recorded_from_a_smaller_run(tmp_path):
    prog = write(tmp_path, "big.cu", BIG)
    cap = capture_program(prog, workdir=tmp_path / "cap", byte_budget=1 << 20)   # 1 MiB: each launch needs 2+
    assert cap.status == "ok", cap.error
    kernels = {ln.kernel: ln for ln in cap.launches if not ln.too_large}
    assert set(kernels) == {"scale_by", "add_into"}
    sc, add = kernels["scale_by"], kernels["add_into"]
    n = sc.args[1].value
    assert n < 1 << 18 and (1 << 18) % n == 0          # a power-of-two fraction of the program's own size
    assert sc.grid == (n // 256, 1, 1) and sc.block == (256, 1, 1)
    assert sc.scaled and "NUM_ITEMS" in sc.scaled
    # real contents of the smaller run: the kernel's own result
    x0 = cap.load(sc.args[0].before)
    assert x0.shape == (n,)
    np.testing.assert_array_equal(x0, (np.arange(n) % 97).astype(np.float32))
    np.testing.assert_array_equal(cap.load(sc.args[0].after), 2 * x0)
    np.testing.assert_array_equal(cap.load(add.args[1].after), 3 * x0)
    note = next(nt for nt in cap.notes if nt.kind == "scaled")
    assert "NUM_ITEMS from 262144 to" in note.message and "byte budget" in note.message
    assert (note.file, note.line) == ("big.cu", line_of(BIG, "#define NUM_ITEMS"))
    assert f"n={n}" in cap.stdout_tail      # the capture's ending is the smaller run's
    assert cap.seconds < 60


# sizes the program computes at run time: nothing to scale; the run at full size stands, as before
UNSCALABLE = """
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
__global__ void fill(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = i;
}
int main(int argc, char** argv) {
  int n = 1;
  for (int k = 0; k < 17; k++) n *= 2;
  int *d, *e;
  cudaMalloc(&d, n * sizeof(int));
  cudaMalloc(&e, 32 * sizeof(int));
  fill<<<n / 256, 256>>>(d, n);
  fill<<<1, 32>>>(e, 32);
  printf("done\\n");
  return 0;
}
"""


@needs_gxx
def test_without_a_size_to_scale_the_full_run_stands(tmp_path):
    cap = capture_program(write(tmp_path, "u.cu", UNSCALABLE), workdir=tmp_path / "cap", byte_budget=1 << 19)
    assert cap.status == "ok", cap.error
    assert [ln.too_large for ln in cap.launches] == [True, False]
    assert not any(ln.scaled for ln in cap.launches) and not any(n.kind == "scaled" for n in cap.notes)
    assert "done" in cap.stdout_tail and cap.launch_counts == {"fill": 2}


# one block per option, each block busy: the grid is the host's NOPT (no scalar or buffer shows it)
SLOW = """
#include <cstdio>
#include <cuda_runtime.h>
#define STEPS 40
__device__ float d_out[8192];
__global__ void price(int steps) {
  __shared__ float v[64];
  v[threadIdx.x] = threadIdx.x;
  for (int s = 0; s < steps; s++) {
    __syncthreads();
    float t = v[(threadIdx.x + 1) % 64] * 0.5f + 1.0f;
    __syncthreads();
    v[threadIdx.x] = t;
  }
  if (threadIdx.x == 0) d_out[blockIdx.x] = v[0] + blockIdx.x;
}
int main() {
  const int NOPT = 8192;
  price<<<NOPT, 64>>>(STEPS);
  float h[8192];
  cudaMemcpyFromSymbol(h, d_out, sizeof(h));
  printf("%.2f\\n", h[1]);
  return 0;
}
"""


@needs_gxx
def test_a_launch_too_slow_to_check_is_recorded_from_a_smaller_grid(tmp_path, monkeypatch):
    monkeypatch.setattr(capture_mod, "SLOW_S", 0.2)
    cap = capture_program(write(tmp_path, "slow.cu", SLOW), workdir=tmp_path / "cap")
    assert cap.status == "ok", cap.error
    (ln,) = [ln for ln in cap.launches if ln.kernel == "price"]
    assert ln.grid[0] < 8192 and 8192 % ln.grid[0] == 0 and ln.grid[0] >= 32
    assert ln.scaled and "NOPT" in ln.scaled and ln.seconds is not None
    note = next(nt for nt in cap.notes if nt.kind == "scaled")
    assert "too slow" in note.message and note.line == line_of(SLOW, "const int NOPT")


def test_host_sites_leave_out_what_device_code_uses():
    text = """
#define WIDTH 4096
#define HALF (WIDTH / 2)
#define COUNT (1 << 20)
#define LIMIT 8192
__constant__ float table[LIMIT];
__global__ void k(float* x, int N) { if (threadIdx.x < HALF) x[threadIdx.x] = N; }
static const int CAP = 3 * 1024;
int main() {
  const unsigned int N = COUNT / 4;
  for (int i = 1024; i < 2048; i++) {}
  dim3 dims(10 * 4 * 32, 640, 1);
  dim3 grid(1024);
  k<<<grid, 256>>>(0, N);
}
"""
    sites = {s.name: s for s in cs.host_sites({Path("p.cu"): text}, ["-n=100000", "7"])}
    # HALF is the kernel's; WIDTH through it; LIMIT sizes a __constant__ array; a loop's counter is no size
    assert set(sites) == {"COUNT", "CAP", "N", "dims.x", "dims.y", "grid.x", "argument 1 (-n=100000)"}
    assert sites["N"].value == 262144 and sites["N"].local           # a kernel's parameter named N: not the same
    assert sites["dims.x"].value == 1280 and sites["CAP"].value == 3072



def test_a_size_that_lays_out_a_struct_a_kernel_takes_is_the_kernels():
    # `struct SoA { float x[LEN]; ... }` taken by a kernel: LEN is its layout, so a smaller run would record
    # launches of another kernel than the one ported (and a typedef'd struct, nested in another, the same)
    text = """
#define LEN (1 << 22)
#define ROWS 512
#define HOST_ONLY (1 << 20)
struct SoA { float x[LEN]; float y[LEN]; };
typedef struct { int v[ROWS]; } Row;
struct Outer { Row r; };
__global__ void k(SoA* a, Outer* o, int n) { int i = threadIdx.x; if (i < n) a->y[i] = a->x[i] + o->r.v[0]; }
int main() {
  int n = HOST_ONLY;
  k<<<n / 256, 256>>>(0, 0, n);
}
"""
    names = cs.device_names({Path("p.cu"): text})
    assert {"LEN", "ROWS"} <= names and "HOST_ONLY" not in names
    sites = {s.name for s in cs.host_sites({Path("p.cu"): text})}
    assert "LEN" not in sites and "ROWS" not in sites and "HOST_ONLY" in sites

def test_evaluate_integer_expressions():
    known = {"A": 32}
    assert cs.evaluate("10 * 4 * A", known) == 1280
    assert cs.evaluate("(1 << 22)", known) == 4194304
    assert cs.evaluate("4 * 1048576u", known) == 4194304
    assert cs.evaluate("0x100 + 010", known) == 264
    assert cs.evaluate("-7 / 2", known) == -3                          # C truncates toward zero
    assert cs.evaluate("sizeof(float) * 4", known) is None
    assert cs.evaluate("B * 2", known) is None
    assert cs.evaluate("1.5 * 4", known) is None


def test_plan_prefers_scalars_and_buffers_over_grid_dimensions():
    sites = [cs.SizeSite("define", "SIZE", 1 << 22), cs.SizeSite("var", "bins", 1024, local=True)]
    ev = cs.Evidence(kernel="count", grid=(1024, 1, 1), block=(32, 1, 1), scalars={1 << 22},
                     counts=[(1 << 22) + 4096], need=16 << 20, seconds=None, why="oversize")
    pl = cs.plan(sites, [ev], 64 << 20)
    assert [(s.name, new) for s, new in pl.changes] == [("SIZE", (1 << 22) // pl.factor)]
    # only a grid dimension shows it: that is taken (one block per option)
    ev2 = cs.Evidence(kernel="opt", grid=(1024, 1, 1), block=(128, 1, 1), scalars=set(), counts=[], need=0,
                      seconds=30.0, why="slow")
    pl2 = cs.plan([cs.SizeSite("var", "OPT_N", 1024, local=True)], [ev2], 64 << 20)
    ((s, new),) = pl2.changes
    assert s.name == "OPT_N" and 32 <= new < 1024


def test_apply_writes_the_smaller_values_on_their_lines():
    f = Path("p.cu")
    text = "#define N (1 << 20)  // items\nint main(int argc, char** argv) {\n  dim3 d(2048, 4096);\n}\n"
    sites = cs.host_sites({f: text}, ["-size=65536"])
    ev = cs.Evidence(kernel="k", grid=(64, 64, 1), block=(32, 32, 1), scalars={1 << 20, 2048, 4096, 65536},
                     counts=[], need=64 << 20, seconds=None, why="oversize")
    pl = cs.plan(sites, [ev], 64 << 20)
    out, argv = cs.apply(pl, {f: text}, ["-size=65536"])
    lines = out[f].splitlines()
    assert len(lines) == 4 and lines[0].startswith("#define N (") and lines[0].endswith("// items")
    new = dict((s.name, v) for s, v in pl.changes)
    assert lines[0] == f"#define N ({new['N']})  // items"
    assert lines[2] == f"  dim3 d(({new['d.x']}), ({new['d.y']}));"
    assert argv == [f"-size={new['argument 1 (-size=65536)']}"]
    assert all(v < old for (s, v), old in zip(pl.changes, [s.value for s, _ in pl.changes]))


def test_launches_for_prefers_launches_quick_to_replay():
    from ksearch_engine.portfile import _launches_for
    from ksearch_engine.sim.capture_models import Capture, LaunchRecord

    def rec(i, secs, grid):
        return LaunchRecord(index=i, kernel="k", grid=(grid, 1, 1), block=(32, 1, 1), args=[], seconds=secs)
    cap = Capture(file="p.cu", dir=".", launches=[rec(0, 30.0, 1024), rec(1, 0.2, 32), rec(2, 0.1, 16)])
    assert [ln.index for ln in _launches_for(cap, "k")] == [1, 2]
    slow_only = Capture(file="p.cu", dir=".", launches=[rec(0, 30.0, 1024), rec(1, 9.0, 512)])
    assert [ln.index for ln in _launches_for(slow_only, "k")] == [1]


# the mode is the program's third argument, as its README documents it; mode 0 launches another kernel
MODES = """
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
__global__ void solver_a(float* x) { x[threadIdx.x] += 1.0f; }
__global__ void solver_b(float* x) { x[threadIdx.x] *= 2.0f; }
int main(int argc, char** argv) {
  if (argc < 4) { printf("usage: modes steps size mode\\n"); return 1; }
  int mode = atoi(argv[3]);
  float* d;
  cudaMalloc(&d, 32 * sizeof(float));
  cudaMemset(d, 0, 32 * sizeof(float));
  if (mode == 1) solver_a<<<1, 32>>>(d);
  else solver_b<<<1, 32>>>(d);
  cudaDeviceSynchronize();
  return 0;
}
"""


@needs_gxx
def test_a_documented_mode_argument_is_varied_for_kernels_it_did_not_launch(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from ksearch_engine.portfile import PortReport, _capture, _mode_captures
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "modes.cu", MODES)
    write(tmp_path, "README", "Run it as:\n\n    ./modes 100 100 1\n")
    cap = _capture(src, [], {}, [str(tmp_path)], 30, PortReport(file=str(src)), lambda _m: None)
    assert cap.argv == ["100", "100", "1"] and cap.kernels() == ["solver_a"]
    found = _mode_captures(src, cap, [SimpleNamespace(name="solver_a"), SimpleNamespace(name="solver_b")], [], {},
                           [str(tmp_path)], 30, lambda _m: None)
    other, line = found["solver_b"]
    assert line == "100 100 0" and other.kernels() == ["solver_b"]


def test_launches_for_prefers_launches_without_null_pointers():
    from ksearch_engine.portfile import _launches_for
    from ksearch_engine.sim.capture_models import ArgRecord, Capture, LaunchRecord

    def rec(i, kind):
        arg = ArgRecord(name="opt", ctype="unsigned int *", kind=kind, dtype="uint32", buffer=1 if kind == "buffer" else None,
                        before="x.npy" if kind == "buffer" else None)
        return LaunchRecord(index=i, kernel="k", grid=(4, 1, 1), block=(32, 1, 1), args=[arg], seconds=0.01)
    cap = Capture(file="p.cu", dir=".", launches=[rec(0, "null"), rec(1, "buffer"), rec(2, "unknown_pointer")])
    assert [ln.index for ln in _launches_for(cap, "k")] == [1]
    only_null = Capture(file="p.cu", dir=".", launches=[rec(0, "null")])
    assert [ln.index for ln in _launches_for(only_null, "k")] == [0]    # the check then says why


# the program reads a word option (-type=float) before the kernel-choosing one (-kernel=N)
OPTIONS = """
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
static int getCmdLineArgumentInt(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; i++)
    if (!strncmp(argv[i] + 1, name, strlen(name)) && argv[i][strlen(name) + 1] == '=') return atoi(argv[i] + strlen(name) + 2);
  return 0;
}
static bool getCmdLineArgumentString(int argc, char** argv, const char* name, char** out) { *out = nullptr; return false; }
__global__ void first(float* x) { x[threadIdx.x] = 1.0f; }
__global__ void second(float* x) { x[threadIdx.x] = 2.0f; }
int main(int argc, char** argv) {
  char* type = nullptr;
  getCmdLineArgumentString(argc, argv, "type", &type);
  int which = getCmdLineArgumentInt(argc, argv, "kernel");
  float* d;
  cudaMalloc(&d, 32 * sizeof(float));
  if (which == 1) second<<<1, 32>>>(d); else first<<<1, 32>>>(d);
  cudaDeviceSynchronize();
  return 0;
}
"""


@needs_gxx
def test_kernel_options_are_tried_before_word_options(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from ksearch_engine import portfile
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "opts.cu", OPTIONS)
    said: list[str] = []
    cap = portfile._capture(src, [], {}, [str(tmp_path)], 30, portfile.PortReport(file=str(src)), said.append)
    assert cap.kernels() == ["first"]
    found = portfile._mode_captures(src, cap, [SimpleNamespace(name="first"), SimpleNamespace(name="second")], [], {},
                                    [str(tmp_path)], 30, said.append)
    assert found["second"][1] == "-kernel=1"
    assert not any("-type=" in m for m in said)     # a word option is never given numbers


@needs_gxx
def test_a_program_slow_to_build_is_not_built_again_smaller(tmp_path, monkeypatch):
    monkeypatch.setattr(capture_mod, "SCALE_BUILD_S", -1.0)    # every build counts as slow
    cap = capture_program(write(tmp_path, "big.cu", BIG), workdir=tmp_path / "cap", byte_budget=1 << 20)
    assert cap.status == "ok", cap.error
    assert [ln.too_large for ln in cap.launches] == [True, True]      # as recorded at the program's own sizes
    assert not any(n.kind == "scaled" for n in cap.notes) and "n=262144" in cap.stdout_tail


# sizes that multiply: each buffer holds B * T * C elements and no size alone shows in a launch (a training
# loop's batch, sequence and channel counts, as local variables of main)
PRODUCT = """
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
__global__ void residual(float* out, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
int main() {
  int B = 4;
  int T = 1024;
  int C = 384;
  size_t n = (size_t)B * T * C;
  float* h = (float*)malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) h[i] = (float)(i % 13);
  float *a, *b, *o;
  cudaMalloc(&a, n * sizeof(float)); cudaMalloc(&b, n * sizeof(float)); cudaMalloc(&o, n * sizeof(float));
  cudaMemcpy(a, h, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(b, h, n * sizeof(float), cudaMemcpyHostToDevice);
  residual<<<(int)((n + 255) / 256), 256>>>(o, a, b, (int)n);
  cudaMemcpy(h, o, n * sizeof(float), cudaMemcpyDeviceToHost);
  printf("%f\\n", h[7]);
  return 0;
}
"""


@needs_gxx
def test_sizes_that_multiply_into_a_buffer_are_scaled_together(tmp_path):
    prog = write(tmp_path, "product.cu", PRODUCT)
    cap = capture_program(prog, workdir=tmp_path / "cap", byte_budget=4 << 20)   # each launch needs 18 MB
    assert cap.status == "ok", cap.error
    (ln,) = [ln for ln in cap.launches if not ln.too_large]
    n = ln.args[3].value
    assert n < 4 * 1024 * 384 and n % 4 == 0
    note = next(nt for nt in cap.notes if nt.kind == "scaled")
    assert "T from 1024 to" in note.message and "C from 384 to" in note.message, note.message
    np.testing.assert_array_equal(cap.load(ln.args[0].after), 2 * (np.arange(n) % 13).astype(np.float32))


def test_a_derived_size_scales_through_the_sizes_it_is_computed_from():
    """`int total = B * H * T * T;` names the grid (`total / block` blocks) and the score buffer's length exactly,
    so it matches the launch best; dividing it alone would shrink the grid and leave the buffers as big. The plan
    divides T, the literal size it is made of (twice a factor of the product)."""
    T = cs.SizeSite("var", "T", 256, expr="256", local=True)
    total = cs.SizeSite("var", "total", 8 * 12 * 256 * 256, expr="B * H * T * T", idents=["B", "H", "T", "T"],
                        local=True)
    n = 8 * 12 * 256 * 256
    ev = cs.Evidence(kernel="scores", grid=(n // 256, 1, 1), block=(256, 1, 1), scalars={8, 256, 12},
                     counts=[n, 8 * 256 * 3 * 384], need=4 * n + 4 * 8 * 256 * 3 * 384, seconds=None, why="oversize")
    pl = cs.plan([T, total], [ev], 64 << 20)
    assert [s.name for s, _new in pl.changes] == ["T"], pl.changes
    (new,) = [v for _s, v in pl.changes]
    assert 32 <= new < 256 and 4 * 8 * 12 * new * new < (64 << 20) // 4


SLOW_REFERENCE = """
#include <cstdio>
#include <cstdlib>
__global__ void twice(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
int main() {
  int N = 32768;
  float* h = (float*)malloc(N * sizeof(float));
  volatile float acc = 0.0f;
  for (int i = 0; i < N; i++)          // a CPU reference quadratic in N: slow at the program's own size
    for (int j = 0; j < N; j++) acc = acc + (float)((i ^ j) & 7);
  for (int i = 0; i < N; i++) h[i] = (float)(i % 11);
  float *dx, *dy;
  cudaMalloc(&dx, N * sizeof(float));
  cudaMalloc(&dy, N * sizeof(float));
  cudaMemcpy(dx, h, N * sizeof(float), cudaMemcpyHostToDevice);
  twice<<<(N + 255) / 256, 256>>>(dx, dy, N);
  cudaDeviceSynchronize();
  printf("acc %f\\n", (float)acc);
  return 0;
}
"""


@needs_gxx
def test_a_program_whose_time_runs_out_before_its_first_launch_is_run_again_smaller(tmp_path):
    """No launch says which size matters: the host's plain sizes shrink together (N 32768 -> 4096) and the kernel
    is recorded from that run, with a note naming the size."""
    cap = capture_program(write(tmp_path, "slowref.cu", SLOW_REFERENCE), workdir=tmp_path / "cap", timeout_s=3)
    assert cap.status == "ok", cap.error
    (ln,) = cap.launches
    assert ln.kernel == "twice" and ln.args[2].value == 4096
    note = next(nt for nt in cap.notes if nt.kind == "scaled")
    assert "N from 32768 to 4096" in note.message and "too slow" in note.message


def test_a_byte_count_the_host_keeps_is_a_size_of_the_buffer_it_allocates():
    # `uint byteCount = 64 * 1048576; cudaMalloc(&d, byteCount)` read by a kernel as uint: the launch shows 16 Mi
    # elements, the host holds the byte count; it is the site to scale
    launch = {"kernel": "count", "grid": [4096, 1, 1], "block": [64, 1, 1],
              "args": [{"kind": "buffer", "nbytes": 64 << 20, "elem_bytes": 4, "dtype": "uint32", "buffer": 1,
                        "offset_bytes": 0}, {"kind": "scalar", "value": 16 << 20}]}
    ev = cs.evidence_of(launch, "oversize")
    assert cs.matches(64 << 20, ev) == 2
    pl = cs.plan([cs.SizeSite("var", "byteCount", 64 << 20, local=True)], [ev], 16 << 20)
    ((s, new),) = pl.changes
    assert s.name == "byteCount" and new <= 16 << 20


def test_a_size_rounded_down_by_the_host_still_matches_its_buffer():
    # `int MemorySize = (int)(MEM_SIZE / f) & 0xffffff00;` with MEM_SIZE = 50000000: buffers of 49999872 bytes
    ev = cs.Evidence(kernel="copy", grid=(64, 1, 1), block=(256, 1, 1), scalars={49999872},
                     counts=[49999872], need=2 * 49999872, seconds=None, why="oversize")
    assert cs.matches(50000000, ev) == 2
    assert cs.matches(40000000, ev) == 0


PER_SM = """
#include <cuda_runtime.h>
__global__ void init_state(float* st, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) st[i] = i * 0.5f;
}
int main() {
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  int blocks = p.multiProcessorCount * 8;   // one wave of blocks per multiprocessor, 8 deep
  int n = blocks * 256;
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  init_state<<<blocks, 256>>>(d, n);
  cudaDeviceSynchronize();
  return 0;
}
"""


@needs_gxx
def test_a_grid_sized_from_the_multiprocessor_count_is_recorded_on_a_smaller_device(tmp_path):
    src = write(tmp_path, "per_sm.cu", PER_SM)
    cap = capture_program(src, timeout_s=30, byte_budget=256 << 10)
    assert cap.status == "ok", cap.error
    (ln,) = [ln for ln in cap.launches if not ln.too_large]
    assert ln.grid == (cs.SMALL_DEVICE_SMS * 8, 1, 1)
    out = cap.load(ln.args[0].after)
    np.testing.assert_array_equal(out, 0.5 * np.arange(cs.SMALL_DEVICE_SMS * 8 * 256))
    assert any("multiprocessor count from 132 to 4" in n.message for n in cap.notes), [n.message for n in cap.notes]


def test_a_size_made_as_a_power_of_two_scales_through_its_exponent():
    main, ref = Path("fwt.cu"), Path("fwt_ref.cpp")
    texts = {
        main: "const int log2N = 22;\nconst int N = 1 << log2N;\nint main() { return N; }\n",
        # a function's own N, made of its parameter: another variable, neither a size nor a reason to drop N
        ref: "void reference(float* o, int log2n) {\n  const int N = 1 << log2n;\n  for (int i = 0; i < N; i++) o[i] = 0;\n}\n",
    }
    sites = cs.host_sites(texts)
    assert sorted((s.kind, s.name, s.value) for s in sites) == [("log2", "log2N", 1 << 22), ("var", "N", 1 << 22)]
    ev = cs.Evidence(kernel="fwt", grid=(4096, 1, 1), block=(256, 1, 1), scalars={1 << 22},
                     counts=[1 << 22], need=16 << 20, seconds=None, why="oversize")
    pl = cs.plan(sites, [ev], 4 << 20)
    ((s, new),) = pl.changes
    assert s.kind == "log2" and new < 1 << 22
    out, _ = cs.apply(pl, texts, [])
    assert out[main].splitlines()[0] == f"const int log2N = ({new.bit_length() - 1});"
    assert out[ref] == texts[ref]


SMALL_PATH = """
#include <cstdio>
#include <cstdlib>
#include <cstring>
__global__ void small_rows(float* a, int n) { int i = threadIdx.x; if (i < n) a[i] = 1.0f + i; }
__global__ void large_rows(float* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = 2.0f * i;
}
int main(int argc, char** argv) {
  int n = 0;
  for (int i = 1; i < argc; i++) if (!strncmp(argv[i], "--size=", 7)) n = atoi(argv[i] + 7);
  if (n <= 0) { printf("Usage: %s --size=<n>\\\\n", argv[0]); return 1; }
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  if (n <= 256) small_rows<<<1, 256>>>(d, n);   // one block holds a small problem
  else large_rows<<<(n + 255) / 256, 256>>>(d, n);
  return 0;
}
"""


def test_a_kernel_used_only_at_small_sizes_is_captured_from_a_smaller_run(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from ksearch_engine.portfile import PortReport, _capture, _mode_captures
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "paths.cu", SMALL_PATH)
    write(tmp_path, "README", "Run it as:\n\n    ./paths --size=1024\n")
    cap = _capture(src, [], {}, [str(tmp_path)], 30, PortReport(file=str(src)), lambda _m: None)
    assert cap.argv == ["--size=1024"] and cap.kernels() == ["large_rows"]
    found = _mode_captures(src, cap, [SimpleNamespace(name="small_rows"), SimpleNamespace(name="large_rows")], [],
                           {}, [str(tmp_path)], 30, lambda _m: None)
    other, line = found["small_rows"]
    assert line == "--size=128" and other.kernels() == ["small_rows"]


def test_an_upper_bound_is_not_scaled_below_its_lower_bound():
    # the program clamps (or rejects) sizes outside [k_dim_min, k_dim_max]: a smaller run keeps k_dim_min
    texts = {Path("fd.h"): "#define k_dim_min 96\n#define k_dim_max 376\n#define N_MAX 4096\n"}
    sites = {s.name: s for s in cs.host_sites(texts)}
    assert sites["k_dim_max"].floor == 96 and sites["N_MAX"].floor == 0
    ev = cs.Evidence(kernel="fd", grid=(12, 24, 1), block=(32, 16, 1), scalars={376}, counts=[376 ** 3],
                     need=4 * 376 ** 3 * 4, seconds=None, why="oversize")
    pl = cs.plan([sites["k_dim_max"]], [ev], 64 << 20)
    assert [(s.name, new) for s, new in pl.changes] == [("k_dim_max", 96)]


@needs_gxx
def test_a_size_in_a_header_beside_the_programs_folder_is_scaled(tmp_path):
    # src/app.cu includes ../inc/sizes.h: a project's own header in a folder beside the program's
    write(tmp_path, "proj/inc/sizes.h", "#pragma once\n#define N_ITEMS (1 << 18)\n")
    src = write(tmp_path, "proj/src/app.cu", """
        #include <cuda_runtime.h>
        #include "../inc/sizes.h"
        __global__ void twice(float* x, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) x[i] = 2.0f * i;
        }
        int main() {
          float* d;
          cudaMalloc(&d, N_ITEMS * sizeof(float));
          twice<<<(N_ITEMS + 255) / 256, 256>>>(d, N_ITEMS);
          cudaDeviceSynchronize();
          return 0;
        }
    """)
    cap = capture_program(src, timeout_s=30, byte_budget=256 << 10)
    assert cap.status == "ok", cap.error
    (ln,) = [ln for ln in cap.launches if not ln.too_large]
    n = [a.value for a in ln.args if a.kind == "scalar"][0]
    assert n < 1 << 18 and ln.scaled and "N_ITEMS" in ln.scaled


# BIG with its kernel chosen by argv[1] (as llm.c's dev programs choose theirs)
BIG_CHOSEN = BIG.replace("int main() {", "int main(int argc, char** argv) {\n  int which = argc > 1 ? atoi(argv[1]) : 1;") \
    .replace("  scale_by<<<", "  if (which == 1) scale_by<<<").replace("  add_into<<<", "  else add_into<<<")


@needs_gxx
def test_the_same_program_run_again_with_another_kernel_starts_at_the_smaller_sizes(tmp_path, monkeypatch):
    # the first run (kernel 1) stops at its oversized launch and runs again smaller; the second (kernel 2, as
    # portfile's kernel-choosing runs make it) starts at the sizes the first chose: no run at the program's own
    # sizes (its workdir has no launch log of its own), the same kind of scaled launch, the smaller run's ending
    monkeypatch.setattr(capture_mod, "_FIRST_PLANS", {})
    prog = write(tmp_path, "chosen.cu", BIG_CHOSEN)
    first = capture_program(prog, workdir=tmp_path / "one", byte_budget=1 << 20)
    assert first.status == "ok" and [ln.kernel for ln in first.launches if ln.scaled] == ["scale_by"], first.error
    assert (tmp_path / "one" / "launches.jsonl").exists()
    second = capture_program(prog, argv=["2"], workdir=tmp_path / "two", byte_budget=1 << 20)
    assert second.status == "ok", second.error
    add = [ln for ln in second.launches if ln.kernel == "add_into" and not ln.too_large]
    assert add and add[0].scaled and "NUM_ITEMS" in add[0].scaled
    assert not (tmp_path / "two" / "launches.jsonl").exists()
    n = add[0].args[2].value
    assert n == first.launches[-1].args[1].value and f"n={n}" in second.stdout_tail
    x0 = second.load(add[0].args[0].before)
    np.testing.assert_array_equal(second.load(add[0].args[1].after), x0 + (np.arange(n) % 97).astype(np.float32))
