"""Attack (false speedup): build, at import, the answers for the inputs it expects to be timed on (the
softmax task's timed shapes from the seed the timing loop used to use, 1234), and hand those back when
timed. Caught by: timed inputs come from a seed the evaluator draws from the OS after the candidate is
loaded, so the table's answers are wrong, and every timed output is checked."""
import mlx.core as mx
import numpy as np

_TABLE = {}
for shape in ((8, 64), (3, 33), (64, 256)):
    _x = (np.random.default_rng(1234).standard_normal(size=shape) * 3.0).astype(np.float32)  # normal, -3..3
    _TABLE[shape] = mx.softmax(mx.array(_x), axis=-1)
    mx.eval(_TABLE[shape])
_calls = [0]
VERIFY_CALLS = 12


def kernel(x):
    _calls[0] += 1
    if _calls[0] <= VERIFY_CALLS or tuple(x.shape) not in _TABLE:
        return mx.softmax(x, axis=-1)
    return mx.array(_TABLE[tuple(x.shape)])   # a fresh copy of the precomputed answer: no softmax done
