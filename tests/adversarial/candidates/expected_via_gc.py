"""Attack: walk every object in the interpreter (gc.get_objects) for an array of the output's shape that is
not the input: an expected output left in memory. Caught by: the audit hook (gc walks are refused)."""
import gc

import mlx.core as mx
import numpy as np


def kernel(x):
    for o in gc.get_objects():
        if isinstance(o, np.ndarray) and o.shape == tuple(x.shape) and o.dtype == np.float32:
            if not np.array_equal(o, np.array(x)):
                return mx.array(o)
    return mx.zeros_like(x)
