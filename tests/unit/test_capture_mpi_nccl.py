"""MPI and NCCL on the capture's CPU runtime (sim/host_headers.py `_MPI`, `_NCCL`): one process, MPI rank 0 of 1
and one NCCL rank, whose collectives copy the send buffer to the receive buffer, so a data-parallel training step
(kernel, all-reduce of its gradients, kernel) runs and its kernels are captured and ported. A call that needs
another rank stops the capture with one line naming it.

Every program here is written for these tests."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ksearch_engine.sim.capture import capture_program
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


# One data-parallel step: each rank computes gradients of its shard (`grads`), NCCL averages them across ranks on a
# stream, `sgd` applies them; MPI sums the host-side loss. With one rank the average is the rank's own gradients.
STEP = """
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <nccl.h>
#define NCCL_OK(x) do { ncclResult_t r = (x); if (r != ncclSuccess) { \\
    printf("nccl: %s\\n", ncclGetErrorString(r)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
__global__ void grads(const float* w, const float* x, float* g, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) g[i] = 2.0f * (w[i] * x[i] - 1.0f) * x[i];
}
__global__ void sgd(float* w, const float* g, float lr, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= lr * g[i];
}
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cudaSetDevice(rank);
  ncclUniqueId id;
  if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, size, id, rank));
  int nranks = 0;
  NCCL_OK(ncclCommCount(comm, &nranks));
  const int n = 300;
  float hw[n], hx[n];
  for (int i = 0; i < n; i++) { hw[i] = 0.01f * (i % 17); hx[i] = 0.5f + 0.03f * (i % 11); }
  float *w, *x, *g, *gsum;
  cudaMalloc(&w, n * sizeof(float)); cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&g, n * sizeof(float)); cudaMalloc(&gsum, n * sizeof(float));
  cudaMemcpy(w, hw, sizeof hw, cudaMemcpyHostToDevice);
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
  cudaStream_t s;
  cudaStreamCreate(&s);
  grads<<<(n + 127) / 128, 128, 0, s>>>(w, x, g, n);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(g, gsum, n, ncclFloat, ncclAvg, comm, s));
  NCCL_OK(ncclGroupEnd());
  sgd<<<(n + 127) / 128, 128, 0, s>>>(w, gsum, 0.1f, n);
  cudaStreamSynchronize(s);
  float hout[n];
  cudaMemcpy(hout, w, sizeof hout, cudaMemcpyDeviceToHost);
  double loss = 0, total = 0;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    float gi = 2.0f * (hw[i] * hx[i] - 1.0f) * hx[i];
    if (abs(hout[i] - (hw[i] - 0.1f * gi)) > 1e-5f) bad++;
    loss += (hw[i] * hx[i] - 1.0) * (hw[i] * hx[i] - 1.0);
  }
  MPI_Allreduce(&loss, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("ranks %d/%d loss %.4f bad %d\\n", size, nranks, total, bad);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return bad ? 2 : 0;
}
"""


def test_a_data_parallel_step_runs_as_one_rank_and_the_reduced_gradients_reach_the_next_kernel(tmp_path):
    src = write(tmp_path, "step.cu", STEP)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", (cap.error, cap.stdout_tail)
    assert "ranks 1/1" in cap.stdout_tail and "bad 0" in cap.stdout_tail, cap.stdout_tail
    assert cap.kernels() == ["grads", "sgd"]
    g = np.load(f"{cap.dir}/{cap.launches[0].args[2].after}").view(np.uint8).view(np.float32)[:300]
    gsum = np.load(f"{cap.dir}/{cap.launches[1].args[1].before}").view(np.uint8).view(np.float32)[:300]
    np.testing.assert_array_equal(gsum, g)   # the average over one rank: the rank's own gradients
    (note,) = [x for x in cap.notes if "ncclAllReduce" in x.message]
    assert note.kind == "stubbed" and note.line == line_of(STEP, "ncclAllReduce(g, gsum"), note


def test_port_file_captures_and_verifies_the_kernels_of_an_mpi_nccl_program(tmp_path, monkeypatch):
    from ksearch_engine.portfile import port_file

    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "step.cu", STEP)
    res = {v.kernel: v for v in port_file(src, write=False).kernels}
    assert set(res) == {"grads", "sgd"}
    for v in res.values():
        assert (v.status, v.workload) == ("verified", "captured"), (v.kernel, v.reason)


# What one rank cannot do stops the capture with one line naming the call and its line; the launch before is kept.
SEND = """
#include <mpi.h>
#include <nccl.h>
__global__ void fill(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = (float)i; }
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm;
  ncclCommInitRank(&comm, 1, id, 0);
  float *a, *b;
  cudaMalloc(&a, 64 * sizeof(float)); cudaMalloc(&b, 64 * sizeof(float));
  fill<<<1, 64>>>(a, 64);
  ncclGroupStart();
  ncclSend(a, 64, ncclFloat, 0, comm, 0);
  ncclRecv(b, 64, ncclFloat, 0, comm, 0);
  ncclGroupEnd();
  MPI_Finalize();
  return 0;
}
"""


@pytest.mark.parametrize("swap, call", [(None, "ncclSend"),
                                        (("ncclCommInitRank(&comm, 1, id, 0)", "ncclCommInitRank(&comm, 2, id, 0)"),
                                         "ncclCommInitRank"),
                                        (("ncclGroupStart();", "MPI_Send(a, 64, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);"),
                                         "MPI_Send")])
def test_a_call_that_needs_another_rank_stops_the_capture_naming_it(tmp_path, swap, call):
    text = SEND
    if swap:
        text = text.replace(*swap)
    src = write(tmp_path, "send.cu", text)
    cap = capture_program(src, timeout_s=60)
    assert cap.status != "ok" and cap.error and "\n" not in cap.error, (cap.status, cap.error)
    assert call in cap.error and "one process" in cap.error and "Traceback" not in cap.error, cap.error
    (note,) = [n for n in cap.notes if n.kind == "gpu_only"]
    assert call in note.message and note.line == line_of(text, call + "("), note
    assert cap.kernels() == ([] if call == "ncclCommInitRank" else ["fill"]), cap.kernels()
