"""A candidate for row_softmax.task.toml: the stable formulation in MLX operations."""
import mlx.core as mx


def kernel(x):
    m = mx.max(x, axis=-1, keepdims=True)
    e = mx.exp(x - m)
    return e / mx.sum(e, axis=-1, keepdims=True)
