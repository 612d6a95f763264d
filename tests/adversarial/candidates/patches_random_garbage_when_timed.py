"""Attack (patch the check never sees): make Python's `random` pick call 0 whatever it is asked (the worker
used to draw which timed outputs to re-check with it), answer that first timed call right and return garbage
on every later one. Caught by: which timed outputs are checked is drawn by the evaluator, in its own process,
after the calls (all of them for small outputs, a sample for large ones)."""
import random

import mlx.core as mx

random.SystemRandom.randrange = lambda self, *a, **k: 0
random.SystemRandom.sample = lambda self, population, k, **kw: list(population)[:k]
random.randrange = lambda *a, **k: 0
_calls = [0]
VERIFY_CALLS = $VERIFY_CALLS


def kernel(x):
    _calls[0] += 1
    if _calls[0] <= VERIFY_CALLS + 1:
        return mx.softmax(x, axis=-1)
    return mx.zeros_like(x)
