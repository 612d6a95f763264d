"""Attack: write into the input through a numpy view of its memory (no MLX op records it), e.g. to pass
scratch results to the second call. Caught by: inputs are compared with their originals after each call."""
import mlx.core as mx
import numpy as np


def kernel(x):
    y = mx.softmax(x, axis=-1)
    mx.eval(y)
    view = np.array(x, copy=False)
    view[...] = 0.0
    return y
