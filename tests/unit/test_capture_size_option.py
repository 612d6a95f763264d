"""A program that reads its input from a file unless a size option on its command line makes it generate the input
(sim/capture.py, _with_size_option): with the file absent, the capture runs it with that option rather than stopping
at the missing file; a program with no such option still stops with the file named. Every program here is written
for these tests and runs on the CPU runtime for real."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from ksearch_engine.sim.capture import capture_program, size_options
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

GENERATES = """
#include <cstdio>
#include <cstdlib>
#include <cstring>
__global__ void square(float* o, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = x[i] * x[i];
}
int main(int argc, char** argv) {
  int n = 0;
  for (int a = 1; a < argc; a++)
    if (strncmp(argv[a], "--length=", 9) == 0) n = atoi(argv[a] + 9);
  float* h;
  if (n > 0) {
    h = (float*)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = (float)(i % 7);
  } else {
    FILE* f = fopen("points.bin", "rb");
    if (!f) { fprintf(stderr, "cannot read points.bin\\n"); return 1; }
    fread(&n, sizeof(int), 1, f);
    h = (float*)malloc(n * sizeof(float));
    fread(h, sizeof(float), n, f);
    fclose(f);
  }
  float *dx, *dy;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMemcpy(dx, h, n * sizeof(float), cudaMemcpyHostToDevice);
  square<<<(n + 127) / 128, 128>>>(dy, dx, n);
  cudaFree(dx); cudaFree(dy); free(h);
  return 0;
}
"""


def test_a_missing_input_file_runs_the_program_with_its_own_size_option(tmp_path):
    src = write(tmp_path, "gen.cu", GENERATES)
    assert [o[0] for o in size_options({src: src.read_text()})] == ["--length"]
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "ok", cap.error
    assert cap.argv == ["--length=1024"]
    ln = cap.launches[0]
    assert ln.kernel == "square" and ln.grid[0] == 8
    x = np.arange(1024) % 7
    assert np.allclose(np.load(f"{cap.dir}/{ln.args[0].after}"), x * x)
    note = next(n for n in cap.notes if n.kind == "argv")
    assert "points.bin" in note.message and note.line == line_of(GENERATES, '"--length="')


def test_without_a_size_option_the_missing_file_is_still_named(tmp_path):
    text = GENERATES.replace('"--length="', '"--verbose="')
    src = write(tmp_path, "plain.cu", text)
    cap = capture_program(src, timeout_s=30)
    assert cap.status == "failed" and not cap.launches
    assert "points.bin" in cap.error and "Traceback" not in cap.error
