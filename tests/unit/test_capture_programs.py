"""Launch capture of whole programs that do not run bare (sim/capture.py, ksim_host.h): documented command
lines, missing input files, benchmark loops past the time budget, multi-warp cooperative-groups tiles, OpenMP.

Every program here is written for these tests and runs on the CPU runtime for real."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from ksearch_engine.sim.capture import capture_program, documented_command_lines
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


SIZED = """
#include <cstdio>
#include <cstdlib>
__global__ void fill(float* o, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = v * i;
}
int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "Usage: %s <n> <value>\\n", argv[0]); return 1; }
  int n = atoi(argv[1]);
  float v = (float)atof(argv[2]);
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  fill<<<(n + 63) / 64, 64>>>(d, n, v);
  cudaFree(d);
  return 0;
}
"""


def test_documented_command_line_runs_a_program_that_needs_arguments(tmp_path):
    src = write(tmp_path, "sized.cu", SIZED)
    write(tmp_path, "README", """
        Sized fill.
        Usage: sized <n> <value>
        Example:
          ./sized 100 2.5 > out.txt
    """)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    assert cap.argv == ["100", "2.5"]
    (ln,) = cap.launches
    assert [a.value for a in ln.args if a.kind == "scalar"] == [100, 2.5]
    out = np.load(f"{cap.dir}/{ln.args[0].after}")
    assert np.allclose(out[:100], 2.5 * np.arange(100))
    (note,) = [n for n in cap.notes if n.kind == "argv"]
    assert note.file == "README" and note.line == 5 and "./sized 100 2.5" in note.message


def test_documented_sizes_are_scaled_down_and_placeholders_skipped(tmp_path):
    src = write(tmp_path, "sized.cu", SIZED)
    write(tmp_path, "run.sh", "#!/bin/sh\n./sized n value\n./sized 1048576 1\n")
    runs = documented_command_lines(src)
    assert [r.argv for r in runs] == [["1048576", "1"]]
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    assert cap.argv == ["4096", "1"]
    assert "scaled down" in [n for n in cap.notes if n.kind == "argv"][0].message


FROM_FILE = """
#include <cstdio>
#include <cstdlib>
__global__ void fill(float* o, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = v * i;
}
int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "Usage: %s <sizes file> <value>\\n", argv[0]); return 1; }
  FILE* f = fopen(argv[1], "r");
  int n = 0;
  if (!f || fscanf(f, "%d", &n) != 1) return 1;
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  fill<<<(n + 63) / 64, 64>>>(d, n, (float)atof(argv[2]));
  return 0;
}
"""


def test_documented_command_line_naming_an_absent_file_is_not_run(tmp_path):
    src = write(tmp_path, "sized.cu", FROM_FILE)
    write(tmp_path, "README.txt", "Run it as:\n$ ./sized ../data/sizes.txt 3\n")
    cap = capture_program(src, timeout_s=30)
    # argv[1] is a file name: no size is made up for it, and no input file either
    assert cap.status == "failed" and not cap.launches and cap.argv == []
    assert cap.error.startswith("README.txt:2:") and "../data/sizes.txt" in cap.error and "--arg" in cap.error


def test_sizes_are_chosen_from_the_arguments_the_code_converts_to_numbers(tmp_path):
    # no README: the usage message names placeholders only, and the code reads both arguments as numbers
    src = write(tmp_path, "sized.cu", SIZED)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    assert cap.argv == ["32", "0.5"]
    (ln,) = cap.launches
    assert [a.value for a in ln.args if a.kind == "scalar"] == [32, 0.5]
    (note,) = [n for n in cap.notes if n.kind == "argv"]
    assert "ksearch chose the sizes (32, 0.5)" in note.message and "--arg" in note.message


OPTIONS = """
#include <cstdio>
#include <cstdlib>
#include <cstring>
__global__ void ramp(float* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = 0.5f * i;
}
int main(int argc, char** argv) {
  int n = 0;
  const char* input = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-s") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-i") && i + 1 < argc) input = argv[++i];
  }
  if (n <= 0 && !input) { printf("Usage: %s [-v] [-s matrix_size|-i input_file]\\n", argv[0]); return 1; }
  if (input) { FILE* f = fopen(input, "r"); if (!f || fscanf(f, "%d", &n) != 1) return 1; }
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  ramp<<<(n + 31) / 32, 32>>>(d, n);
  return 0;
}
"""


def test_a_size_option_named_by_the_usage_message_is_given_a_small_value(tmp_path):
    src = write(tmp_path, "opts.cu", OPTIONS)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    assert cap.argv == ["-s", "32"]   # not -i: a file is never made up
    (ln,) = cap.launches
    assert [a.value for a in ln.args if a.kind == "scalar"] == [32]
    (note,) = [n for n in cap.notes if n.kind == "argv"]
    assert "-s matrix_size" in note.message


NAMED = """
#include <cstdio>
#include <cstdlib>
#include <cstring>
__global__ void square(float* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = (float)i * i;
}
int main(int argc, char** argv) {
  if (argc < 4) { fprintf(stderr, "usage: %s n infile outfile (infile read only if n <= 0)\\n", argv[0]); return 1; }
  int n = atoi(argv[1]);
  char in[256], out[256];
  strcpy(in, argv[2]);
  strcpy(out, argv[3]);
  if (n <= 0) { FILE* f = fopen(in, "r"); if (!f || fscanf(f, "%d", &n) != 1) return 2; }
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  square<<<(n + 31) / 32, 32>>>(d, n);
  float h[64];
  cudaMemcpy(h, d, sizeof(float) * (n < 64 ? n : 64), cudaMemcpyDeviceToHost);
  FILE* g = fopen(out, "w");
  if (!g) { fprintf(stderr, "cannot write %s\\n", out); return 3; }
  fprintf(g, "%f\\n", h[n - 1]);
  fclose(g);
  return 0;
}
"""


def test_file_name_arguments_get_new_paths_in_the_scratch_folder_and_sizes_their_small_values(tmp_path):
    src = write(tmp_path, "named.cu", NAMED)
    before = sorted(p.name for p in tmp_path.iterdir())
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    n, infile, outfile = cap.argv
    assert n == "32"
    scratch = Path(cap.dir) / "argv-files"
    assert Path(infile).parent == scratch and Path(outfile).parent == scratch
    assert not Path(infile).exists()             # no input data is made up
    assert Path(outfile).read_text().strip() == f"{31.0 * 31:.6f}"   # the program wrote its result there
    assert sorted(p.name for p in tmp_path.iterdir()) == before   # nothing written beside the user's file
    (ln,) = cap.launches
    assert [a.value for a in ln.args if a.kind == "scalar"] == [32]
    (note,) = [x for x in cap.notes if x.kind == "argv"]
    assert "arguments 2, 3, a file name" in note.message and "no input data is made up" in note.message


def test_a_program_that_reads_its_file_name_argument_still_stops_for_want_of_input(tmp_path):
    # the same program where the size says to read the input: the made-up path does not exist, so it stops
    src = write(tmp_path, "reads.cu", NAMED.replace("if (n <= 0)", "if (n > 0)"))
    cap = capture_program(src, timeout_s=30)
    assert not cap.launches
    assert cap.status != "ok"
    assert "it reads argument 2 as an input file" in cap.error and "--arg" in cap.error
    assert "put the file there" not in cap.error   # the path is ksearch's, not one the user could fill


READS = """
#include <cstdio>
__global__ void twice(float* o) { o[threadIdx.x] *= 2; }
int main() {
  FILE* f = fopen("inputs/values.txt", "r");
  if (!f) { printf("cannot read input\\n"); return 1; }
  float h[32];
  for (int i = 0; i < 32; i++) fscanf(f, "%f", &h[i]);
  float* d;
  cudaMalloc(&d, sizeof h);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  twice<<<1, 32>>>(d);
  return 0;
}
"""


def test_missing_input_file_is_named_with_the_line_that_opens_it(tmp_path):
    src = write(tmp_path, "reads.cu", READS)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "failed" and not cap.launches
    line = line_of(READS, "fopen(")
    assert cap.error.startswith(f"reads.cu:{line}:"), cap.error
    assert "inputs/values.txt" in cap.error and "--arg" in cap.error and "Traceback" not in cap.error
    # with the file there, the same program runs
    write(tmp_path, "inputs/values.txt", " ".join(str(i) for i in range(32)))
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    assert np.allclose(np.load(f"{cap.dir}/{cap.launches[0].args[0].after}"), 2 * np.arange(32))


LOOP = """
__global__ void spin(float* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) for (int k = 0; k < 64; k++) o[i] = o[i] * 0.5f + 1.0f;
}
__global__ void after(float* o) { o[threadIdx.x] = 7; }
int main() {
  float* d;
  int n = 1 << 14;
  cudaMalloc(&d, n * sizeof(float));
  for (int it = 0; it < 100000; it++) spin<<<n / 256, 256>>>(d, n);
  after<<<1, 32>>>(d);
  return 0;
}
"""


def test_benchmark_loop_is_fast_forwarded_within_the_time_budget(tmp_path):
    src = write(tmp_path, "loop.cu", LOOP)
    cap = capture_program(src, timeout_s=6)
    assert cap.status == "ok", cap.error
    assert cap.kernels() == ["spin", "after"]
    assert cap.launch_counts["spin"] == 100000 and cap.launch_counts["after"] == 1
    (note,) = [n for n in cap.notes if n.kind == "skipped"]
    assert "spin" in note.message and note.line == line_of(LOOP, "spin<<<")
    assert np.all(np.load(f"{cap.dir}/{cap.launches[-1].args[0].after}")[:32] == 7)


TILES = """
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
template <unsigned Tile>
__global__ void tile_sums(const int* in, int* out) {
  __shared__ cg::block_tile_memory<256> scratch;
  cg::thread_block cta = cg::this_thread_block(scratch);
  cg::thread_block_tile<Tile> t = cg::tiled_partition<Tile>(cta);
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  int s = cg::reduce(t, v, cg::plus<int>());
  t.sync();
  if (t.thread_rank() == 0) out[blockIdx.x * t.meta_group_size() + t.meta_group_rank()] = s;
}
int main() {
  const int n = 512;
  int h[n];
  for (int i = 0; i < n; i++) h[i] = i % 7;
  int *d, *o;
  cudaMalloc(&d, sizeof h);
  cudaMalloc(&o, 8 * sizeof(int));
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  tile_sums<128><<<2, 256>>>(d, o);
  int r[4];
  cudaMemcpy(r, o, sizeof r, cudaMemcpyDeviceToHost);
  for (int k = 0; k < 4; k++) {
    int want = 0;
    for (int i = 128 * k; i < 128 * (k + 1); i++) want += h[i];
    if (r[k] != want) return 1;
  }
  return 0;
}
"""


def test_multi_warp_tiles_reduce_across_warps(tmp_path):
    src = write(tmp_path, "tiles.cu", TILES)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok" and cap.exit_code == 0, (cap.error, cap.stdout_tail)
    (ln,) = cap.launches
    h = np.arange(512) % 7
    got = np.load(f"{cap.dir}/{ln.args[1].after}")[:4]
    assert list(got) == [int(h[128 * k:128 * (k + 1)].sum()) for k in range(4)]


OMP = """
#include <omp.h>
#include <cstdio>
__global__ void set(int* o, int v) { o[threadIdx.x] = v; }
int main() {
  int* d;
  cudaMalloc(&d, 2 * 32 * sizeof(int));
  omp_set_num_threads(2);
#pragma omp parallel
  {
    int t = omp_get_thread_num();
    set<<<1, 32>>>(d + 32 * t, t + 1);
  }
  return 0;
}
"""


def test_openmp_host_code_links(tmp_path):
    src = write(tmp_path, "omp.cu", OMP)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    assert cap.launch_counts == {"set": 2}


ASYNC = """
#include <cooperative_groups.h>
#include <cuda/pipeline>
#include <cuda/barrier>
namespace cg = cooperative_groups;
constexpr int T = 64, STAGES = 2, CHUNKS = 8;
// thread-scoped pipeline, two stages in flight: out[b] = sum of in[b*T*CHUNKS ...] chunk by chunk
__global__ void staged(const float* in, float* out) {
  __shared__ float buf[STAGES][T];
  __shared__ float acc[T];
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  const float* base = in + blockIdx.x * T * CHUNKS;
  acc[threadIdx.x] = 0;
  int issued = 0;
  for (int c = 0; c < CHUNKS; c++) {
    for (; issued < CHUNKS && issued < c + STAGES; issued++) {
      pipe.producer_acquire();
      cuda::memcpy_async(&buf[issued % STAGES][threadIdx.x], base + issued * T + threadIdx.x,
                         cuda::aligned_size_t<4>(sizeof(float)), pipe);
      pipe.producer_commit();
    }
    pipe.consumer_wait();
    acc[threadIdx.x] += buf[c % STAGES][threadIdx.x];
    pipe.consumer_release();
  }
  out[blockIdx.x * T + threadIdx.x] = acc[threadIdx.x];
}
// a block barrier completing copies; the neighbour's value is read after the phase
__global__ void rotate(const float* in, float* out) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  __shared__ float s[T];
  if (threadIdx.x == 0) init(&bar, blockDim.x);
  __syncthreads();
  cuda::memcpy_async(&s[threadIdx.x], in + threadIdx.x, sizeof(float), bar);
  bar.arrive_and_wait();
  out[threadIdx.x] = s[(threadIdx.x + 1) % T];
}
// block-scoped pipeline with roles: warp 1 produces, warp 0 consumes
__global__ void roles(const float* in, float* out) {
  __shared__ float buf[STAGES][32];
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> state;
  auto cta = cg::this_thread_block();
  bool producer = threadIdx.x >= 32;
  auto pipe = cuda::make_pipeline(cta, &state, producer ? cuda::pipeline_role::producer : cuda::pipeline_role::consumer);
  float sum = 0;
  for (int c = 0; c < CHUNKS; c++) {
    if (producer) {
      pipe.producer_acquire();
      cuda::memcpy_async(&buf[c % STAGES][threadIdx.x - 32], in + c * 32 + threadIdx.x - 32, sizeof(float), pipe);
      pipe.producer_commit();
    } else {
      pipe.consumer_wait();
      sum += buf[c % STAGES][threadIdx.x] * (c + 1);
      pipe.consumer_release();
    }
  }
  if (!producer) out[threadIdx.x] = sum;
}
int main() {
  const int n = 2 * T * CHUNKS;
  float h[n];
  for (int i = 0; i < n; i++) h[i] = (float)(i % 13);
  float *d, *o1, *o2, *o3;
  cudaMalloc(&d, sizeof h);
  cudaMalloc(&o1, 2 * T * sizeof(float));
  cudaMalloc(&o2, T * sizeof(float));
  cudaMalloc(&o3, 32 * sizeof(float));
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  staged<<<2, T>>>(d, o1);
  rotate<<<1, T>>>(d, o2);
  roles<<<1, 64>>>(d, o3);
  return 0;
}
"""


def test_async_copies_pipelines_and_barriers(tmp_path):
    src = write(tmp_path, "async.cu", ASYNC)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    h = (np.arange(2 * 64 * 8) % 13).astype(np.float32)
    after = {ln.kernel: np.load(f"{cap.dir}/{ln.args[1].after}") for ln in cap.launches}
    want = h.reshape(2, 8, 64).sum(axis=1).reshape(-1)
    assert np.allclose(after["staged"], want)
    assert np.allclose(after["rotate"], np.roll(h[:64], -1))
    assert np.allclose(after["roles"], (h[:8 * 32].reshape(8, 32) * np.arange(1, 9)[:, None]).sum(axis=0))


HOST_TEMPLATE = """
template <class T, int N, bool Twice>
__global__ void scale(T* o) { o[threadIdx.x] = (T)(threadIdx.x * N * (Twice ? 2 : 1)); }
constexpr int kBlock = 32;
template <class T> void run(T* d) { scale<T, kBlock, true><<<1, kBlock>>>(d); }
int main() {
  double* d;
  cudaMalloc(&d, 32 * sizeof(double));
  run(d);
  return 0;
}
"""


def test_template_arguments_of_a_launch_in_a_host_template_are_the_instantiation(tmp_path):
    src = write(tmp_path, "tmpl.cu", HOST_TEMPLATE)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    (ln,) = cap.launches
    assert ln.template_args == ["double", "32", "true"]
    assert np.allclose(np.load(f"{cap.dir}/{ln.args[0].after}"), 64.0 * np.arange(32))


UNUSED_GL = """
#include <GL/glew.h>
__global__ void add(int* o, const int* a, int n) { if (threadIdx.x < n) o[threadIdx.x] += a ? a[threadIdx.x] : 1; }
int main() {
  int* d;
  cudaMalloc(&d, 32 * sizeof(int));
  cudaMemset(d, 0, 32 * sizeof(int));
  add<<<1, 32>>>(d, 0, 32);
  return 0;
}
"""


def test_an_unsupported_header_that_is_not_used_is_left_out_and_literal_null_pointers_pass(tmp_path):
    src = write(tmp_path, "gl.cu", UNUSED_GL)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    assert any(n.kind == "include" and "GL/glew.h" in n.message and "left out" in n.message for n in cap.notes)
    assert np.all(np.load(f"{cap.dir}/{cap.launches[0].args[0].after}") == 1)
    # the same header with OpenGL used: the capture names the #include
    used = write(tmp_path, "gl2.cu", UNUSED_GL.replace("int main() {", "int main() {\n  glewInit();"))
    cap = capture_program(used, timeout_s=30)
    assert cap.status == "failed" and cap.error.startswith("gl2.cu:2:") and "OpenGL" in cap.error


POINTER = """
__global__ void ones(float* o, int n) { if (threadIdx.x < n) o[threadIdx.x] = 1; }
__global__ void twos(float* o, int n) { if (threadIdx.x < n) o[threadIdx.x] = 2; }
int main() {
  float* d;
  cudaMalloc(&d, 32 * sizeof(float));
  void (*kernel)(float*, int);
  for (int k = 0; k < 2; k++) {
    kernel = k == 0 ? &ones : &twos;
    kernel<<<1, 32>>>(d, 32);
  }
  return 0;
}
"""


def test_launches_through_a_function_pointer_are_named_by_the_kernel(tmp_path):
    src = write(tmp_path, "ptr.cu", POINTER)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    assert [ln.kernel for ln in cap.launches] == ["ones", "twos"]
    assert cap.launch_counts == {"ones": 1, "twos": 1}
    assert [a.name for a in cap.launches[1].args] == ["o", "n"]
    assert np.all(np.load(f"{cap.dir}/{cap.launches[1].args[0].after}") == 2)


# A training-loop style program: a shared header sets up cuBLAS and cuBLASLt handles, a batched GEMM feeds the
# program's own kernel. The handles and descriptors are bookkeeping on the CPU, the strided batched GEMM is
# computed on the host (its product reaches the kernel's captured input), cublasLtMatmul is stubbed with a note.
BLAS_LT = """
#include <cstdio>
#include <cublas_v2.h>
#include <cublasLt.h>
static cublasComputeType_t compute_type = CUBLAS_COMPUTE_32F;
cublasHandle_t handle;
cublasLtHandle_t lt_handle;
__global__ void add_one(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + 1.0f;
}
int main() {
  const int m = 2, k = 3, batches = 2;
  float a[batches * m * k], b[batches * k * m];
  for (int i = 0; i < batches * m * k; i++) { a[i] = (float)(i % 5); b[i] = (float)(i % 3) - 1.0f; }
  float *da, *db, *dc, *dd;
  cudaMalloc(&da, sizeof a); cudaMalloc(&db, sizeof b);
  cudaMalloc(&dc, batches * m * m * sizeof(float)); cudaMalloc(&dd, batches * m * m * sizeof(float));
  cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice); cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
  cublasCreate(&handle);
  cublasLtCreate(&lt_handle);
  cublasLtMatmulDesc_t desc; cublasLtMatrixLayout_t la; cublasLtMatmulPreference_t pref;
  cublasLtMatmulDescCreate(&desc, compute_type, CUDA_R_32F);
  cublasOperation_t t = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU_BIAS;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m);
  cublasLtMatmulPreferenceCreate(&pref);
  size_t ws = 1 << 20;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t heur; int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt_handle, desc, la, la, la, la, pref, 1, &heur, &found);
  if (found != 1) { printf("no algorithm\\n"); return 1; }
  const float one = 1.0f, zero = 0.0f;
  cublasLtMatmul(lt_handle, desc, &one, da, la, db, la, &zero, dc, la, dc, la, &heur.algo, nullptr, 0, 0);
  cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, m, k, &one, da, m, m * k, db, k, k * m, &zero,
                            dc, m, m * m, batches);
  add_one<<<1, 32>>>(dc, dd, batches * m * m);
  float r[batches * m * m];
  cudaMemcpy(r, dd, sizeof r, cudaMemcpyDeviceToHost);
  printf("%f\\n", r[0]);
  cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt_handle); cublasDestroy(handle);
  return 0;
}
"""


def test_cublas_and_cublaslt_setup_runs_and_a_strided_batched_gemm_feeds_the_kernel(tmp_path):
    src = write(tmp_path, "blas_lt.cu", BLAS_LT)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", cap.error
    assert cap.kernels() == ["add_one"]
    assert any(n.kind == "stubbed" and "cublasLtMatmul" in n.message for n in cap.notes), cap.notes
    m, k, batches = 2, 3, 2
    a = (np.arange(batches * m * k) % 5).astype(np.float32)
    b = (np.arange(batches * k * m) % 3).astype(np.float32) - 1
    want = np.concatenate([a[i * m * k:(i + 1) * m * k].reshape(k, m).T @ b[i * k * m:(i + 1) * k * m].reshape(m, k).T
                           for i in range(batches)])   # column-major per batch
    want = np.concatenate([w.T.reshape(-1) for w in np.split(want, batches)])
    got = np.load(f"{cap.dir}/{cap.launches[0].args[0].before}")[:batches * m * m]
    np.testing.assert_allclose(got, want, rtol=1e-6)



# cuBLAS's level-1/2 routines and geam on the capture's host: an RNN-style program adds two matrices with geam
# (C = A + 2 B), accumulates with axpy, scales with scal, takes a gemv, a dot, a norm and an argmax; each product
# reaches the kernel's captured input with cuBLAS's column-major, strided semantics (a routine the stand-in did not
# know stopped the program with a compile error before its first launch).
BLAS_12 = """
#include <cstdio>
#include <cublas_v2.h>
__global__ void pack(const float* c, const float* y, const float* r, const int* imax, float* out) {
  int i = threadIdx.x;
  if (i < 12) out[i] = c[i];
  if (i < 4) out[12 + i] = y[i];
  if (i == 0) { out[16] = r[0]; out[17] = r[1]; out[18] = (float)imax[0]; }
}
int main() {
  const int m = 4, n = 3;
  float h[12], x3[3] = {1.0f, -1.0f, 2.0f}, y4[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  for (int i = 0; i < 12; i++) h[i] = (float)(i % 5) - 1.0f;
  float *A, *B, *C, *x, *y, *r, *out; int* imax;
  cudaMalloc(&A, sizeof h); cudaMalloc(&B, sizeof h); cudaMalloc(&C, sizeof h); cudaMalloc(&x, sizeof x3);
  cudaMalloc(&y, sizeof y4); cudaMalloc(&r, 2 * sizeof(float)); cudaMalloc(&imax, sizeof(int));
  cudaMalloc(&out, 19 * sizeof(float));
  cudaMemcpy(A, h, sizeof h, cudaMemcpyHostToDevice); cudaMemcpy(B, h, sizeof h, cudaMemcpyHostToDevice);
  cudaMemcpy(x, x3, sizeof x3, cudaMemcpyHostToDevice); cudaMemcpy(y, y4, sizeof y4, cudaMemcpyHostToDevice);
  cublasHandle_t handle; cublasCreate(&handle);
  cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE);
  const float one = 1.0f, two = 2.0f, half = 0.5f;
  cublasSgeam(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, &one, A, m, &two, B, m, C, m);
  cublasSaxpy(handle, m * n, &two, A, 1, C, 1);
  cublasSscal(handle, m * n, &half, C, 1);
  cublasSgemv(handle, CUBLAS_OP_N, m, n, &one, A, m, x, 1, &two, y, 1);
  cublasSdot(handle, m * n, A, 1, C, 1, r);
  cublasSnrm2(handle, 3, x, 1, r + 1);
  cublasIsamax(handle, 3, x, 1, imax);
  pack<<<1, 32>>>(C, y, r, imax, out);
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_cublas_level1_level2_and_geam_are_computed_on_the_host(tmp_path):
    src = write(tmp_path, "blas12.cu", BLAS_12)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", cap.error
    assert cap.kernels() == ["pack"]
    assert any(n.kind == "stubbed" and "cublasSgeam" in n.message for n in cap.notes), cap.notes
    args = cap.launches[0].args
    got = {a.name: np.load(f"{cap.dir}/{a.before}") for a in args if a.before}
    h = (np.arange(12) % 5).astype(np.float32) - 1
    c = (h + 2 * h + 2 * h) * 0.5                        # geam, axpy, scal (flat: strides 1)
    a_cm = h.reshape(3, 4).T                             # column-major m x n
    y = a_cm @ np.array([1, -1, 2], np.float32) + 2 * np.ones(4, np.float32)
    np.testing.assert_allclose(got["c"][:12], c, rtol=1e-6)
    np.testing.assert_allclose(got["y"][:4], y, rtol=1e-6)
    np.testing.assert_allclose(got["r"][:2], [np.dot(h, c), np.sqrt(6.0)], rtol=1e-5)
    assert int(got["imax"][0]) == 3                      # 1-based index of |2|


# A program that scales its signal with its own kernel, then hands it to cuFFT (a plan made through cufftCreate +
# cufftMakePlanMany, with cufftXt.h included): the kernel's launch is recorded, and the transform runs on the host
# with a note (tests/unit/test_capture_cufft.py checks the transforms themselves).
FFT_XT = """
#include <cstdio>
#include <cufft.h>
#include <cufftXt.h>
__global__ void scale(cufftReal* x, int n, float s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
int main() {
  const int n = 64;
  cufftReal h[n];
  for (int i = 0; i < n; i++) h[i] = (float)i;
  cufftReal* d; cufftComplex* f;
  cudaMalloc(&d, sizeof h); cudaMalloc(&f, (n / 2 + 1) * sizeof(cufftComplex));
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  cufftHandle plan; size_t work = 0;
  cufftCreate(&plan);
  long long dims[1] = {n};
  cufftMakePlanMany(plan, 1, (int*)dims, nullptr, 1, n, nullptr, 1, n / 2 + 1, CUFFT_R2C, 1, &work);
  scale<<<1, 64>>>(d, n, 0.5f);
  if (cufftExecR2C(plan, d, f) != CUFFT_SUCCESS) { printf("fft failed\\n"); return 1; }
  return 0;
}
"""


def test_cufft_extension_api_compiles_and_the_transform_runs_after_the_kernel(tmp_path):
    src = write(tmp_path, "fft_xt.cu", FFT_XT)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok" and cap.kernels() == ["scale"], (cap.status, cap.error)
    assert any("cufftExecR2C" in n.message and n.line == line_of(FFT_XT, "cufftExecR2C") for n in cap.notes), cap.notes


# A program that maps its buffers through the driver's virtual memory management: the types compile, the first
# such call stops the capture with a note naming it and its line, and the launches before it are kept.
VMM = """
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>
__global__ void fill(int* x, int v) { x[threadIdx.x] = v; }
int main() {
  int* d;
  cudaMalloc(&d, 32 * sizeof(int));
  fill<<<1, 32>>>(d, 7);
  CUdevice dev;
  cuCtxGetDevice(&dev);
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUmemGenericAllocationHandle handle;
  if (cuMemCreate(&handle, 1 << 21, &prop, 0) != CUDA_SUCCESS) { printf("no VMM\\n"); return 1; }
  return 0;
}
"""


def test_virtual_memory_management_stops_the_capture_naming_the_call(tmp_path):
    src = write(tmp_path, "vmm.cu", VMM)
    cap = capture_program(src, timeout_s=60)
    assert cap.kernels() == ["fill"], (cap.status, cap.error)
    (note,) = [n for n in cap.notes if n.kind == "gpu_only"]
    assert "cuMemCreate" in note.message and note.line == line_of(VMM, "cuMemCreate"), note


SLOW_LOOP = """
#define N (1 << 16)
__global__ void heavy(float* o) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) for (int k = 0; k < 20000; k++) o[i] = o[i] * 0.999f + 1.0f;
}
__global__ void light(float* o) { o[threadIdx.x] = 3; }
int main() {
  float *d, *e;
  cudaMalloc(&d, N * sizeof(float));
  cudaMalloc(&e, 32 * sizeof(float));
  for (int it = 0; it < 20; it++) heavy<<<N / 256, 256>>>(d);
  light<<<1, 32>>>(e);
  return 0;
}
"""


def test_a_loop_of_launches_too_big_to_record_is_fast_forwarded_after_two(tmp_path):
    """Each `heavy` launch is over the byte budget (not recorded; its size is one the kernel's own code reads, so
    no smaller run is made) and costs the simulator well over half a second:
    once the run has taken a few seconds, its repeats are counted, not run, after the second one (a program run
    once per kernel-choosing option stays quick); the kernel after the loop is still recorded."""
    src = write(tmp_path, "slowloop.cu", SLOW_LOOP)
    cap = capture_program(src, timeout_s=120, byte_budget=256 << 10)
    assert cap.status == "ok", cap.error
    assert cap.launch_counts["heavy"] == 20 and cap.launch_counts["light"] == 1
    (note,) = [n for n in cap.notes if n.kind == "skipped"]
    ran = int(re.search(r"after its first (\d+)", note.message).group(1))
    assert 2 <= ran < 8, note.message
    assert np.all(np.load(f"{cap.dir}/{cap.launches[-1].args[0].after}")[:32] == 3)


SAME_NAME = """
#include <cstdio>
__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
// the launcher has the kernel's name: an overload of it on the host
void scale(float* x, float a, int n, int block_size) {
  scale<<<(n + block_size - 1) / block_size, block_size>>>(x, a, n);
}
int main() {
  float* d;
  cudaMalloc(&d, 256 * sizeof(float));
  cudaMemset(d, 0, 256 * sizeof(float));
  scale(d, 2.0f, 256, 64);
  cudaDeviceSynchronize();
  printf("ok\\n");
  return 0;
}
"""


def test_a_kernel_launched_from_a_host_function_of_the_same_name(tmp_path):
    """`scale<<<...>>>(x, a, n)` inside `void scale(x, a, n, block_size)`: the launch names an overload set, and the
    call's arguments pick the kernel (it failed to compile: no match converting 'scale' to a kernel pointer)."""
    cap = capture_program(write(tmp_path, "same_name.cu", SAME_NAME))
    assert cap.status == "ok", cap.error
    (ln,) = cap.launches
    assert ln.kernel == "scale" and ln.grid == (4, 1, 1) and ln.block == (64, 1, 1)
    assert [a.value for a in ln.args if a.kind == "scalar"] == [2.0, 256]


DEFAULT_ARGS = """
#include <cstdio>
__global__ void fill(float* o, int n = 48, float v = 1.5f) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = v * i;
}
int main() {
  float* d;
  cudaMalloc(&d, 64 * sizeof(float));
  cudaMemset(d, 0, 64 * sizeof(float));
  fill<<<1, 64>>>(d);            // n and v from their defaults
  cudaDeviceSynchronize();
  printf("ok\\n");
  return 0;
}
"""


def test_a_launch_that_leaves_default_arguments_out_is_ported_and_verified(tmp_path, monkeypatch):
    """`fill<<<1, 64>>>(d)` with `int n = 48, float v = 1.5f`: the check passes the defaults, as C++ does (it said
    "takes (o, n, v); missing: n, v")."""
    from ksearch_engine.portfile import port_file

    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "defaults.cu", DEFAULT_ARGS)
    r = port_file(src, kernels=["fill"], write=False)
    (v,) = r.kernels
    assert v.status == "verified" and v.workload == "captured", (v.reason, r.capture)
    # the port's launch() takes the call as CUDA does: the defaults fill what it leaves out
    import mlx.core as mx
    import numpy as np
    from ksearch_engine.sim import install_mlx_shim, uninstall_mlx_shim

    install_mlx_shim()
    try:
        ns: dict = {}
        exec(compile(v.module_text, "fill_mlx.py", "exec"), ns)
        out = ns["launch"](mx.zeros((64,)), grid=(1, 1, 1), block=(64, 1, 1))
    finally:
        uninstall_mlx_shim()
    np.testing.assert_allclose(np.array(out["o"])[:48], 1.5 * np.arange(48))


# libcu++ atomics and the driver's address ranges, as an error-reporting helper uses them: a status word in
# host-mapped memory read with cuda::memory_order_acquire, a device counter bumped through cuda::atomic_ref, and
# cuMemGetAddressRange asked for the allocation a pointer falls in (the capture stopped on a compile error).
LIBCUXX = """
#include <cstdio>
#include <cuda.h>
#include <cuda/atomic>
__global__ void count_big(const float* x, int n, int* hits) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] > 0.5f) {
    cuda::atomic_ref<int, cuda::thread_scope_device> c(*hits);
    c.fetch_add(1, cuda::memory_order_relaxed);
  }
}
int main() {
  const int n = 200;
  float h[n];
  for (int i = 0; i < n; i++) h[i] = (i % 4) * 0.25f;
  float* x; int* hits;
  cudaMalloc(&x, sizeof h); cudaMalloc(&hits, sizeof(int));
  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice); cudaMemset(hits, 0, sizeof(int));
  CUdeviceptr base; size_t size = 0;
  cuMemGetAddressRange(&base, &size, (CUdeviceptr)(x + 10));
  if (base != (CUdeviceptr)x || size != sizeof h) { printf("wrong range\\n"); return 1; }
  cuda::std::atomic<int> status(0);
  status.store(1, cuda::memory_order_release);
  if (status.load(cuda::memory_order_acquire) != 1) return 1;
  count_big<<<(n + 63) / 64, 64>>>(x, n, hits);
  int got = 0;
  cudaMemcpy(&got, hits, sizeof got, cudaMemcpyDeviceToHost);
  printf("%d\\n", got);
  return got == n / 4 ? 0 : 1;
}
"""


def test_libcuxx_atomics_and_address_ranges_run_on_the_capture_runtime(tmp_path):
    src = write(tmp_path, "libcuxx.cu", LIBCUXX)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok" and cap.exit_code == 0, (cap.error, cap.stdout_tail)
    (launch,) = cap.launches
    hits = next(a for a in launch.args if a.name == "hits")
    assert int(np.load(f"{cap.dir}/{hits.after}")[0]) == 50


PAST_END = """
__global__ void per_block(const int* in, int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = in[blockIdx.x] + 1;
}
__global__ void reads_only(const int* out, int* copy) { if (threadIdx.x == 0) copy[0] = out[0]; }
int main() {
  int h[4] = {1, 2, 3, 4};
  int *in, *out, *copy;
  cudaMalloc(&in, sizeof h);
  cudaMalloc(&out, sizeof(int));      // one int for four blocks: the program's bug
  cudaMalloc(&copy, sizeof(int));
  cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
  per_block<<<4, 32>>>(in, out);
  reads_only<<<1, 32>>>(out, copy);
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_a_write_past_the_requested_size_into_the_allocations_padding_is_named_once_for_its_kernel(tmp_path):
    # out[1..3] land in the padding up to the allocation's 16-byte rounding: no fault (nor on a GPU), but the
    # capture says which kernel wrote past which argument's allocation; the kernel that only reads it is not named
    src = write(tmp_path, "past.cu", PAST_END)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    notes = [n for n in cap.notes if "writes past the end" in n.message]
    assert len(notes) == 1, [n.message for n in cap.notes]
    assert "per_block" in notes[0].message and "argument #2" in notes[0].message and "4 bytes allocated" in notes[0].message
    assert notes[0].line == line_of(PAST_END, "per_block<<<")
