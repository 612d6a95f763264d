"""CUB's block- and warp-level collectives (`#include <cub/cub.cuh>`): BlockReduce (Sum, Reduce with cub::Max()),
WarpReduce and BlockScan run in the capture and the simulator through our stand-in, sim/ksim_cub.h, and both ports carry
the same text translated like a user's own class templates (a TempStorage in shared memory becomes a threadgroup one in
Metal). A part of CUB the stand-in lacks is named with its line, in one line. The kernels are written for this test."""
from __future__ import annotations

import pytest

from ksearch_engine.portfile import port_file
from tests.sources import line_of, write

MAIN = """
int main() {
  const int n = 1000, blocks = (n + 127) / 128;
  float h[n];
  for (int i = 0; i < n; ++i) h[i] = (float)((i * 37) % 101) * 0.25f - 7.0f;
  float *d_in, *d_out;
  cudaMalloc(&d_in, n * sizeof(float));
  cudaMalloc(&d_out, n * sizeof(float));
  cudaMemcpy(d_in, h, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemset(d_out, 0, n * sizeof(float));
  LAUNCH;
  float r[n];
  cudaMemcpy(r, d_out, sizeof(r), cudaMemcpyDeviceToHost);
  printf("%f %f\\n", r[0], r[1]);
  return 0;
}
"""


def _port(tmp_path, name: str, body: str, launch: str):
    """(port_file's report, the program's text) for `body` (kernels) and a main() launching `launch`."""
    text = "#include <cstdio>\n#include <cub/cub.cuh>\n" + body + MAIN.replace("LAUNCH", launch)
    src = write(tmp_path, f"{name}.cu", text)
    mp = pytest.MonkeyPatch()
    mp.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    try:
        return port_file(src, write=False), text
    finally:
        mp.undo()


def _ported(tmp_path, name: str, kernel: str, body: str, launch: str):
    report, _ = _port(tmp_path, name, body, launch)
    assert report.capture.status == "ok", report.capture
    v = next(k for k in report.kernels if k.kernel == kernel)
    return report, v


def _verified(v):
    assert v.status == "verified", (v.reason, v.messages)
    assert v.workload == "captured" and v.launches_checked >= 1
    assert v.dialects == {"metal": "passed", "cuda": "passed"}


def test_block_reduce_sum_written_by_thread_zero(tmp_path):
    _, v = _ported(tmp_path, "bsum", "block_sum", """
__global__ void block_sum(const float* in, float* out, int n) {
  typedef cub::BlockReduce<float, 128> BlockReduce;
  __shared__ typename BlockReduce::TempStorage temp_storage;
  int i = blockIdx.x * 128 + threadIdx.x;
  float v = i < n ? in[i] : 0.0f;
  float s = BlockReduce(temp_storage).Sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}
""", "block_sum<<<blocks, 128>>>(d_in, d_out, n)")
    _verified(v)
    # the Metal port's temp storage is threadgroup memory, and the stand-in's members take the thread's position
    assert "threadgroup TempStorage* ksc_temp;" in v.module_text
    assert ".Sum(v, thread_position_in_threadgroup)" in v.module_text


def test_block_reduce_max_with_cub_max_and_valid_items(tmp_path):
    _, v = _ported(tmp_path, "bmax", "block_max", """
__global__ void block_max(const float* in, float* out, int n) {
  typedef cub::BlockReduce<float, 128, cub::BLOCK_REDUCE_RAKING> BlockReduce;
  __shared__ typename BlockReduce::TempStorage temp_storage;
  int i = blockIdx.x * 128 + threadIdx.x;
  float v = i < n ? in[i] : -1e30f;
  float m = BlockReduce(temp_storage).Reduce(v, cub::Max());
  __syncthreads();
  int valid = n - blockIdx.x * 128;
  float s = BlockReduce(temp_storage).Sum(i < n ? in[i] : 123.0f, valid);
  if (threadIdx.x == 0) { out[2 * blockIdx.x] = m; out[2 * blockIdx.x + 1] = s; }
}
""", "block_max<<<blocks, 128>>>(d_in, d_out, n)")
    _verified(v)
    assert "cub::Max()" in v.module_text


def test_warp_reduce_sum_per_warp(tmp_path):
    _, v = _ported(tmp_path, "wsum", "warp_sum", """
__global__ void warp_sum(const float* in, float* out, int n) {
  typedef cub::WarpReduce<float> WarpReduce;
  __shared__ typename WarpReduce::TempStorage temp_storage[4];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int warp = threadIdx.x / 32;
  float s = WarpReduce(temp_storage[warp]).Sum(i < n ? in[i] : 0.0f);
  if (threadIdx.x % 32 == 0) out[i / 32] = s;
}
""", "warp_sum<<<blocks, 128>>>(d_in, d_out, n)")
    _verified(v)


def test_block_scan_exclusive_sum_with_aggregate(tmp_path):
    _, v = _ported(tmp_path, "bscan", "block_scan", """
__global__ void block_scan(const float* in, float* out, int n) {
  typedef cub::BlockScan<int, 128> BlockScan;
  __shared__ typename BlockScan::TempStorage temp_storage;
  int i = blockIdx.x * 128 + threadIdx.x;
  int x = i < n ? (int)in[i] : 0;
  int prefix, total;
  BlockScan(temp_storage).ExclusiveSum(x, prefix, total);
  __syncthreads();
  int inclusive;
  BlockScan(temp_storage).InclusiveSum(x, inclusive);
  if (i < n) out[i] = (float)(prefix * 1000 + inclusive) + (float)total / 1024.0f;
}
""", "block_scan<<<blocks, 128>>>(d_in, d_out, n)")
    _verified(v)


def test_an_unsupported_cub_part_is_named_with_its_line(tmp_path):
    body = """
__global__ void sort_block(const float* in, float* out, int n) {
  typedef cub::BlockRadixSort<int, 128, 1> BlockRadixSort;
  __shared__ typename BlockRadixSort::TempStorage temp_storage;
  int i = blockIdx.x * 128 + threadIdx.x;
  int keys[1] = {i < n ? (int)in[i] : 0};
  BlockRadixSort(temp_storage).Sort(keys);
  if (i < n) out[i] = (float)keys[0];
}
"""
    report, text = _port(tmp_path, "sort", body, "sort_block<<<blocks, 128>>>(d_in, d_out, n)")
    line = line_of(text, "cub::BlockRadixSort")
    v = report.kernels[0]
    assert v.status == "not_ported", v
    assert "cub::BlockRadixSort" in v.reason and str(line) in v.reason and "\n" not in v.reason, v.reason
    # the capture stops on it too, with one line naming it (not g++'s pages)
    assert report.capture.status == "failed" and "cub::BlockRadixSort" in (report.capture.error or "")
    assert "\n" not in report.capture.error and "Traceback" not in report.text()
