"""Constructs of kernel and helper bodies the translator carries into both ports: memcpy between a thread's own
objects (Metal has none), and shared arrays declared at file scope (Metal declares threadgroup memory in the kernel
only). Each test ports a small kernel written here and checks both ports' launch() against the original in the CPU
simulator."""
import numpy as np

from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel
from ksearch_engine.translate.check import check_port
from tests.sources import assert_ported, port_checked

rng = np.random.default_rng(11)


def port(src, kernel, args, block=(32, 1, 1), **kw):
    return port_checked(src, kernel, args, block=block, **kw)


MEMCPY = """
struct Trio { int a; int b; int c; };
__device__ Trio gather3(const int* src, int i) {
  int raw[3];
  for (int j = 0; j < 3; ++j) raw[j] = src[3 * i + j] * (j + 1);
  Trio t;
  memcpy(&t, raw, sizeof(t));
  return t;
}
__global__ void mix3(int* out, const int* src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Trio t = gather3(src, i);
  int back[3];
  memcpy(back, &t, 3 * sizeof(int));
  Trio raw;
  memcpy(&raw, src + 3 * i, sizeof(raw));   // from a buffer
  out[i] = back[0] - back[1] + 2 * back[2] + raw.c;
}
"""


def test_memcpy_between_a_threads_own_objects_in_helper_and_kernel_bodies():
    n = 64
    src = rng.integers(-50, 50, 3 * n).astype(np.int32)
    tr, res = port(MEMCPY, "mix3", {"out": np.zeros(n, np.int32), "src": src, "n": n})
    assert "ks_memcpy(&t, raw, sizeof(t))" in tr.launch_metal_header
    assert "ks_memcpy(back, &t, 3 * sizeof(int))" in tr.launch_metal_source
    assert "memcpy(&t, raw, sizeof(t))" in tr.launch_cuda_header   # the CUDA-backend port keeps it
    # on Metal one overload per pair of address spaces (a buffer's bytes into a local here)
    assert "KS_MEMCPY(thread, device)" in tr.launch_metal_header and "#if defined(__METAL_VERSION__)" in \
        tr.launch_metal_header
    assert_ported(res)


FILE_SHARED = """
#define SPAN 32
#define ROWS 2
__shared__ float stage[ROWS][SPAN];
__shared__ int hits;
extern __shared__ float spill[];

__device__ float neighbour(int r, int c) { return stage[r][(c + 1) % SPAN]; }
__device__ void bump() { atomicAdd(&hits, 1); }

__global__ void rotate_rows(float* out, int* counts, const float* in) {
  int r = threadIdx.y, c = threadIdx.x;
  int base = blockIdx.x * ROWS * SPAN + r * SPAN + c;
  if (r == 0 && c == 0) hits = 0;
  stage[r][c] = in[base];
  spill[r * SPAN + c] = 2.0f * in[base];
  __syncthreads();
  if (in[base] > 0.0f) bump();
  __syncthreads();
  out[base] = neighbour(r, c) + spill[(r * SPAN + c + 3) % (ROWS * SPAN)];
  if (r == 0 && c == 0) counts[blockIdx.x] = hits;
}
"""


def test_file_scope_shared_variables_are_declared_in_the_kernel_for_metal_and_passed_to_helpers():
    blocks, n = 3, 3 * 2 * 32
    x = rng.standard_normal(n).astype(np.float32)
    tr, res = port(FILE_SHARED, "rotate_rows",
                   {"out": np.zeros(n, np.float32), "counts": np.zeros(blocks, np.int32), "in": x},
                   grid=(blocks, 1, 1), block=(32, 2, 1), shared_mem=2 * 32 * 4)
    src = tr.launch_metal_source
    assert "threadgroup float stage[ROWS][SPAN];" in src and "threadgroup int hits;" in src
    assert "threadgroup float spill[SPILL_SIZE];" in src
    assert "neighbour(r, c, stage)" in src and "bump(hits)" in src
    assert "threadgroup float (*stage)[SPAN]" in tr.launch_metal_header
    assert "__shared__ float stage[ROWS][SPAN];" in tr.launch_cuda_header   # the CUDA-backend port: as written
    assert_ported(res)


def test_the_simulator_runs_file_scope_extern_shared_arrays():
    from ksearch_engine.sim import run_cuda_source
    src = """
namespace tiles {
extern __shared__ float flat[];
}
extern "C" {
extern __shared__ int grid2[][4];
}
__global__ void shift(float* out, int* rows, const float* in) {
  unsigned t = threadIdx.x;
  tiles::flat[t] = in[t] + 1.0f;
  __syncthreads();
  out[t] = tiles::flat[(t + 5) % blockDim.x];
  __syncthreads();
  grid2[t / 4][t % 4] = (int)t * 3;
  __syncthreads();
  rows[t] = grid2[(t / 4 + 1) % (blockDim.x / 4)][t % 4];
}
"""
    x = rng.standard_normal(32).astype(np.float32)
    res = run_cuda_source(src, "shift", grid=(2, 1, 1), block=(32, 1, 1), shared_mem_bytes=32 * 4,
                          args={"out": np.zeros(32, np.float32), "rows": np.zeros(32, np.int32), "in": x})
    t = np.arange(32)
    np.testing.assert_allclose(res["out"], (x + 1.0)[(t + 5) % 32])
    np.testing.assert_array_equal(res["rows"], (((t // 4 + 1) % 8) * 4 + t % 4) * 3)


NAMESPACED = """
#define WIDEN 4
namespace geo {
struct Pt { float x; float y; };
union Bits { float f; unsigned u; };
class Offset { public: float d; };
template <int K> struct Scale { static constexpr int k = K; __device__ float apply(float v) const { return v * K; } };
namespace inner { constexpr float kHalf = 0.5f; }
__device__ float norm1(Pt p) { return fabsf(p.x) + fabsf(p.y); }
__global__ void lens(float* out, const Pt* pts, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Scale<WIDEN> s;
  Bits b; b.f = pts[i].x;
  Offset o; o.d = inner::kHalf;
  out[i] = s.apply(norm1(pts[i])) + geo::Scale<2>::k + (float)(b.u & 1u) + o.d;
}
}  // namespace geo
"""


def test_types_and_constants_declared_in_a_namespace_reach_both_ports():
    n = 64
    pts = rng.standard_normal(2 * n).astype(np.float32)
    tr, res = port(NAMESPACED, "lens", {"out": np.zeros(n, np.float32), "pts": pts, "n": n})
    for header in (tr.launch_metal_header, tr.launch_cuda_header):
        assert "namespace geo {\nstruct Pt" in header and "using namespace geo;" in header
        assert "namespace geo {\ntemplate <int K> struct Scale" in header
        assert "namespace geo {\nnamespace inner {\nconstexpr float kHalf = 0.5f;\n}\nusing namespace inner;\n}" in header
    assert_ported(res)


ROWS_H = """#pragma once
namespace tiles {
template <int W>
class RowTile {
 public:
  __device__ float pick(const float* src) const {
    // one column per thread
    return src[blockIdx.x * W + threadIdx.x];
  }
};
}  // namespace tiles
"""

ROWS_CU = """#include "rows.cuh"
struct Pool {
  __device__ static float sum2(float v) {
    __shared__ float part[2];
    part[v > 0.0f ? 1 : 0] = v;
    return part[0] + part[1];
  }
};
__global__ void pick_rows(float* out, const float* src) {
  tiles::RowTile<32> t;
  out[blockIdx.x * 32 + threadIdx.x] = t.pick(src);
}
__global__ void pool2(float* out, const float* src) {
  out[threadIdx.x] = Pool::sum2(src[threadIdx.x]);
}
"""


def test_class_members_reading_thread_positions_or_declaring_shared_arrays_in_a_header_port(tmp_path):
    from ksearch_engine.portfile import port_file
    (tmp_path / "rows.cuh").write_text(ROWS_H)
    path = tmp_path / "rows.cu"
    path.write_text(ROWS_CU)
    report = port_file(path, write=False)
    v = {x.kernel: x for x in report.kernels}
    assert v["pick_rows"].status == "verified", v["pick_rows"].reason
    assert v["pool2"].status == "verified", v["pool2"].reason


def test_an_operator_reading_thread_positions_is_named_where_defined_not_left_to_the_compiler(tmp_path):
    from ksearch_engine.portfile import port_file
    (tmp_path / "lanes.cuh").write_text("""#pragma once
struct Lanes {
  float v[64];
  __device__ float& operator()(int k) {
    return v[(threadIdx.x + k) % 64];
  }
};
""")
    path = tmp_path / "lanes.cu"
    path.write_text("""#include "lanes.cuh"
__global__ void rotate(float* out, const float* src) {
  Lanes l;
  l(0) = src[threadIdx.x];
  out[threadIdx.x] = l(1);
}
""")
    report = port_file(path, write=False)
    v = report.kernels[0]
    assert v.status == "not_ported", v.reason
    assert v.reason.startswith("line 2: struct Lanes: struct Lanes (lanes.cuh line 4): operator() of Lanes uses "
                               "threadIdx: the Metal port passes"), v.reason


def test_file_scope_shared_variables_of_a_local_header(tmp_path):
    (tmp_path / "scratch.cuh").write_text("#pragma once\n#define LANES 32\n__shared__ float scratch[LANES];\n"
                                          "__device__ float mirror(int t) { return scratch[LANES - 1 - t]; }\n")
    src = '#include "scratch.cuh"\n__global__ void flip(float* out, const float* in) {\n' \
          '  scratch[threadIdx.x] = in[blockIdx.x * LANES + threadIdx.x];\n  __syncthreads();\n' \
          '  out[blockIdx.x * LANES + threadIdx.x] = mirror(threadIdx.x);\n}\n'
    path = tmp_path / "flip.cu"
    path.write_text(src)
    from ksearch_engine.translate.headers import header_preamble
    parsed = find_kernels(src, str(path))
    parsed.preamble = header_preamble(src, [str(tmp_path)]) + parsed.preamble
    parsed.helpers = [h for h in find_kernels((tmp_path / "scratch.cuh").read_text(), "scratch.cuh").helpers] \
        + parsed.helpers
    tr = translate_kernel(parsed, "flip", str(path))
    assert "threadgroup float scratch[LANES];" in tr.launch_metal_source
    x = rng.standard_normal(64).astype(np.float32)
    res = check_port(tr.module_text, src, "flip", {"args": {"out": np.zeros(64, np.float32), "in": x},
                                                    "grid": (2, 1, 1), "block": (32, 1, 1), "shared_mem": 0,
                                                    "template_args": []},
                     filename=str(path), include_dirs=[str(tmp_path)])
    assert_ported(res)


MEMSET = """
struct Hist { int bins[4]; float total; };
__device__ Hist tally(const float* v, int i) {
  Hist h;
  memset(&h, 0, sizeof(h));
  for (int j = 0; j < 4; ++j) { h.bins[(int)(v[4 * i + j] > 0.0f) * 2 + (j & 1)] += 1; h.total += v[4 * i + j]; }
  return h;
}
__global__ void count4(int* out, float* sums, const float* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int local[4];
  std::memset(local, 0, 4 * sizeof(int));
  Hist h = tally(v, i);
  for (int j = 0; j < 4; ++j) local[j] += h.bins[j];
  out[i] = local[0] + 10 * local[1] + 100 * local[2] + 1000 * local[3];
  sums[i] = h.total;
}
"""


def test_memset_of_a_threads_own_objects_in_helper_and_kernel_bodies():
    n = 64
    v = rng.standard_normal(4 * n).astype(np.float32)
    tr, res = port(MEMSET, "count4", {"out": np.zeros(n, np.int32), "sums": np.zeros(n, np.float32), "v": v, "n": n})
    assert "ks_memset(&h, 0, sizeof(h))" in tr.launch_metal_header and "KS_MEMSET(device)" in tr.launch_metal_header
    assert "ks_memset(local, 0, 4 * sizeof(int))" in tr.launch_metal_source
    assert_ported(res)


def test_static_file_scope_shared_arrays_port_and_run():
    src = """
static __shared__ float ring[64];
__shared__ int first;
__global__ void roll(float* out, const float* in) {
  ring[threadIdx.x] = in[blockIdx.x * 64 + threadIdx.x];
  if (threadIdx.x == 0) first = (int)blockIdx.x;
  __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = ring[(threadIdx.x + 7) % 64] + first;
}
"""
    x = rng.standard_normal(128).astype(np.float32)
    tr, res = port(src, "roll", {"out": np.zeros(128, np.float32), "in": x}, block=(64, 1, 1))
    assert "threadgroup float ring[64];" in tr.launch_metal_source
    assert_ported(res)


def test_a_long_class_names_types_and_macros_in_its_last_member_functions():
    filler = "".join(f"  __device__ float f{j}(float v) const {{ return v * {j}.0f + bias; }}\n" for j in range(80))
    src = ("#define SHIFT 3\nstruct Pair { float a; float b; };\n"
           "struct Wide {\n  float bias;\n" + filler
           + "  __device__ float last(float a) const { Pair p; p.a = a; p.b = 1.0f; return p.a * SHIFT + p.b + f7(bias); }\n"
           "};\n__global__ void widen(float* out, const float* in) {\n"
           "  Wide w; w.bias = 0.5f;\n  out[threadIdx.x] = w.last(in[threadIdx.x]);\n}\n")
    assert src.index("float last(") - src.index("struct Wide") > 4096
    x = rng.standard_normal(32).astype(np.float32)
    tr, res = port(src, "widen", {"out": np.zeros(32, np.float32), "in": x}, grid=(1, 1, 1))
    assert "#define SHIFT 3" in tr.launch_metal_header and "struct Pair" in tr.launch_metal_header
    assert_ported(res)


CLASS_CALLS = """
#define STEP 2
__device__ inline int wrap(int i, int n) { return i < 0 ? i + n : (i >= n ? i - n : i); }
template <int K> __device__ inline int scaled(int v) { return v * K; }
__device__ float twice(float v) { return v * STEP; }
struct Window {
  int n;
  __device__ int index(int i) const { return wrap(i, n); }
  __device__ float weigh(float v) const { return twice(v) + scaled<STEP>(1); }
};
__global__ void smooth(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Window w; w.n = n;
  out[i] = w.weigh(in[w.index(i - 1)]) + in[w.index(i + 1)];
}
"""


def test_helpers_that_only_a_classs_member_functions_call_reach_both_ports_before_the_class():
    n = 64
    x = rng.standard_normal(n).astype(np.float32)
    tr, res = port(CLASS_CALLS, "smooth", {"out": np.zeros(n, np.float32), "in": x, "n": n})
    for header in (tr.launch_metal_header, tr.launch_cuda_header):
        # wrap and scaled name nothing of the file's: before the class; twice reads STEP: after the macro
        assert header.index("int wrap(") < header.index("struct Window") and \
            header.index("int scaled(") < header.index("struct Window")
        assert header.index("#define STEP") < header.index("float twice(")
    assert_ported(res)


def test_member_calls_on_a_shared_object_of_a_class_also_used_in_thread_memory_are_named_not_left_to_metal():
    src = """
struct Acc {
  float v[32];
  __device__ float get(int i) const { return v[i]; }
  __device__ void put(int i, float x) { v[i] = x; }
};
struct Plain { float v[32]; };
__global__ void mirror(float* out, const float* in) {
  __shared__ Plain p;
  p.v[threadIdx.x] = in[threadIdx.x];
  __shared__ Acc a;
  Acc mine;
  mine.put(threadIdx.x, 1.0f);
  a.put(threadIdx.x, p.v[threadIdx.x] + mine.get(threadIdx.x));
  __syncthreads();
  out[threadIdx.x] = a.get(31 - threadIdx.x);
}
"""
    tr = translate_kernel(find_kernels(src, "t.cu"), "mirror", "t.cu")
    errors = [i for i in tr.report if i.severity == "error" and i.scope == "kernel"]
    assert [(i.construct, i.line + 1) for i in errors] == [("__shared__ Acc a", 11)], errors
    assert errors[0].message.startswith("member function put of Acc is called on a __shared__ object, and other "
                                        "objects of Acc live in thread memory: Metal")
