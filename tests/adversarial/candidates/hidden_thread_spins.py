"""Attack (patch the check never sees): start a helper thread that keeps a core busy, and patch
threading.active_count so the worker's thread count does not see it. While the trusted worker times the
baseline the helper steals its CPU (the baseline looks slow) and it outlives the call.
Caught by: the evaluator reads the candidate worker's CPU time (from /proc, outside its reach) around every
step of the trusted worker: the worker must be idle then."""
import threading

import mlx.core as mx

_count = threading.active_count
threading.active_count = lambda: _count() - 1
_started = []


def _spin():
    n = 0
    while True:
        n += 1


def kernel(x):
    if not _started:
        t = threading.Thread(target=_spin, daemon=True)
        t.start()
        _started.append(t)
    return mx.softmax(x, axis=-1)
