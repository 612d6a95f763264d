"""Attack: skip work on a second stream. Each call returns a result started (mx.async_eval) on a private
stream during the previous call, and starts the next one, so the work runs while the baseline is timed:
the candidate looks fast and the baseline slow. Caught by: the timer waits for every stream a candidate
made (before and after each timed call), so the work counts as the candidate's own."""
import mlx.core as mx

_side = mx.new_stream(mx.default_device())
_next = {}


def heavy(x):
    y = x
    for _ in range(120):
        y = mx.softmax(y * 1.0001, axis=-1) * x.shape[-1] / mx.sum(mx.ones_like(x), axis=-1, keepdims=True)
    return mx.softmax(x, axis=-1) + 0 * y


def kernel(x):
    y = _next.pop(id(x), None)
    if y is None:
        y = heavy(x)
    with mx.stream(_side):
        nxt = heavy(x)
    mx.async_eval(nxt)
    _next[id(x)] = nxt
    return y
