"""Issue 13: names a kernel takes from its local headers or from the files that include it reach both ports, and
the translator classes found on the public corpus (warp reduce intrinsics, a shared-memory proxy struct, unions
the parser misses). Every test ports a small program written here and checks the ports in the simulator."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file, with_program_prefix
from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel, translate_snippet
from ksearch_engine.translate.headers import with_aggregates


def _write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip())
    return p


def _verdicts(report) -> dict:
    return {k.kernel: k for k in report.kernels}


MAIN = """
    int main() {
      const int n = 256;
      %(decl)s *h = (%(decl)s *)malloc(n * sizeof(%(decl)s)), *d;
      for (int i = 0; i < n; i++) h[i] = (%(decl)s)(i %% 7);
      cudaMalloc(&d, n * sizeof(%(decl)s));
      cudaMemcpy(d, h, n * sizeof(%(decl)s), cudaMemcpyHostToDevice);
      %(launch)s;
      cudaMemcpy(h, d, n * sizeof(%(decl)s), cudaMemcpyDeviceToHost);
      printf("%%f\\n", (double)h[1]);
      return 0;
    }
"""


def test_defines_typedefs_structs_and_enums_of_nested_local_headers_reach_both_ports(tmp_path):
    _write(tmp_path, "inc/base.h", """
        #ifndef BASE_H
        #define BASE_H
        #define LOG_DIV 3
        #define DIV (1 << LOG_DIV)
        typedef float real;
        #endif
    """)
    _write(tmp_path, "inc/types.h", """
        #pragma once
        #include "base.h"
        enum Mode { MODE_SCALE = 2, MODE_SHIFT = 5 };
        struct Pair { real a; real b; };
    """)
    src = _write(tmp_path, "k.cu", """
        #include <cstdio>
        #include <cstdlib>
        #include "types.h"
        __global__ void headed(real *x, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          Pair p; p.a = (real)MODE_SCALE; p.b = (real)(i % DIV);
          if (i < n) x[i] = x[i] * p.a + p.b + (real)MODE_SHIFT;
        }
    """ + MAIN % {"decl": "float", "launch": "headed<<<n / 64, 64>>>(d, n)"})
    report = port_file(src, include_dirs=[str(tmp_path / "inc")], write=False)
    v = _verdicts(report)["headed"]
    assert v.status == "verified", v.reason
    assert v.workload == "captured"
    assert "#define DIV" in v.module_text and "struct Pair" in v.module_text and "enum Mode" in v.module_text
    # once per name, the nested header's names before the header that uses them
    assert v.module_text.count("#define LOG_DIV") == v.module_text.count("#define DIV ")
    assert v.module_text.index("typedef float real") < v.module_text.index("struct Pair")


def test_a_file_included_through_another_file_sees_what_its_includers_included_first(tmp_path):
    """myocyte: main.cu includes define.c (#define fp float) and work.cu, which includes the kernel file and a
    file of __device__ helpers the kernel calls."""
    _write(tmp_path, "define.c", "#define fp float\n#define SCALE 3\n")
    _write(tmp_path, "helpers.cu", "__device__ fp twice(fp v) { return v * 2; }\n")
    kern = _write(tmp_path, "kernel_x.cu", """
        __global__ void kx(fp *x, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) x[i] = twice(x[i]) + SCALE;
        }
    """)
    _write(tmp_path, "work.cu", """
        #include "helpers.cu"
        #include "kernel_x.cu"
        void work(fp *d, int n) { kx<<<n / 64, 64>>>(d, n); }
    """)
    _write(tmp_path, "main.cu", """
        #include <cstdio>
        #include <cstdlib>
        #include "define.c"
        #include "work.cu"
    """ + MAIN % {"decl": "fp", "launch": "work(d, n)"})
    prefixed = with_program_prefix(kern, kern.read_text())
    assert prefixed.index('#include "define.c"') < prefixed.index('#include "helpers.cu"') < prefixed.index("kx(")
    report = port_file(kern, write=False)
    v = _verdicts(report)["kx"]
    assert v.status == "verified", v.reason
    assert "twice" in v.module_text and "#define fp float" in v.module_text


def test_a_file_included_by_a_unit_of_its_program_sees_that_units_headers(tmp_path):
    """hybridsort: bucketsort.cu includes bucketsort.cuh (DIVISIONS) then the kernel file; main.cu calls into
    bucketsort.cu without including it."""
    _write(tmp_path, "sort.cuh", "#define DIVISIONS (1 << 4)\n")
    kern = _write(tmp_path, "sort_kernel.cu", """
        #define BLOCK_MEMORY (DIVISIONS * 2)
        __global__ void bucket(float *x, int n) {
          __shared__ float s[BLOCK_MEMORY];
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          s[threadIdx.x % BLOCK_MEMORY] = 1.0f;
          __syncthreads();
          if (i < n) x[i] += s[0] + DIVISIONS;
        }
    """)
    _write(tmp_path, "sort.cu", """
        #include "sort.cuh"
        #include "sort_kernel.cu"
        void runSort(float *d, int n) { bucket<<<n / 64, 64>>>(d, n); }
    """)
    _write(tmp_path, "main.cu", """
        #include <cstdio>
        #include <cstdlib>
        void runSort(float *d, int n);
    """ + MAIN % {"decl": "float", "launch": "runSort(d, n)"})
    prefixed = with_program_prefix(kern, kern.read_text())
    assert "sort.cuh" in prefixed
    report = port_file(kern, write=False)
    v = _verdicts(report)["bucket"]
    assert v.status == "verified", v.reason
    assert "#define DIVISIONS" in v.module_text


def test_a_union_holding_an_aligned_struct_is_carried_into_both_ports(tmp_path):
    """dct8x8's PackedShorts: the parser makes an error of it; the port needs it declared in both headers."""
    src = _write(tmp_path, "packed.cu", """
        #include <cstdio>
        #include <cstdlib>
        union Packed
        {
            struct __align__(8)
            {
                short lo;
                short hi;
            };
            unsigned int whole;
        };
        __global__ void swap_halves(unsigned int *x, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i >= n) return;
          Packed p, q;
          p.whole = x[i];
          q.lo = p.hi; q.hi = p.lo;
          x[i] = q.whole;
        }
    """ + MAIN % {"decl": "unsigned int", "launch": "swap_halves<<<n / 64, 64>>>(d, n)"})
    assert any(e.startswith("union Packed") for e in with_aggregates(find_kernels(src.read_text(), "packed.cu").preamble,
                                                                      src.read_text()))
    report = port_file(src, write=False)
    v = _verdicts(report)["swap_halves"]
    assert v.status == "verified", v.reason
    tr = translate_kernel(find_kernels(src.read_text(), str(src)), "swap_halves", str(src))
    assert "union Packed" in tr.header and "union Packed" in tr.cuda_header
    assert "alignas(8)" in tr.header


def test_warp_reduce_intrinsics_map_to_simd_reductions():
    metal, issues, applied = translate_snippet(
        "int s = __reduce_add_sync(0xffffffff, v); unsigned m = __reduce_min_sync(mask, u); "
        "unsigned M = __reduce_max_sync(mask, u); unsigned a = __reduce_and_sync(0xffffffff, f); "
        "unsigned o = __reduce_or_sync(0xffffffff, f); unsigned x = __reduce_xor_sync(0xffffffff, f);")
    assert metal == ("int s = simd_sum(v); unsigned m = simd_min(u); unsigned M = simd_max(u); "
                     "unsigned a = simd_and(f); unsigned o = simd_or(f); unsigned x = simd_xor(f);"), metal
    assert not [i for i in issues if i.severity == "error"]
    assert {"warp.reduce_add", "warp.reduce_xor"} <= set(applied)


def test_warp_reduce_kernels_run_in_the_simulator_and_their_ports_match(tmp_path):
    src = _write(tmp_path, "wred.cu", """
        #include <cstdio>
        #include <cstdlib>
        __global__ void wred(unsigned int *x, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          unsigned v = i < n ? x[i] + (unsigned)(i & 5) : 0u;
          unsigned s = __reduce_add_sync(0xffffffff, v);
          unsigned lo = __reduce_min_sync(0xffffffff, v), hi = __reduce_max_sync(0xffffffff, v);
          unsigned a = __reduce_and_sync(0xffffffff, v | 8u), o = __reduce_or_sync(0xffffffff, v);
          unsigned e = __reduce_xor_sync(0xffffffff, v);
          if (i < n) x[i] = s * 1000003u + lo * 7919u + hi * 131u + a * 31u + o * 17u + e;
        }
    """ + MAIN % {"decl": "unsigned int", "launch": "wred<<<n / 64, 64>>>(d, n)"})
    report = port_file(src, write=False)
    v = _verdicts(report)["wred"]
    assert v.status == "verified", v.reason
    assert "simd_sum(" in v.module_text and "simd_xor(" in v.module_text


def test_dynamic_shared_memory_through_a_proxy_struct_is_the_extern_array_in_both_ports(tmp_path):
    src = _write(tmp_path, "proxy.cu", """
        #include <cstdio>
        #include <cstdlib>
        template <class T> struct Smem {
          __device__ inline operator T *() { extern __shared__ int __smem[]; return (T *)__smem; }
        };
        template <typename T> __global__ void rev(T *x, int n) {
          T *s = Smem<T>();
          int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
          s[t] = i < n ? x[i] : (T)0;
          __syncthreads();
          if (i < n) x[i] = s[blockDim.x - 1 - t];
        }
    """ + MAIN % {"decl": "float", "launch": "rev<float><<<n / 64, 64, 64 * sizeof(float)>>>(d, n)"})
    report = port_file(src, write=False)
    v = _verdicts(report)["rev"]
    assert v.status == "verified", v.reason
    assert v.workload == "captured" and set(v.dialects.values()) == {"passed"}, v.dialects


ASYNC_HEAD = """
    #include <cstdio>
    #include <cstdlib>
    #include <cuda/pipeline>
    #include <cuda/barrier>
"""


def test_single_stage_async_copies_become_plain_copies_and_verify(tmp_path):
    src = _write(tmp_path, "acopy.cu", ASYNC_HEAD + """
    __global__ void staged(float *x, int n) {
      __shared__ alignas(alignof(float4)) float s[64];
      __shared__ cuda::barrier<cuda::thread_scope_block> bar;
      if (threadIdx.x == 0) init(&bar, blockDim.x);
      __syncthreads();
      const auto shape1 = cuda::aligned_size_t<alignof(float)>(sizeof(float));
      cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      pipe.producer_acquire();
      cuda::memcpy_async(&s[threadIdx.x], &x[i], shape1, pipe);
      pipe.producer_commit();
      pipe.consumer_wait();
      __syncthreads();
      float v = s[63 - threadIdx.x];
      pipe.consumer_release();
      bar.arrive_and_wait();
      cuda::memcpy_async(&s[threadIdx.x], &x[i], sizeof(float), bar);
      bar.arrive_and_wait();
      if (i < n) x[i] = v * 10.0f + s[(threadIdx.x + 1) % 64];
    }
    """ + MAIN % {"decl": "float", "launch": "staged<<<n / 64, 64>>>(d, n)"})
    report = port_file(src, write=False)
    v = _verdicts(report)["staged"]
    assert v.status == "verified", v.reason
    assert "ks_c" in v.module_text and "__syncthreads();" in v.module_text


def test_a_multi_stage_pipeline_is_refused_with_its_construct_and_line(tmp_path):
    src = _write(tmp_path, "multi.cu", ASYNC_HEAD + """
    __global__ void multi(float *x, const float *y, int n) {
      __shared__ float s[2][64];
      cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
      float acc = 0.0f;
      for (int t = 0, f = 0; t < 4; t++) {
        for (; f <= t + 1 && f < 4; f++) {
          pipe.producer_acquire();
          cuda::memcpy_async(&s[f % 2][threadIdx.x], &y[f * 64 + threadIdx.x], sizeof(float), pipe);
          pipe.producer_commit();
        }
        pipe.consumer_wait();
        __syncthreads();
        acc += s[t % 2][threadIdx.x];
        pipe.consumer_release();
      }
      x[threadIdx.x] = acc;
    }
    """)
    tr = translate_kernel(find_kernels(src.read_text(), str(src)), "multi", str(src))
    errs = [i for i in tr.errors if "multi-stage" in i.construct]
    commit_line = next(n for n, l in enumerate(src.read_text().splitlines()) if "producer_commit" in l)
    assert errs and errs[0].line == commit_line, tr.report
    assert "consumer_wait" in errs[0].message
