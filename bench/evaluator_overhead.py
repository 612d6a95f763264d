"""Time the evaluator adds per candidate beyond the kernel's own run: cold (fresh workers) and warm
(one worker process reused across candidates of one task). Target: under 100 ms warm on the CPU machine.

    python bench/evaluator_overhead.py [--n 20]

Verification only (timing=False), so what is measured is the sandbox, the process hops, the reference
comparison and the file traffic, not the candidate's timing loop.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import mlx.core as mx
import numpy as np

from ksearch_engine.evaluate import Evaluator
from ksearch_engine.task import InputSpec, KernelTask, Workload

TASK = KernelTask(
    name="row-softmax", family="softmax", inputs=[InputSpec(name="x", shape=["R", "C"], init="normal")],
    outputs=["y"], reference="import mlx.core as mx\ndef reference(x):\n    return mx.softmax(x, axis=-1)\n",
    workloads=[Workload(name="a", dims={"R": 64, "C": 256}), Workload(name="b", dims={"R": 7, "C": 1000})],
    seeds=[0, 1, 2])
CANDIDATE = """
import mlx.core as mx
def kernel(x):
    m = mx.max(x, axis=-1, keepdims=True)
    e = mx.exp(x - m)
    return e / mx.sum(e, axis=-1, keepdims=True)
"""


def kernel_own_ms() -> float:
    """The candidate's own work for one evaluation (2 calls per trial), run in this process."""
    ns: dict = {}
    exec(CANDIDATE, ns)
    xs = [[mx.array(a) for a in TASK.make_inputs(w, s)] for w in TASK.workloads for s in TASK.seeds]
    t0 = time.perf_counter()
    for _ in range(10):
        for x in xs:
            mx.eval(ns["kernel"](*x))
            mx.eval(ns["kernel"](*x))
    return (time.perf_counter() - t0) * 1e3 / 10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    own = kernel_own_ms()
    cold = []
    for _ in range(3):
        t0 = time.perf_counter()
        with Evaluator(TASK, "mlx-cpu") as ev:
            r = ev.evaluate(CANDIDATE, timing=False)
            assert r.status == "passed", r.message
        cold.append((time.perf_counter() - t0) * 1e3)
    warm = []
    with Evaluator(TASK, "mlx-cpu") as ev:
        ev.evaluate(CANDIDATE, timing=False)  # starts the workers and computes the reference once
        for i in range(args.n):
            src = CANDIDATE + f"\n# variant {i}\n"  # a distinct module each time, as in a search
            t0 = time.perf_counter()
            r = ev.evaluate(src, timing=False)
            warm.append((time.perf_counter() - t0) * 1e3)
            assert r.status == "passed", r.message
    print(f"machine: {platform.machine()} {platform.processor() or ''} · mlx {mx.__version__} on {mx.default_device()}")
    print(f"task: {TASK.name}, {len(TASK.workloads)} workloads x {len(TASK.seeds)} seeds, candidate run before and after the reference")
    print(f"kernel's own work per evaluation: {own:.1f} ms")
    print(f"cold (fresh reference + candidate workers): median {statistics.median(cold):.0f} ms, overhead {statistics.median(cold) - own:.0f} ms")
    print(f"warm (worker reused), n={len(warm)}: median {statistics.median(warm):.1f} ms, p90 {np.percentile(warm, 90):.1f} ms, "
          f"overhead {statistics.median(warm) - own:.1f} ms  (target < 100 ms)")


if __name__ == "__main__":
    main()
