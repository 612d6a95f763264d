"""Attack: rebind the worker module's own functions (no class attribute touched): make its JSON reply
helper drop error replies. Caught by: the tamper snapshot of the worker's functions."""
import sys

import mlx.core as mx

worker = sys.modules["__main__"]
_real = worker._reply
worker._reply = lambda obj: _real(obj)


def kernel(x):
    return mx.softmax(x, axis=-1)
