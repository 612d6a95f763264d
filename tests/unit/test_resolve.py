"""One resolver for "which task is this kernel" (ksearch_engine/resolve.py), as the CLI, the server and the
search ask it: task file first, then the user's CUDA kernel itself (captured task), then a family recognised
from specs/families.yaml, else a prefilled task file for the user to edit."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ksearch_engine.resolve import ResolveError, optimizable, recognize_family, resolve
from ksearch_engine.task import KernelTask

DATA = Path(__file__).parents[1] / "data" / "optimize"


@pytest.mark.parametrize("names,family", [
    (("softmax_kernel", "x"), "softmax"), (("rms_norm_fwd", "k"), "rmsnorm"), (("layer_norm", "ln"), "layernorm"),
    (("flash_attention_fwd", "a"), "attention"), (("paged_decode", "p"), "paged_decode"),
    (("selective_scan", "mamba"), "scan"), (("topk_routing", "router"), "moe_gating"),
    (("saxpy", "saxpy"), None), (("histogram", "hist"), None)])
def test_one_family_recognizer_reads_the_ids_and_aliases_of_specs(names, family):
    assert recognize_family(*names) == family


def test_a_cuda_kernel_with_a_program_becomes_its_own_captured_task(tmp_path):
    src = tmp_path / "saxpy.cu"
    shutil.copy(DATA / "saxpy.cu", src)
    r = resolve(str(src), "saxpy")
    assert r.task.origin == "captured" and r.family is None and r.kernel == "saxpy"
    assert r.task.outputs == ["y"] and "captured launch" in r.how
    assert [w.dims["x_len"] for w in r.task.bench_workloads] == [65536]
    assert not list(tmp_path.glob("*.task.toml"))
    assert optimizable(src, "saxpy") == (True, None)


def test_a_task_file_next_to_the_kernel_wins(tmp_path):
    src = tmp_path / "saxpy.cu"
    shutil.copy(DATA / "saxpy.cu", src)
    (tmp_path / "saxpy.saxpy.task.toml").write_text(
        'name = "mine"\noutputs = ["y"]\nreference = """\nimport mlx.core as mx\ndef reference(x):\n    return x\n"""\n'
        '[[inputs]]\nname = "x"\nshape = ["n"]\n[[workloads]]\nname = "s"\ndims = { n = 8 }\n')
    r = resolve(str(src), "saxpy")
    assert r.task.name == "mine" and r.task.origin == "task" and "task file" in r.how


def test_nothing_to_infer_writes_a_prefilled_task_file_with_named_dims(tmp_path):
    metal = tmp_path / "blend.metal"
    metal.write_text("#include <metal_stdlib>\nusing namespace metal;\n"
                     "kernel void blend(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],\n"
                     "                  constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {\n"
                     "    if (i < n) out[i] = 0.5f * a[i];\n}\n")
    with pytest.raises(ResolveError, match="prefilled task file") as e:
        resolve(str(metal), "blend")
    tf = e.value.task_file
    assert tf == tmp_path / "blend.blend.task.toml" and tf.exists()
    text = tf.read_text()
    assert "shape = [" in text and "*" not in text.split("[[inputs]]", 1)[1]
    with pytest.raises(Exception, match="write the reference"):    # the user must fill in the reference
        KernelTask.load(tf) and exec(KernelTask.load(tf).reference + "\nreference(None)", {})


def test_a_family_name_and_an_unknown_target(tmp_path):
    assert resolve("softmax").task.name.startswith("softmax") or resolve("softmax").family is not None
    with pytest.raises(ResolveError, match="not a family name"):
        resolve(str(tmp_path / "nope.cu"))


STRUCT_BUFFER = """
typedef struct { float x, y; } Point;
__global__ void dist_to(const Point* pts, float* out, int n, float px, float py) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    Point p = pts[i];
    out[i] = sqrtf((p.x - px) * (p.x - px) + (p.y - py) * (p.y - py));
  }
}
"""


def test_a_kernel_reading_a_buffer_of_structs_becomes_a_task_its_root_passes(tmp_path):
    """A buffer of structs reaches the task as the port's launch() takes it: its bytes in the port's element type;
    the root (the port as is) passes against the original's reference in the simulator."""
    from ksearch_engine.evaluate import Evaluator

    src = tmp_path / "points.cu"
    src.write_text(STRUCT_BUFFER)
    r = resolve(str(src), "dist_to")
    assert r.task.origin == "captured" and r.task.outputs == ["out"]
    pts = next(i for i in r.task.inputs if i.name == "pts")
    assert pts.dtype == "float32"
    w = r.task.workloads[0]
    assert w.dims["pts_len"] % 2 == 0     # two floats per Point
    with Evaluator(r.task, backend="sim") as ev:
        res = ev.evaluate(r.task.initial, timing=False)
    assert res.status == "passed", res.message


INTERVALS = r"""
#include <cassert>
#include <cstdio>
#include <cstdlib>
__global__ void spread(const float* lo, const float* hi, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    assert(hi[i] - lo[i] <= 4.0f);          // the program's invariant: intervals of at most 4
    int cnt = (int)(hi[i] - lo[i]);
    for (int k = 0; k < 4; k++) out[i * 4 + k] = k < cnt ? lo[i] + k : 0.0f;
  }
}
int main() {
  const int n = 256;
  float *lo = (float*)malloc(n * 4), *hi = (float*)malloc(n * 4);
  for (int i = 0; i < n; i++) { lo[i] = (float)(rand() % 100); hi[i] = lo[i] + (float)(i % 5); }
  float *dlo, *dhi, *dout;
  cudaMalloc(&dlo, n * 4); cudaMalloc(&dhi, n * 4); cudaMalloc(&dout, n * 16);
  cudaMemcpy(dlo, lo, n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dhi, hi, n * 4, cudaMemcpyHostToDevice);
  spread<<<n / 64, 64>>>(dlo, dhi, dout, n);
  cudaDeviceSynchronize();
  printf("done\n");
  return 0;
}
"""


def test_inputs_whose_redrawn_values_break_the_originals_invariant_stay_as_captured(tmp_path):
    """Redrawn within their captured ranges, lo and hi no longer make intervals of at most 4 and the original's
    assert fails: the task keeps the captured contents for every check (said in a note), and the root passes."""
    from ksearch_engine.evaluate import Evaluator

    src = tmp_path / "intervals.cu"
    src.write_text(INTERVALS)
    r = resolve(str(src), "spread")
    assert r.task.origin == "captured"
    assert not any(i.vary for i in r.task.inputs)
    assert any("faults on inputs redrawn" in n and "spread" in n for n in r.notes), r.notes
    with Evaluator(r.task, backend="sim") as ev:
        res = ev.evaluate(r.task.initial, timing=False)
    assert res.status == "passed", res.message


DOUBLES = r"""
#include <cstdio>
#include <cstdlib>
__global__ void axpyd(const double* x, double* y, double a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
int main() {
  const int n = 1024;
  double* h = (double*)malloc(n * sizeof(double));
  for (int i = 0; i < n; i++) h[i] = 0.001 * i;
  double *dx, *dy;
  cudaMalloc(&dx, n * sizeof(double)); cudaMalloc(&dy, n * sizeof(double));
  cudaMemcpy(dx, h, n * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, h, n * sizeof(double), cudaMemcpyHostToDevice);
  axpyd<<<n / 128, 128>>>(dx, dy, 1.5, n);
  cudaMemcpy(h, dy, n * sizeof(double), cudaMemcpyDeviceToHost);
  printf("%f\n", h[10]);
  return 0;
}
"""


def test_a_kernel_on_double_buffers_is_optimized_as_the_ports_compute_it(tmp_path):
    """Both ports compute doubles as float: the task's buffers are float32, the reference is the original in double
    (outputs compared as float), said in a note; the root passes and a candidate that drops a term fails (it said
    'parameter x holds doubles: MLX kernels have no float64')."""
    from ksearch_engine.evaluate import Evaluator

    src = tmp_path / "axpyd.cu"
    src.write_text(DOUBLES)
    r = resolve(str(src), "axpyd")
    assert {i.name: i.dtype for i in r.task.inputs}["x"] == "float32"
    assert any("hold doubles" in n for n in r.notes), r.notes
    wrong = r.task.initial.replace("a * x[i] + y[i]", "a * x[i]")
    assert wrong != r.task.initial
    with Evaluator(r.task, backend="sim") as ev:
        ok = ev.evaluate(r.task.initial, timing=False)
        bad = ev.evaluate(wrong, timing=False)
    assert ok.status == "passed", ok.message
    assert bad.status == "failed"
