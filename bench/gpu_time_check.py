"""On an NVIDIA GPU: is the CUPTI GPU time right? mx.softmax at the softmax family's bench shape, timed by
GpuTimer.time, by CUDA-event-free wall time over many calls, and one call's kernels listed by name."""
import time

import mlx.core as mx

from ksearch_engine.families import get
from ksearch_engine.gputime import GpuTimer, _session

task = get("softmax").make_task()
wl = task.timing_workloads()[0]
print("task inputs:", [(i.name, i.shape, i.dtype) for i in task.inputs], "bench:", wl)
for dt in (mx.float32, mx.float16):
    xs = [mx.random.normal((16384, 2048)).astype(dt) for _ in range(4)]
    mx.eval(xs)
    mx.synchronize()
    t = GpuTimer()
    print(dt, "GpuTimer.time:", t.time(lambda a: mx.softmax(a, axis=-1), repeats=20, rotate_inputs=[(a,) for a in xs]))
    s = _session()
    s.begin()
    y = mx.softmax(xs[0], axis=-1)
    mx.eval(y)
    mx.synchronize()
    s.c.activity_flush_all(1)
    print("  one call's kernels:", [(n[:60], (e - b) / 1e3) for b, e, n in s.records][:10])
    s.records.clear()
    for _ in range(3):
        mx.eval(mx.softmax(xs[1], axis=-1))
    mx.synchronize()
    t0 = time.perf_counter()
    for i in range(50):
        mx.eval(mx.softmax(xs[i % 4], axis=-1))
        mx.synchronize()
    print("  wall per call (eval+sync):", (time.perf_counter() - t0) / 50 * 1e3, "ms")
