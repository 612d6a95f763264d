"""Helpers of the adversarial suite: attack candidates by name, a good candidate, evaluators with small limits."""
from __future__ import annotations

import string
from pathlib import Path

from ksearch_engine.evaluate import Evaluator, Limits

CANDIDATES = Path(__file__).parent / "candidates"


def attack(name: str, **subs) -> str:
    """The source of one attack candidate, with its `$NAME` placeholders filled in."""
    text = (CANDIDATES / f"{name}.py").read_text()
    return string.Template(text).safe_substitute({k: str(v) for k, v in subs.items()})


GOOD = attack("good")

# Small limits keep the suite fast; each test that needs others makes its own evaluator.
FAST = dict(wall_s=15, memory_mb=2048, scratch_mb=16, scratch_files=50, file_mb=8, tmp_mb=8)


def make_evaluator(task, **limits) -> Evaluator:
    return Evaluator(task, "mlx-cpu", limits=Limits(**{**FAST, **limits}), repeats=6, warmup=1, timing_max_s=5)


def assert_carries_on(ev: Evaluator) -> None:
    r = ev.evaluate(GOOD, timing=False)
    assert r.status == "passed", f"after an attack, a good candidate did not pass: {r.status}: {r.message}"


def softmax_task():
    from ksearch_engine.task import InputSpec, KernelTask, Workload

    return KernelTask(
        name="row-softmax", family="softmax", inputs=[InputSpec(name="x", shape=["R", "C"], init="normal", low=-3, high=3)],
        outputs=["y"], reference="import mlx.core as mx\n\ndef reference(x):\n    return mx.softmax(x, axis=-1)\n",
        workloads=[Workload(name="small", dims={"R": 8, "C": 64}), Workload(name="ragged", dims={"R": 3, "C": 33})],
        bench_workloads=[Workload(name="bench", dims={"R": 64, "C": 256})], seeds=[0, 1])
