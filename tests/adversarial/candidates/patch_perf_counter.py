"""Attack: replace the timer so every call looks instantaneous. Caught by: the tamper snapshot (and the
worker took its timer before any candidate ran, so the patch changes nothing measured)."""
import time

import mlx.core as mx

time.perf_counter = lambda: 0.0


def kernel(x):
    return mx.softmax(x, axis=-1)
