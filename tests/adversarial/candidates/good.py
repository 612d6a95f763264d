"""A correct candidate: every attack test runs it afterwards to show the evaluator carries on."""
import mlx.core as mx


def kernel(x):
    m = mx.max(x, axis=-1, keepdims=True)
    e = mx.exp(x - m)
    return e / mx.sum(e, axis=-1, keepdims=True)
