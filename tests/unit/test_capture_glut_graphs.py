"""Launch capture of programs that show their results with GLUT (ksim_gl.h: headless GLUT/OpenGL, CUDA-GL interop on
buffer objects) and of programs that replay CUDA graphs made by stream capture (ksim_host.h).

Every program here is written for these tests and runs on the CPU runtime for real."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ksearch_engine.portfile import port_file
from ksearch_engine.sim.capture import capture_program
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


SHOW_AFTER = """
#include <cstdio>
#include <GL/glut.h>
#define W 32
static unsigned char* shown;
static int drawn = 0;
__global__ void shade(unsigned char* img, int w) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w) { unsigned char* p = img + 4 * (y * w + x); p[0] = x * 8; p[1] = y * 8; p[2] = (x ^ y) & 255; p[3] = 255; }
}
static void draw() {
  glClearColor(0.0, 0.0, 0.0, 1.0);
  glClear(GL_COLOR_BUFFER_BIT);
  glDrawPixels(W, W, GL_RGBA, GL_UNSIGNED_BYTE, shown);
  glFlush();
  drawn++;
}
static void key(unsigned char k, int, int) { if (k == 27) exit(0); }
static void report() { printf("drawn %d pixel %d\\n", drawn, shown[4 * (3 * W + 5)]); }
int main(int argc, char** argv) {
  unsigned char* d;
  shown = new unsigned char[W * W * 4];
  cudaMalloc(&d, W * W * 4);
  shade<<<dim3(1, W), W>>>(d, W);
  cudaMemcpy(shown, d, W * W * 4, cudaMemcpyDeviceToHost);
  atexit(report);
  glutInit(&argc, argv);
  glutInitDisplayMode(GLUT_SINGLE | GLUT_RGBA);
  glutInitWindowSize(W, W);
  glutInitWindowPosition(10, 10);
  glutCreateWindow("shade");
  glutKeyboardFunc(key);
  glutDisplayFunc(draw);
  glutMainLoop();
  return 1;   // glutMainLoop does not return
}
"""


def test_a_glut_program_that_launches_before_the_main_loop_is_captured_headless_and_verifies(tmp_path):
    src = write(tmp_path, "show.cu", SHOW_AFTER)
    rep = port_file(src, write=False)
    assert rep.capture.status == "ok"
    (v,) = rep.kernels
    assert v.kernel == "shade" and v.status == "verified" and v.workload == "captured", v.reason
    cap = capture_program(src, timeout_s=60)
    assert [ln.kernel for ln in cap.launches] == ["shade"]
    # the display callback ran once and the program ended normally (exit(0): atexit handlers ran)
    assert "drawn 1 pixel 40" in cap.stdout_tail and cap.exit_code == 0
    (note,) = [n for n in cap.notes if n.kind == "stubbed" and "GLUT" in n.message]
    assert "not shown" in note.message and note.line == line_of(SHOW_AFTER, "glutMainLoop();")


ANIMATED = """
#define GL_GLEXT_PROTOTYPES
#include <GL/glut.h>
#include <cuda_gl_interop.h>
#include <cstdio>
#define N 256
static GLuint pbo;
static cudaGraphicsResource* res;
static int frames = 0;
__global__ void wave(uchar4* out, int n, int tick) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = make_uchar4((i + tick) & 255, tick, 0, 255);
}
static void idle() {
  uchar4* p;
  size_t bytes;
  cudaGraphicsMapResources(1, &res, 0);
  cudaGraphicsResourceGetMappedPointer((void**)&p, &bytes, res);
  wave<<<(int)(bytes / sizeof(uchar4)) / 64, 64>>>(p, N, ++frames);
  cudaGraphicsUnmapResources(1, &res, 0);
  glutPostRedisplay();
}
static void display() {
  glDrawPixels(16, 16, GL_RGBA, GL_UNSIGNED_BYTE, 0);
  glutSwapBuffers();
}
static void reshape(int w, int h) { glViewport(0, 0, w, h); }
static void mouse(int, int, int, int) {}
static void bye() { printf("frames %d\\n", frames); }
int main(int argc, char** argv) {
  cudaGLSetGLDevice(0);
  glutInit(&argc, argv);
  glutInitDisplayMode(GLUT_DOUBLE | GLUT_RGBA);
  glutInitWindowSize(16, 16);
  glutCreateWindow("wave");
  glGenBuffers(1, &pbo);
  glBindBuffer(GL_PIXEL_UNPACK_BUFFER, pbo);
  glBufferData(GL_PIXEL_UNPACK_BUFFER, N * 4, NULL, GL_DYNAMIC_DRAW);
  cudaGraphicsGLRegisterBuffer(&res, pbo, cudaGraphicsMapFlagsWriteDiscard);
  atexit(bye);
  glutDisplayFunc(display);
  glutIdleFunc(idle);
  glutReshapeFunc(reshape);
  glutMouseFunc(mouse);
  glutMainLoop();
  return 0;
}
"""


def test_launches_made_only_from_the_idle_callback_on_an_interop_buffer_are_captured(tmp_path):
    src = write(tmp_path, "wave.cu", ANIMATED)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", cap.error
    assert [ln.kernel for ln in cap.launches] == ["wave", "wave"]
    assert [a.value for a in cap.launches[1].args if a.kind == "scalar"] == [256, 2]
    # the buffer object's store (glBufferData's 1024 bytes) is what the mapped pointer names
    buf = cap.launches[0].args[0]
    assert buf.kind == "buffer" and buf.nbytes == 1024
    out = np.load(f"{cap.dir}/{cap.launches[1].args[0].after}").reshape(-1, 4)
    assert list(out[5]) == [7, 2, 0, 255]
    assert "frames 2" in cap.stdout_tail
    assert any(n.kind == "stubbed" and "idle callback 2 times" in n.message for n in cap.notes)
    rep = port_file(src, write=False)
    (v,) = rep.kernels
    assert v.status == "verified" and v.workload == "captured", v.reason


GRAPH = """
#include <cstdio>
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void square(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * y[i];
}
__global__ void shift(float* y, int n, float by) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += by;
}
int main() {
  const int n = 256;
  float hx[n], hy[n];
  for (int i = 0; i < n; i++) { hx[i] = i % 7; hy[i] = 1; }
  float *x, *y;
  cudaMalloc(&x, n * 4); cudaMalloc(&y, n * 4);
  cudaStream_t s, side;
  cudaStreamCreate(&s);
  cudaStreamCreate(&side);
  cudaEvent_t fork, join;
  cudaEventCreate(&fork); cudaEventCreate(&join);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  cudaMemcpyAsync(x, hx, sizeof hx, cudaMemcpyHostToDevice, s);   // read from hx when the graph runs
  cudaMemsetAsync(y, 0, n * 4, s);
  axpy<<<n / 64, 64, 0, s>>>(2.0f, x, y, n);
  cudaEventRecord(fork, s);
  cudaStreamWaitEvent(side, fork, 0);                            // side joins the capture
  square<<<n / 64, 64, 0, side>>>(y, n);
  cudaEventRecord(join, side);
  cudaStreamWaitEvent(s, join, 0);
  shift<<<n / 64, 64, 0, s>>>(y, n, 0.5f);
  cudaMemcpyAsync(hy, y, sizeof hy, cudaMemcpyDeviceToHost, s);
  cudaStreamEndCapture(s, &g);
  printf("before %g\\n", hy[3]);                                   // nothing ran during the capture
  cudaGraphInstantiate(&ge, g, NULL, NULL, 0);
  for (int k = 0; k < 2; k++) {
    hx[3] = 10 + k;
    cudaGraphLaunch(ge, s);
    cudaStreamSynchronize(s);
    printf("replay %d %g\\n", k, hy[3]);
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return 0;
}
"""


def test_stream_capture_records_a_graph_that_each_launch_replays_in_order(tmp_path):
    src = write(tmp_path, "graph.cu", GRAPH)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", cap.error
    assert [ln.kernel for ln in cap.launches] == ["axpy", "square", "shift"] * 2
    assert cap.launch_counts == {"axpy": 2, "square": 2, "shift": 2}
    # the copies and memset replayed with each launch, reading the host array as it is then
    assert "before 1\n" in cap.stdout_tail
    assert "replay 0 400.5" in cap.stdout_tail and "replay 1 484.5" in cap.stdout_tail
    second = cap.launches[3]
    assert np.load(f"{cap.dir}/{second.args[1].before}")[3] == 11
    rep = port_file(src, write=False)
    got = {v.kernel: v for v in rep.kernels}
    assert set(got) == {"axpy", "square", "shift"}
    for v in got.values():
        assert v.status == "verified" and v.workload == "captured", (v.kernel, v.reason)


def test_a_graph_built_node_by_node_stops_the_capture_naming_the_call(tmp_path):
    src = write(tmp_path, "nodes.cu", """
__global__ void k(float* y) { y[threadIdx.x] = 1; }
int main() {
  float* y;
  cudaMalloc(&y, 128);
  k<<<1, 32>>>(y);
  cudaGraph_t g;
  cudaGraphCreate(&g, 0);
  return 0;
}
""")
    cap = capture_program(src, timeout_s=60)
    assert [ln.kernel for ln in cap.launches] == ["k"]
    (note,) = [n for n in cap.notes if n.kind == "gpu_only"]
    assert "cudaGraphCreate" in note.message and note.line == 8
