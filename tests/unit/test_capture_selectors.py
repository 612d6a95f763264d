"""Programs that choose their kernel by a positional number (`which = atoi(argv[1])`), programs that refuse to
run without it, kernels in headers reached through an include chain whose includer is linked with a main() higher
up, and the capture cache under concurrent writers. All sources are written here."""
from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from ksearch_engine import portfile
from ksearch_engine.portfile import find_program_and_sources, port_file, positional_selectors
from ksearch_engine.sim import capture_scale as cs
from tests.sources import write

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# kernel chosen by argv[1], passed on to a dispatcher whose parameter has another name; default 2
POSITIONAL = """
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
__global__ void shift_up(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
__global__ void doubled(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
__global__ void squared(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * x[i];
}
void dispatch(int variant, float* y, const float* x, int n) {
  switch (variant) {
    case 2: shift_up<<<(n + 127) / 128, 128>>>(y, x, n); break;
    case 5: doubled<<<(n + 127) / 128, 128>>>(y, x, n); break;
    case 9: squared<<<(n + 127) / 128, 128>>>(y, x, n); break;
    default: printf("no such variant %d\\n", variant); exit(1);
  }
}
int main(int argc, char** argv) {
  int n = 1000;
  int which = 2;
  if (argc > 1) which = atoi(argv[1]);
  float* h = (float*)malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) h[i] = 0.25f * (i % 13);
  float *dx, *dy;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMemcpy(dx, h, n * sizeof(float), cudaMemcpyHostToDevice);
  dispatch(which, dy, dx, n);
  cudaDeviceSynchronize();
  printf("variant %d done\\n", which);
  return 0;
}
"""

# refuses to run without its kernel number; the usage text has only a placeholder
REFUSES = """
#include <cstdio>
#include <cstdlib>
#include <string>
#include <cuda_runtime.h>
__global__ void negate(float* v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) v[i] = -v[i]; }
__global__ void halve(float* v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) v[i] *= 0.5f; }
int main(int argc, char** argv) {
  if (argc != 2) { fprintf(stderr, "usage: refuses <kernel number>\\n"); exit(EXIT_FAILURE); }
  int k = std::stoi(argv[1]);
  const int n = 640;
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  cudaMemset(d, 0, n * sizeof(float));
  if (k == 1) negate<<<n / 64, 64>>>(d, n);
  else if (k == 4) halve<<<n / 64, 64>>>(d, n);
  else { fprintf(stderr, "unknown kernel\\n"); return 1; }
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_positional_selector_values_come_from_the_dispatchers_switch():
    sel = positional_selectors([POSITIONAL])
    assert sel == [(1, "which", [5, 9, 0, 10, 2])]      # the start value (the bare run's) last
    assert positional_selectors([REFUSES]) == [(1, "k", [1, 4, 0, 5])]
    # read in a conditional expression, through a cast, or by sscanf
    assert positional_selectors(["int kernel = argc > 2 ? (int)strtol(argv[2], 0, 10) : 1;"]) == \
        [(2, "kernel", list(range(13)))]        # no value in the code: 0..12 for a name that says it chooses
    assert positional_selectors(['int v; sscanf(argv[1], "%d", &v); if (v == 3) go();']) == [(1, "v", [3, 0, 4])]
    # a size read from the command line is no selector
    assert positional_selectors(["int main(int c, char** v) { int rows = atoi(v[1]); int n = atoi(argv[1]); }"]) == []


@needs_gxx
def test_kernels_chosen_by_a_positional_number_are_captured_with_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "variants.cu", POSITIONAL)
    r = port_file(src, write=False)
    by = {k.kernel: k for k in r.kernels}
    for name in ("shift_up", "doubled", "squared"):
        assert by[name].status == "verified" and by[name].workload == "captured", (name, by[name].reason)
    assert any("`5`" in n for n in by["doubled"].notes) and any("`9`" in n for n in by["squared"].notes)


@needs_gxx
def test_a_program_that_refuses_to_run_without_its_kernel_number_is_run_with_each(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "refuses.cu", REFUSES)
    r = port_file(src, write=False)
    by = {k.kernel: k for k in r.kernels}
    assert by["negate"].workload == "captured" and by["negate"].status == "verified", by["negate"].reason
    assert by["halve"].workload == "captured" and by["halve"].status == "verified", by["halve"].reason
    assert r.capture.status == "ok" and r.capture.launches == 2
    note = r.capture.notes[0]
    assert "needs its kernel number as argument 1" in note and "refuses.cu:10" in note and "1, 4" in note


# a ladder of kernels in headers: lib/kernels/scale.cuh <- lib/all.cuh <- lib/dispatch.cu (no main), linked with
# the project's bench.cu (main, two folders up from the kernel)
LADDER = {
    "Makefile": "bench: bench.cu lib/dispatch.cu\n\tnvcc -o bench bench.cu lib/dispatch.cu\n",
    "lib/kernels/scale.cuh": """
        #pragma once
        template <const int TILE>
        __global__ void __launch_bounds__((TILE * 2) / 2, 1)
        scale_tiles(float* out, const float* in, float a, int n) {
          int i = blockIdx.x * TILE + threadIdx.x;
          if (i < n) out[i] = a * in[i];
        }
        """,
    "lib/all.cuh": '#pragma once\n#include "kernels/scale.cuh"\n',
    "lib/dispatch.h": "#pragma once\nvoid run_scale(float* out, const float* in, float a, int n);\n",
    "lib/dispatch.cu": """
        #include "all.cuh"
        #include "dispatch.h"
        void run_scale(float* out, const float* in, float a, int n) {
          const int tile = 64;
          scale_tiles<tile><<<(n + tile - 1) / tile, tile>>>(out, in, a, n);
        }
        """,
    "bench.cu": """
        #include <cstdlib>
        #include <cuda_runtime.h>
        #include "lib/dispatch.h"
        int main() {
          int n = 300;
          float* h = (float*)malloc(n * sizeof(float));
          for (int i = 0; i < n; i++) h[i] = (float)(i % 7);
          float *din, *dout;
          cudaMalloc(&din, n * sizeof(float)); cudaMalloc(&dout, n * sizeof(float));
          cudaMemcpy(din, h, n * sizeof(float), cudaMemcpyHostToDevice);
          run_scale(dout, din, 1.5f, n);
          cudaDeviceSynchronize();
          return 0;
        }
        """,
}


def _ladder(root: Path) -> Path:
    for name, text in LADDER.items():
        write(root, name, text)
    return root / "lib/kernels/scale.cuh"


def test_a_kernel_header_in_an_include_chain_finds_the_main_it_is_linked_with(tmp_path):
    k = _ladder(tmp_path / "proj")
    assert find_program_and_sources(k) == (tmp_path / "proj/bench.cu", [tmp_path / "proj/lib/dispatch.cu"])
    # above the project's root (its Makefile) nothing is looked at
    write(tmp_path, "other_main.cu", '#include "proj/lib/dispatch.h"\nint main() { run_scale(0, 0, 1.0f, 0); }\n')
    (tmp_path / "proj/bench.cu").unlink()
    assert find_program_and_sources(k) == (None, [])


@needs_gxx
def test_a_kernel_header_in_an_include_chain_is_verified_on_the_linked_programs_launches(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    r = port_file(_ladder(tmp_path / "proj"), write=False)
    assert r.capture.status == "ok", r.capture.error
    v = r.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason


def test_several_sizes_in_one_declaration_are_size_sites():
    text = "int main() {\n  int B = 4, T = 512, C = 384;\n  int n = min(T, C);\n  long big = (long)T * C;\n}\n"
    sites = {s.name: s for s in cs.host_sites({Path("m.cu"): text})}
    assert sites["T"].value == 512 and sites["C"].value == 384 and "B" not in sites and "n" not in sites
    assert text[sites["C"].start:sites["C"].end] == "384" and sites["C"].line == 2
    # the plan writes the new value in place of that declarator only
    new, _ = cs.apply(cs.ScalePlan(2, [(sites["C"], 192)], ["k"], "x"), {Path("m.cu"): text}, [])
    assert "int B = 4, T = 512, C = (192);" in new[Path("m.cu")]


# --- the capture cache under concurrent writers -------------------------------------------------------------
def test_publishing_a_capture_never_replaces_one_already_there(tmp_path):
    from ksearch_engine.sim.capture_models import Capture

    cached = tmp_path / "key"
    first = tmp_path / "key.tmpA"
    first.mkdir()
    (first / "a0.npy").write_bytes(b"first")
    one = portfile._publish(Capture(file="p.cu", dir=str(first), argv=["1"]), first, cached)
    assert one.dir == str(cached) and (cached / "a0.npy").read_bytes() == b"first" and not first.exists()
    # a second writer of the same key: the published folder (which a reader may be using) stays as it was
    second = tmp_path / "key.tmpB"
    second.mkdir()
    (second / "a0.npy").write_bytes(b"second")
    two = portfile._publish(Capture(file="p.cu", dir=str(second), argv=["1"]), second, cached)
    assert two.dir == str(cached) and (cached / "a0.npy").read_bytes() == b"first" and not second.exists()
    # a folder without a readable capture.json (a crashed writer, an older version) is replaced
    shutil.rmtree(cached)
    cached.mkdir()
    (cached / "junk").write_text("x")
    third = tmp_path / "key.tmpC"
    third.mkdir()
    portfile._publish(Capture(file="p.cu", dir=str(third)), third, cached)
    assert (cached / "capture.json").is_file() and not (cached / "junk").exists()


@needs_gxx
def test_concurrent_captures_of_one_program_all_see_whole_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "variants.cu", POSITIONAL)
    caps, errors = [], []

    def one():
        try:
            caps.append(portfile.capture_for(src, argv=["5"], timeout=60))
        except Exception as e:   # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(caps) == 3
    for cap in caps:
        assert cap.status == "ok" and cap.kernels() == ["doubled"], cap.error
        for ln in cap.launches:
            for a in ln.args:
                if a.before:
                    assert (Path(cap.dir) / a.before).is_file()
    assert [p.name for p in (tmp_path / "cache").iterdir() if ".tmp" in p.name] == []


# a benchmark over a list of square sizes, buffers allocated once at the largest (an SGEMM ladder's main)
SIZE_LIST = """
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
__global__ void add_mats(float* c, const float* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n * n) c[i] += a[i];
}
int main() {
  std::vector<int> SIZES = {64, 256, 512, 1024};
  int block_sizes[] = {128, 256, 512};
  long largest = SIZES[SIZES.size() - 1];
  float *a, *c;
  cudaMalloc(&a, sizeof(float) * largest * largest);
  cudaMalloc(&c, sizeof(float) * largest * largest);
  cudaMemset(a, 0, sizeof(float) * largest * largest);
  cudaMemset(c, 0, sizeof(float) * largest * largest);
  for (int n : SIZES) {
    int bs = block_sizes[n % 3];
    add_mats<<<(n * n + bs - 1) / bs, bs>>>(c, a, n);
  }
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_a_list_of_sizes_is_scaled_as_one_kind_of_size():
    sites = {s.name: s for s in cs.host_sites({Path("l.cu"): SIZE_LIST})}
    assert sorted(sites) == ["SIZES[1]", "SIZES[2]", "SIZES[3]"]      # 64 is below a size; block sizes are none
    ev = cs.Evidence("add_mats", (1, 1, 1), (256, 1, 1), {64}, [1024 * 1024, 1024 * 1024], 8 << 20, None, "oversize")
    pl = cs.plan(list(sites.values()), [ev], 1 << 20)
    new = {s.name: v for s, v in pl.changes}
    assert new["SIZES[3]"] < 1024 and all(new.get(f"SIZES[{i}]", sites[f"SIZES[{i}]"].value) <= new["SIZES[3]"]
                                          for i in (1, 2))


@needs_gxx
def test_a_program_looping_over_a_size_list_is_recorded_smaller(tmp_path):
    from ksearch_engine.sim.capture import capture_program
    cap = capture_program(write(tmp_path, "sizes.cu", SIZE_LIST), workdir=tmp_path / "cap", byte_budget=1 << 20)
    assert cap.status == "ok", cap.error
    usable = [ln for ln in cap.launches if not ln.too_large and not ln.sim_error]
    assert usable and all(ln.scaled and "SIZES[3]" in ln.scaled for ln in usable)   # none at the program's sizes
    assert not any(ln.sim_error for ln in cap.launches)       # no later size overran the buffers made smaller


def test_include_folders_named_by_the_build_files_are_searched(tmp_path):
    from ksearch_engine.sim import host_source as hs
    write(tmp_path, "a/CMakeLists.txt", "project(x)\n# include_directories(nope)\n"
                                        "include_directories(${PROJECT_SOURCE_DIR}/lib)\n"
                                        "target_include_directories(t PRIVATE \"third\" ${OTHER}/x)\n")
    write(tmp_path, "a/lib/h.h", "")
    write(tmp_path, "a/third/t.h", "")
    write(tmp_path, "b/Makefile", "app: app.cu\n\tnvcc -Iinc2 -I $(CURDIR)/more -o app app.cu\n")
    write(tmp_path, "b/inc2/x.h", "")
    write(tmp_path, "b/more/y.h", "")
    a = hs._declared_dirs((tmp_path / "a").resolve())
    assert [d.name for d, _b in a] == ["lib", "third"] and a[0][1] == "CMakeLists.txt"
    assert [d.name for d, _b in hs._declared_dirs((tmp_path / "b").resolve())] == ["inc2", "more"]
    found, how = hs._find("h.h", True, tmp_path / "a", [], (tmp_path / "a").resolve())
    assert found == (tmp_path / "a/lib/h.h").resolve() and how == "a folder CMakeLists.txt names"


@needs_gxx
def test_a_main_that_includes_through_a_cmake_include_folder_is_captured(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "proj"
    k = _ladder(root)
    (root / "Makefile").unlink()
    write(root, "CMakeLists.txt", "project(p LANGUAGES CXX CUDA)\ninclude_directories(${PROJECT_SOURCE_DIR}/lib)\n"
                                  "add_executable(bench bench.cu lib/dispatch.cu)\n")
    (root / "bench.cu").write_text((root / "bench.cu").read_text().replace('"lib/dispatch.h"', '"dispatch.h"'))
    r = port_file(k, write=False)
    assert r.capture.status == "ok", r.capture.error
    assert any("a folder CMakeLists.txt names" in n for n in r.capture.notes)
    assert r.kernels[0].status == "verified" and r.kernels[0].workload == "captured", r.kernels[0].reason


@needs_gxx
def test_the_case_that_reaches_the_wanted_kernel_is_run_first(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "variants.cu", POSITIONAL)
    said: list[str] = []
    r = port_file(src, kernels=["squared"], write=False, progress=said.append)
    assert r.kernels[0].workload == "captured" and r.kernels[0].status == "verified", r.kernels[0].reason
    runs = [m for m in said if m.startswith("running the program as")]
    # the runs go side by side, as many at a time as the machine has cores (up to 4): the first is the one needed
    assert "`variants 9`" in runs[0] and len(runs) <= max(1, min(4, os.cpu_count() or 1)), runs


@needs_gxx
def test_a_header_that_relies_on_a_macro_an_earlier_header_of_its_includer_defines(tmp_path, monkeypatch):
    """lib/all.cuh includes kernels/tile.cuh (which defines TILE) before kernels/scale.cuh, which uses TILE without
    including it: the port of scale.cuh sees TILE as the program's compiler does (the Metal port failed to compile:
    'TILE was not declared in this scope')."""
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "proj"
    for name, text in LADDER.items():
        if name == "lib/kernels/scale.cuh":
            text = text.replace("template <const int TILE>\n", "")
        elif name == "lib/all.cuh":
            text = '#pragma once\n#include "kernels/tile.cuh"\n#include "kernels/scale.cuh"\n'
        elif name == "lib/dispatch.cu":
            text = text.replace("scale_tiles<tile><<<", "scale_tiles<<<")
        write(root, name, text)
    write(root, "lib/kernels/tile.cuh", "#pragma once\n#define TILE 64\n")
    k = root / "lib/kernels/scale.cuh"
    assert "#define TILE" not in k.read_text() and "#include" not in k.read_text()
    r = port_file(k, write=False)
    assert r.capture.status == "ok", r.capture.error
    v = r.kernels[0]
    assert v.status == "verified" and v.workload == "captured", v.reason


# a -kernel=N option read into whichKernel, a dispatcher's switch on it with a nested switch on the block size, and a
# -type option that takes words (its usage text spells it "-type=<T>")
OPTION_LADDER = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
static int intOption(int argc, char** argv, const char* name, int dflt) {
  for (int i = 1; i < argc; i++)
    if (argv[i][0] == '-' && !strncmp(argv[i] + 1, name, strlen(name)) && argv[i][1 + strlen(name)] == '=')
      return atoi(argv[i] + 2 + strlen(name));
  return dflt;
}
static const char* wordOption(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; i++)
    if (argv[i][0] == '-' && !strncmp(argv[i] + 1, name, strlen(name))) return argv[i] + 2 + strlen(name);
  return 0;
}
#define getCmdLineArgumentInt(c, v, n) intOption(c, v, n, 3)
#define getCmdLineArgumentString(c, v, n, out) (*(out) = wordOption(c, v, n))
__global__ void plus_one(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] + 1.0f; }
__global__ void times_two(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }
template <int B> __global__ void tiled(float* y, const float* x, int n) {
  int i = blockIdx.x * B + threadIdx.x; if (i < n) y[i] = x[i] - 3.0f; }
__global__ void fallback(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = -x[i]; }
void run(int whichKernel, int threads, float* y, const float* x, int n) {
  switch (whichKernel) {
    case 0: plus_one<<<(n + threads - 1) / threads, threads>>>(y, x, n); break;
    case 1: times_two<<<(n + threads - 1) / threads, threads>>>(y, x, n); break;
    case 2:
      switch (threads) {
        case 1: tiled<1><<<n, 1>>>(y, x, n); break;
        case 128: tiled<128><<<(n + 127) / 128, 128>>>(y, x, n); break;
      }
      break;
    default: fallback<<<(n + threads - 1) / threads, threads>>>(y, x, n); break;
  }
}
int main(int argc, char** argv) {
  printf("usage: ladder [options]\n");
  printf("%s\n", "-kernel=<N>   which kernel");
  printf("%s\n", "-type=<T>     float or half");
  const char* type = 0;
  getCmdLineArgumentString(argc, argv, "type", &type);
  int whichKernel = getCmdLineArgumentInt(argc, argv, "kernel");
  int n = 1000;
  float* h = (float*)malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) h[i] = 0.5f * (i % 7);
  float *dx, *dy;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMemcpy(dx, h, n * sizeof(float), cudaMemcpyHostToDevice);
  run(whichKernel, 128, dy, dx, n);
  cudaDeviceSynchronize();
  return 0;
}
"""


@needs_gxx
def test_an_option_ladder_runs_only_the_values_whose_case_launches_a_missing_kernel(tmp_path, monkeypatch):
    """-kernel=0, 1 and 2 (the last through a nested switch on the block size) are the only runs: no value whose case
    reaches nothing (3 is the bare run's, 4..11 reach no kernel) and no -type=N (the option takes words)."""
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "ladder.cu", OPTION_LADDER)
    said: list[str] = []
    r = port_file(src, write=False, progress=said.append)
    by = {k.kernel: k for k in r.kernels}
    for name in ("plus_one", "times_two", "tiled", "fallback"):
        assert by[name].status == "verified" and by[name].workload == "captured", (name, by[name].reason)
    runs = sorted(m.split("with ", 1)[1].split(" ")[0] for m in said if m.startswith("running the program with"))
    assert runs == ["-kernel=0", "-kernel=1", "-kernel=2"], said
