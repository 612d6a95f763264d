"""Attack (false speedup): once timed, return an object that looks like an array (shape, dtype, size,
__array__) and computes the answer only when it is read, after the clock stopped.
Caught by: outputs must be exactly mlx.core.array (checked for every timed call); without that check,
the time its worker spends handing the outputs back beyond the trusted worker's is charged to it."""
import mlx.core as mx
import numpy as np

_calls = [0]
VERIFY_CALLS = 12


class Lazy:
    def __init__(self, x):
        self.x, self.shape, self.dtype, self.size = x, x.shape, x.dtype, x.size

    def __array__(self, dtype=None, copy=None):
        a = np.array(self.x, dtype=np.float64)
        for _ in range(30):   # the work, done when read
            e = np.exp(a - a.max(axis=-1, keepdims=True))
            y = e / e.sum(axis=-1, keepdims=True)
        return y.astype(np.float32)


def kernel(x):
    _calls[0] += 1
    if _calls[0] <= VERIFY_CALLS:
        return mx.softmax(x, axis=-1)
    return Lazy(x)
