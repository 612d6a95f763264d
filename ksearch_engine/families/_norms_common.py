"""Task builder shared by the row-wise families (softmax, rmsnorm, layernorm)."""
from __future__ import annotations

from ..task import InputSpec, KernelTask, Workload

SMALL = [Workload(name="small_8x128", dims={"R": 8, "C": 128}),
         Workload(name="tail_5x100", dims={"R": 5, "C": 100}),
         Workload(name="long_3x1000", dims={"R": 3, "C": 1000})]
BENCH = [Workload(name="tokens4096_hidden4096", dims={"R": 4096, "C": 4096}),
         Workload(name="tokens16384_hidden2048", dims={"R": 16384, "C": 2048})]


def row_task(name: str, names: list[str], reference: str, baseline: str, baseline_name: str, dtype: str,
             description: str, bench: list[Workload] | None = None) -> KernelTask:
    inputs = [InputSpec(name="x", shape=["R", "C"], dtype=dtype, init="normal", low=-2.0, high=2.0)]
    if "w" in names:
        inputs.append(InputSpec(name="w", shape=["C"], dtype=dtype, init="uniform", low=0.5, high=1.5))
    if "b" in names:
        inputs.append(InputSpec(name="b", shape=["C"], dtype=dtype, init="uniform", low=-0.5, high=0.5))
    return KernelTask(name=name, family=name, description=description, inputs=inputs, outputs=["y"],
                      reference=reference, baseline=baseline, baseline_name=baseline_name,
                      workloads=SMALL, bench_workloads=bench or BENCH, seeds=[0, 1])
