"""The analysis stage the proposers start from: family, canonical form, and the roofline position computed
from the task's largest timed workload against the backend's ceilings."""
import pytest

from ksearch_engine.analyze import analyze, ceilings, classify
from ksearch_engine.task import InputSpec, KernelTask, Workload
from tests.fakes import toy_family


@pytest.mark.parametrize("src,family", [
    ("def reference(a, b):\n    return a @ b\n", "matmul"),
    ("def reference(x):\n    return mx.softmax(x, axis=-1)\n", "softmax"),
    ("def reference(q, k, v):\n    return mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0)\n", "attention"),
    ("def reference(x):\n    return mx.cumsum(x, axis=1)\n", "scan"),
    ("def reference(s):\n    return mx.argpartition(-s, 2, axis=-1)[..., :2]\n", "moe"),
    ("def reference(x):\n    return mx.sum(x, axis=-1)\n", "reduction"),
    ("def reference(x):\n    return x * mx.sigmoid(x)\n", "elementwise"),
    ("__global__ void k(float* x) { float m = __shfl_xor_sync(0xffffffff, v, 16); y = __expf(x - m) / s; }", "softmax"),
])
def test_classify_reads_the_family_from_the_source(src, family):
    assert classify(src) == family


def test_a_declared_family_wins_and_aliases_resolve():
    assert classify("def reference(x):\n    return x\n", "rmsnorm") == "norm"
    assert classify("def reference(a, b):\n    return a @ b\n", "custom") == "matmul"


def _matmul(m, k, n):
    return KernelTask(name="mm", family="custom", inputs=[InputSpec(name="a", shape=["M", "K"]),
                                                          InputSpec(name="b", shape=["K", "N"])],
                      reference="import mlx.core as mx\ndef reference(a, b):\n    return a @ b\n",
                      bench_workloads=[Workload(name="big", dims={"M": m, "K": k, "N": n}),
                                       Workload(name="small", dims={"M": 8, "K": 8, "N": 8})])


def test_matmul_flops_and_bytes_come_from_the_largest_workload_and_probed_output_shape():
    a = analyze(_matmul(256, 128, 64), "mlx-cpu")
    assert a.family == "matmul" and a.workload == "big"
    assert a.flops == 2 * 256 * 128 * 64
    assert a.bytes == 4 * (256 * 128 + 128 * 64 + 256 * 64)     # output (256, 64) from the lazy probe
    assert a.arithmetic_intensity == pytest.approx(a.flops / a.bytes)
    assert a.bottleneck == "compute" and a.arithmetic_intensity > a.ridge_point


def test_elementwise_is_memory_bound_and_gpu_ceilings_come_from_the_specs():
    t = KernelTask(name="gelu", inputs=[InputSpec(name="x", shape=["N"])],
                   reference="import mlx.core as mx\ndef reference(x):\n    return x * mx.sigmoid(1.702 * x)\n",
                   bench_workloads=[Workload(name="n", dims={"N": 1 << 24})])
    a = analyze(t, "mlx-metal", device="Apple M3 Max")
    assert a.family == "elementwise" and a.bottleneck == "memory"
    assert a.bytes == 2 * 4 * (1 << 24) and a.roofline_ms == pytest.approx(a.bytes / (a.ceilings.bandwidth_gbs * 1e6))
    c = ceilings("mlx-metal", "Apple M3 Max")
    if c.source.startswith("specs/"):
        assert "M3 Max" in c.source
    assert "computes:" in a.text() and "flop/B" in a.text()


def test_a_python_loop_over_rows_is_called_launch_bound():
    task = toy_family.make_task()
    task.initial = toy_family.NAIVE
    a = analyze(task, "mlx-cpu")
    assert a.family == "softmax" and a.bottleneck == "latency"
    assert any("loops in Python" in n for n in a.notes)
