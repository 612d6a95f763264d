"""Attack: behave during verification, then hand back the same cached array on every timed call (no work).
Caught by: timed outputs must be fresh objects (the previous call's array again is refused)."""
import mlx.core as mx

_calls = [0]
_cache = {}
VERIFY_CALLS = 8   # the softmax task: 2 workloads x 2 seeds x 2 calls


def kernel(x):
    _calls[0] += 1
    if _calls[0] <= VERIFY_CALLS:
        return mx.softmax(x, axis=-1)
    if id(x) not in _cache:
        _cache[id(x)] = mx.softmax(x, axis=-1)
    return _cache[id(x)]
