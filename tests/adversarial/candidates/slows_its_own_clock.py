"""Attack (patch the check never sees, in spirit): replace the worker's own timer with one that runs 100x
slow, so every call the worker times looks 100x faster. Caught by: the time that counts is read by the
evaluator's clock in its own process around each request; the tamper snapshot also names the patch."""
import sys

import mlx.core as mx

worker = sys.modules["__main__"]
_real = worker._perf
worker._perf = lambda: _real() * 0.01


def kernel(x):
    return mx.softmax(x, axis=-1)
