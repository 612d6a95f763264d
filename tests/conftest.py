"""Shared fixtures: a small real task that every evaluator test can run on the CPU in a second."""
import pytest

from ksearch_engine.task import InputSpec, KernelTask, Workload

SOFTMAX_REF = "import mlx.core as mx\n\ndef reference(x):\n    return mx.softmax(x, axis=-1)\n"


@pytest.fixture
def softmax_task() -> KernelTask:
    return KernelTask(
        name="row-softmax", family="softmax", inputs=[InputSpec(name="x", shape=["R", "C"], init="normal", low=-3, high=3)],
        outputs=["y"], reference=SOFTMAX_REF,
        workloads=[Workload(name="small", dims={"R": 8, "C": 64}), Workload(name="ragged", dims={"R": 3, "C": 33})],
        bench_workloads=[Workload(name="bench", dims={"R": 4096, "C": 4096})],
        cpu_bench_workloads=[Workload(name="bench-cpu", dims={"R": 256, "C": 512})], seeds=[0, 1])
