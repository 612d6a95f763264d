"""Not an attack: an honest candidate that imports a standard-library module when it is loaded."""
import colorsys  # noqa: F401 - any import opens files

import mlx.core as mx


def kernel(x):
    return mx.softmax(x, axis=-1)
