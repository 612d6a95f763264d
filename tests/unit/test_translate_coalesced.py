"""Issue 13 (cuda-samples warpAggregatedAtomicsCG): cooperative_groups' coalesced groups (coalesced_threads, size,
thread_rank, shfl, labeled_partition, reduce) and a grid group read for its ranks port to Metal and verify in the
simulator against the original, on a program written here."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file

SRC = """
    #include <cstdio>
    #include <cstdlib>
    #include <cooperative_groups.h>
    #include <cooperative_groups/reduce.h>
    namespace cg = cooperative_groups;

    // one atomic per group of lanes that arrive together: the leader adds the group's size, the others offset
    __device__ int take_slot(int *counter) {
      cg::coalesced_group g = cg::coalesced_threads();
      int base = 0;
      if (g.thread_rank() == 0) base = atomicAdd(counter, (int)g.size());
      base = g.shfl(base, 0);
      return base + (int)g.thread_rank();
    }

    __global__ void keep_odd(int *out, int *count, const int *in, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n && (in[i] & 1)) out[take_slot(count)] = in[i];
    }

    __device__ void bucket_max(int bucket, int *maxes, int v) {
      cg::coalesced_group active = cg::coalesced_threads();
      auto same = cg::labeled_partition(active, bucket);
      int m = cg::reduce(same, v, cg::greater<int>());
      if (same.thread_rank() == 0) atomicMax(&maxes[bucket], m + 1000 * (int)same.size());
    }

    __global__ void max_per_bucket(const int *keys, const int *vals, int *maxes, int n, int nb) {
      cg::grid_group grid = cg::this_grid();
      for (int i = grid.thread_rank(); i < n; i += grid.size()) {
        if (keys[i] < nb) bucket_max(keys[i], maxes, vals[i]);
      }
    }

    int main() {
      const int n = 512, nb = 5;
      int *h = (int *)malloc(n * sizeof(int)), *k = (int *)malloc(n * sizeof(int));
      for (int i = 0; i < n; i++) { h[i] = (i * 7919) % 97; k[i] = (i * 31 + i / 3) % 7; }
      int *d_in, *d_out, *d_count, *d_keys, *d_max;
      cudaMalloc(&d_in, n * sizeof(int)); cudaMalloc(&d_out, n * sizeof(int)); cudaMalloc(&d_count, sizeof(int));
      cudaMalloc(&d_keys, n * sizeof(int)); cudaMalloc(&d_max, nb * sizeof(int));
      cudaMemcpy(d_in, h, n * sizeof(int), cudaMemcpyHostToDevice);
      cudaMemcpy(d_keys, k, n * sizeof(int), cudaMemcpyHostToDevice);
      cudaMemset(d_out, 0, n * sizeof(int)); cudaMemset(d_count, 0, sizeof(int)); cudaMemset(d_max, 0, nb * sizeof(int));
      keep_odd<<<n / 128, 128>>>(d_out, d_count, d_in, n);
      max_per_bucket<<<2, 64>>>(d_keys, d_in, d_max, n, nb);
      int c = 0, m[nb];
      cudaMemcpy(&c, d_count, sizeof(int), cudaMemcpyDeviceToHost);
      cudaMemcpy(m, d_max, nb * sizeof(int), cudaMemcpyDeviceToHost);
      printf("%d %d\\n", c, m[0]);
      return 0;
    }
"""


def test_coalesced_groups_and_a_grid_stride_grid_group_port_and_verify(tmp_path: Path):
    src = tmp_path / "agg.cu"
    src.write_text(textwrap.dedent(SRC).lstrip())
    report = port_file(src, write=False)
    v = {k.kernel: k for k in report.kernels}
    for name in ("keep_odd", "max_per_bucket"):
        assert v[name].status == "verified", (name, v[name].reason)
        assert v[name].workload == "captured"
    metal = v["max_per_bucket"].module_text.split("CUDA_HEADER")[0]
    assert "struct coalesced_group" in metal and "cooperative_groups::grid_group(thread_position_in_threadgroup" in metal


def test_a_grid_group_that_syncs_is_still_reported():
    from ksearch_engine.source import find_kernels
    from ksearch_engine.translate import translate_kernel
    cu = textwrap.dedent("""
        #include <cooperative_groups.h>
        namespace cg = cooperative_groups;
        __global__ void two_phase(float *x) {
          cg::grid_group grid = cg::this_grid();
          x[grid.thread_rank()] += 1.0f;
          grid.sync();
          x[grid.thread_rank()] *= 2.0f;
        }
    """)
    tr = translate_kernel(find_kernels(cu, "g.cu"), "two_phase", "g.cu")
    errors = [i for i in tr.report if i.severity == "error"]
    assert any("grid" in i.construct for i in errors), tr.report
    assert "cooperative_groups::grid_group(" not in tr.metal_source
