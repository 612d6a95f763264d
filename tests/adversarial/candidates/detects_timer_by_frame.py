"""Attack: look at the caller's code name to learn whether this call is being timed.
Caught by: the audit hook (sys._getframe from candidate code)."""
import sys

import mlx.core as mx


def kernel(x):
    if sys._getframe(1).f_code.co_name == "once":
        return mx.zeros_like(x)
    return mx.softmax(x, axis=-1)
