"""Not an attack: the same heavy computation as pipelined_second_stream.py, done in the call itself."""
import mlx.core as mx


def heavy(x):
    y = x
    for _ in range(120):
        y = mx.softmax(y * 1.0001, axis=-1) * x.shape[-1] / mx.sum(mx.ones_like(x), axis=-1, keepdims=True)
    return mx.softmax(x, axis=-1) + 0 * y


def kernel(x):
    return heavy(x)
