"""Attack: behave during verification, then hand back a cached array on every timed call (no work), two
copies alternately so no call returns the previous call's object.
Caught by: timed inputs are fresh every call, so the cached answer is wrong, and the evaluator sees the same
bytes it was given before for other inputs (checked against every earlier output, not just the last)."""
import mlx.core as mx

_calls = [0]
_cache = []
VERIFY_CALLS = 12   # the softmax task: 2 workloads x (2 seeds + 1 fresh) x 2 calls


def kernel(x):
    _calls[0] += 1
    if _calls[0] <= VERIFY_CALLS or len(_cache) < 2:
        y = mx.softmax(x, axis=-1)
        if _calls[0] > VERIFY_CALLS:
            _cache.append(y)
        return y
    return _cache[_calls[0] % 2]
