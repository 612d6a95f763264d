"""Where a GPU evaluation's seconds go, step by step, outside the evaluator (issue 14's 3 s per evaluation):
first call of a CUDA template at each workload (NVRTC compile per template instantiation), input generation
on the device (cold and warm MLX PTX cache), CUPTI's begin/end per call, and the output comparison.

    MLX_PTX_CACHE_DIR=/tmp/ptxA python bench/eval_probe.py [family]      (on the GPU machine)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from ksearch_engine.evaluate.compare import compare  # noqa: E402
from ksearch_engine import families  # noqa: E402
from ksearch_engine.resolve import resolve  # noqa: E402


def t(label, fn):
    t0 = time.perf_counter()
    out = fn()
    print(f"{label}: {(time.perf_counter() - t0) * 1e3:.1f} ms", flush=True)
    return out


def main(fam_name: str = "softmax") -> None:
    task = resolve(fam_name).task
    fam = families.get(fam_name)
    tpl = next(x for x in fam.templates if "cuda" in x.kinds)
    ns: dict = {}
    exec(tpl.render(tpl.defaults(), "cuda"), ns)
    kern = ns[task.entry]
    wls = list(task.workloads) + list(task.timing_workloads())
    for wl in wls:
        xs = t(f"inputs {wl.name} (make_inputs_mx, 1st)", lambda: (lambda a: (mx.eval(*a), a)[1])(task.make_inputs_mx(mx, wl, 1)))
        t(f"inputs {wl.name} (make_inputs_mx, 2nd)", lambda: mx.eval(*task.make_inputs_mx(mx, wl, 2)))
        for i in (1, 2, 3):
            t(f"call {i} {tpl.id} @ {wl.name}", lambda: (mx.eval(kern(*xs)), mx.synchronize()))
    try:
        from ksearch_engine.gputime import GpuTimer
        g = GpuTimer()
        g.subscribe()
        wl = wls[-1]
        xs = task.make_inputs_mx(mx, wl, 3)
        mx.eval(*xs)
        for i in range(3):
            t(f"cupti call_ms {i}", lambda: g.call_ms(lambda: (mx.eval(kern(*xs)), mx.synchronize())))
    except Exception as e:  # noqa: BLE001
        print("cupti:", type(e).__name__, e)
    a = np.random.default_rng(0).standard_normal(33554432).astype(np.float16)
    b = a + np.float16(1e-3)
    t("compare 33M fp16", lambda: compare(a, b, 1e-2, 1e-2))


if __name__ == "__main__":
    main(*sys.argv[1:])
