"""Attack (false speedup / wrong answer): patch mx.eval once, to keep every array evaluated in the worker,
and return the last one that is neither its input nor its own output: where the reference runs in the same
process, that is the reference's answer on the same input. Then it puts mx.eval back (one-shot).
Caught by: the reference never runs in the candidate's process, so there is nothing to steal (its answer
is then zeros, and fails); the tamper snapshot names the patch where it is still in place."""
import mlx.core as mx

_real_eval = mx.eval
SEEN = []


def _spy(*arrays, **kw):
    SEEN.extend(a for a in arrays if isinstance(a, mx.array))
    return _real_eval(*arrays, **kw)


mx.eval = _spy
_mine = []


def kernel(x):
    for a in reversed(SEEN):
        if a is not x and a.shape == x.shape and not any(a is m for m in _mine):
            out = a * 1
            _mine.append(out)
            return out
    out = mx.zeros_like(x)
    _mine.append(out)
    return out
