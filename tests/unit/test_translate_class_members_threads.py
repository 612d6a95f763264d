"""Member functions of structs and classes (templates) that read the thread's position or the grid's shape, declare
`__shared__` storage, or are called on an object in shared memory, carried into the Metal port (classmembers.py):
Metal hands thread positions to the kernel function only and declares threadgroup memory in the kernel only, so
such member functions take them as trailing parameters (every call passes them), a member's `__shared__` variable
is declared in the kernel and passed in, and the member functions of a class whose objects live in threadgroup
memory are declared `threadgroup`. The kernels are written for this test; each port is checked against the original
in the CPU simulator."""
import re

import numpy as np

from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel
from tests.sources import assert_ported, port_checked


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_members_reading_thread_positions_directly_and_through_other_members_take_them_as_parameters():
    src = """
template <int W>
struct Cursor {
  int base;
  __device__ void seek(int block) { base = block * blockDim.x; }
  __device__ int lane() const { return threadIdx.x; }
  __device__ int at() const { return base + lane(); }
  __device__ int mirrored() const { return base + (W - 1 - this->lane()); }
  __device__ static int width() { return blockDim.x; }
};
__global__ void flip(float* out, const float* in) {
  Cursor<64> c;
  c.seek(blockIdx.x);
  out[c.at()] = in[c.mirrored()] + (float)Cursor<64>::width();
}
"""
    n = 128
    tr, res = port_checked(src, "flip", {"out": np.zeros(n, np.float32), "in": np.arange(n, dtype=np.float32)})
    header = _flat(tr.launch_metal_header)
    assert "int lane(uint3 thread_position_in_threadgroup) const {" in header, header
    # through lane(): at() and mirrored() take the position too and pass it on; width() reads the block's size
    assert "int at(uint3 thread_position_in_threadgroup) const { return base + lane(thread_position_in_threadgroup)" \
        in header, header
    assert "this->lane(thread_position_in_threadgroup)" in header
    assert re.search(r"static int width\(uint3 threads_per_threadgroup\)", header), header
    body = _flat(tr.launch_metal_source)
    assert "c.at(thread_position_in_threadgroup)" in body and "Cursor<64>::width(threads_per_threadgroup)" in body
    assert "c.seek(threadgroup_position_in_grid.x, threads_per_threadgroup)" in body, body
    assert_ported(res)


def test_a_shared_object_of_a_class_type_with_member_calls_gets_threadgroup_member_functions():
    src = """
struct Ring {
  float slot[64];
  __device__ float& operator[](int i) { return slot[i]; }
  __device__ void put(float v) { slot[threadIdx.x] = v; }
  __device__ float rotated(int by) const {
    const float& mine = slot[(threadIdx.x + by) % blockDim.x];
    return mine;
  }
};
__global__ void rotate(float* out, const float* in) {
  __shared__ Ring ring;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  ring.put(in[i]);
  __syncthreads();
  out[i] = ring.rotated(3) + ring[threadIdx.x];
}
"""
    n = 128
    tr, res = port_checked(src, "rotate", {"out": np.zeros(n, np.float32), "in": np.arange(n, dtype=np.float32)})
    header = _flat(tr.launch_metal_header)
    # MSL calls a member function on a threadgroup object only where it is declared for that address space
    assert "threadgroup float& operator[](int i) threadgroup {" in header, header
    assert "void put(float v, uint3 thread_position_in_threadgroup) threadgroup {" in header, header
    assert "float rotated(int by, uint3 thread_position_in_threadgroup, uint3 threads_per_threadgroup) const " \
           "threadgroup {" in header, header
    assert "const threadgroup float& mine" in header, header
    assert "ring.put(in[i], thread_position_in_threadgroup)" in _flat(tr.launch_metal_source)
    assert_ported(res)


def test_static_members_on_a_shared_object_and_with_their_own_shared_storage():
    src = """
struct Stage {
  float v[32];
  __device__ static void fill(Stage& s, const float* src) {
    s.v[threadIdx.x] = src[blockIdx.x * 32 + threadIdx.x];
  }
  __device__ static float pairSum(float x) {
    __shared__ float part[32];
    part[threadIdx.x] = x;
    __syncthreads();
    return part[threadIdx.x] + part[threadIdx.x ^ 1];
  }
};
__global__ void pairs(float* out, const float* src) {
  __shared__ Stage st;
  Stage::fill(st, src);
  __syncthreads();
  out[blockIdx.x * 32 + threadIdx.x] = Stage::pairSum(st.v[31 - threadIdx.x]);
}
"""
    n = 64
    tr, res = port_checked(src, "pairs", {"out": np.zeros(n, np.float32), "src": np.arange(n, dtype=np.float32)},
                           block=(32, 1, 1))
    header = _flat(tr.launch_metal_header)
    # the shared object is passed by a threadgroup reference; the member's own shared array lives in the kernel
    assert "static void fill(threadgroup Stage& s, const float* src, uint3 thread_position_in_threadgroup, " \
           "uint3 threadgroup_position_in_grid)" in header, header
    assert "threadgroup float* part" in header and "threadgroup float part[32];" in tr.launch_metal_source
    assert "Stage::pairSum(st.v[31 - thread_position_in_threadgroup.x], thread_position_in_threadgroup, part)" \
        in _flat(tr.launch_metal_source), tr.launch_metal_source
    assert_ported(res)


PIPE = """
template <typename T, int N>
class Lines {
 public:
  T cell[2 * N];
  __device__ int col() const { return threadIdx.x; }
  __device__ T& top() { return cell[col()]; }
  __device__ void smooth() {
    T& mine = cell[N + col()];
    mine = 0.5f * (cell[col()] + cell[(col() + 1) % N]);
  }
};
template <int N>
class Pipe {
  typedef Lines<float, N> Buf;
  Buf buf;
  __device__ void load(const float* in) { buf.top() = in[blockIdx.x * N + threadIdx.x]; }
 public:
  __device__ static void go(const float* in, float* out) {
    __shared__ Pipe<N> pipe;
    pipe.load(in);
    __syncthreads();
    pipe.buf.smooth();
    __syncthreads();
    out[blockIdx.x * N + threadIdx.x] = pipe.buf.cell[N + threadIdx.x];
  }
};
"""


def _checked_template(src: str, kernel: str, args: dict, template_args: list[str]):
    from ksearch_engine.translate.check import check_port
    tr = translate_kernel(find_kernels(src, "t.cu"), kernel, "t.cu")
    res = check_port(tr.module_text, src, kernel, {"args": args, "grid": (2, 1, 1), "block": (32, 1, 1),
                                                    "shared_mem": 0, "template_args": template_args},
                     filename="t.cu")
    return tr, res


def test_a_static_member_declaring_a_shared_object_of_its_class_template_through_a_helper():
    n = 64
    src = PIPE + """template <int N>
__global__ void pipeline(const float* in, float* out) { Pipe<N>::go(in, out); }
void launch(const float* in, float* out) { pipeline<32><<<2, 32>>>(in, out); }
"""
    tr, res = _checked_template(src, "pipeline", {"in": np.arange(n, dtype=np.float32),
                                                  "out": np.zeros(n, np.float32)}, ["32"])
    header = _flat(tr.launch_metal_header)
    # the kernel declares the object with its own template arguments, the member takes it in the class's terms
    assert "threadgroup Pipe<N> pipe;" in _flat(tr.launch_metal_source), tr.launch_metal_source
    assert "threadgroup Pipe<N>& pipe" in header, header
    # a data member of a threadgroup object lives there too: its class's members are threadgroup ones
    assert "threadgroup T& top(uint3 thread_position_in_threadgroup) threadgroup {" in header, header
    assert "threadgroup T& mine" in header, header
    assert_ported(res)


def test_a_free_helper_calling_a_member_that_reads_thread_positions_passes_them():
    n = 64
    src = PIPE + """__device__ void run_pipe(const float* in, float* out) { Pipe<32>::go(in, out); }
__global__ void pipeline(const float* in, float* out) { run_pipe(in, out); }
"""
    tr, res = port_checked(src, "pipeline", {"in": np.arange(n, dtype=np.float32), "out": np.zeros(n, np.float32)},
                           block=(32, 1, 1))
    header = _flat(tr.launch_metal_header)
    assert re.search(r"void run_pipe\(const device float\* in, device float\* out, uint3 "
                     r"thread_position_in_threadgroup, uint3 threadgroup_position_in_grid, threadgroup Pipe<32>& pipe\)",
                     header), header
    assert "threadgroup Pipe<32> pipe;" in _flat(tr.launch_metal_source), tr.launch_metal_source
    assert_ported(res)


def test_a_member_defined_outside_its_class_that_reads_thread_positions_stays_refused_with_its_line():
    src = """
struct Lane {
  int off;
  __device__ int index() const;
};
__device__ int Lane::index() const { return off + threadIdx.x; }
__global__ void shift(float* out, const float* in) {
  Lane l;
  l.off = blockIdx.x * blockDim.x;
  out[l.index()] = in[l.index()] * 2.0f;
}
"""
    tr = translate_kernel(find_kernels(src, "t.cu"), "shift", "t.cu")
    errors = [i for i in tr.report if i.severity == "error" and i.scope == "kernel"]
    assert [(i.construct, i.line + 1) for i in errors] == [("struct Lane", 4)], errors
    assert "member function index of Lane is defined outside the class" in errors[0].message
