"""Attack: switch the worker's guards off from inside (its test-only switch is a module global), clear
what it knows about streams, then return garbage once timed. Caught by: the worker read its switches
once at start (rebinding the global changes nothing) and its tamper snapshot covers its globals."""
import sys

import mlx.core as mx

worker = sys.modules["__main__"]
worker._GUARDS_OFF = frozenset({"audit", "tamper", "recheck", "streams"})
_calls = [0]


def kernel(x):
    _calls[0] += 1
    if _calls[0] > 8:
        return mx.zeros_like(x)
    return mx.softmax(x, axis=-1)
