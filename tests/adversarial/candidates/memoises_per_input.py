"""Attack (false speedup): memoise per input. Each answer is stored under a cheap fingerprint of its input
(one element); a known input gets a stored copy back (two copies, alternately, so no call returns the
previous call's object), an unknown one after verification gets the last answer it has.
Caught by: every call gets fresh inputs drawn from the OS after the candidate loaded, so nothing repeats,
and every timed output is checked against the reference (and against all of its earlier outputs)."""
import mlx.core as mx

_memo = {}
_timed = {}
_calls = [0]
VERIFY_CALLS = 12   # the softmax task: 2 workloads x (2 seeds + 1 fresh) x 2 calls


def kernel(x):
    _calls[0] += 1
    key = (x.shape, float(x[0, 0].item()))
    if key in _memo:
        pair = _memo[key]
        return pair[_calls[0] % 2]
    if _calls[0] > VERIFY_CALLS and x.shape in _timed:
        return _timed[x.shape]   # timed inputs used to repeat: assume this is the one it has seen
    y = mx.softmax(x, axis=-1)
    _memo[key] = (y, mx.array(y))
    if _calls[0] > VERIFY_CALLS:
        _timed[x.shape] = mx.array(y)
    return y
