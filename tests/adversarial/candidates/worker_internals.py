"""Attack: the worker runs as `__main__`; reach its globals and replace its timing method with one that
reports a tiny time. Caught by: the tamper snapshot of the worker's class and functions."""
import sys

import mlx.core as mx


def _fast(self, fn, ref_fn, req):
    return [{"workload": "bench", "cand": [1e-6] * 5, "base": [1.0] * 5, "copies": 1, "rechecked": 0}]


worker = sys.modules["__main__"]
worker.Worker.time = _fast


def kernel(x):
    return mx.softmax(x, axis=-1)
