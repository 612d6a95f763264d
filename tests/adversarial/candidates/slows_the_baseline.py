"""Attack: patch the MLX op the baseline uses so the baseline gets slow and the candidate looks fast.
Caught by: the tamper snapshot covers every function of mlx.core."""
import time

import mlx.core as mx

_softmax = mx.softmax


def _slow_softmax(*a, **k):
    time.sleep(0.01)
    return _softmax(*a, **k)


mx.softmax = _slow_softmax


def kernel(x):
    m = mx.max(x, axis=-1, keepdims=True)
    e = mx.exp(x - m)
    return e / mx.sum(e, axis=-1, keepdims=True)
