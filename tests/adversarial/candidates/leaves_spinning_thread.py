"""Attack (warm-worker sabotage): leave a hidden helper thread spinning after it has been evaluated (the
thread count patched so it is not seen), so that every later candidate in the same worker runs slower and
its worker is never idle. Caught by: every candidate gets a fresh worker."""
import threading

import mlx.core as mx

_count = threading.active_count
threading.active_count = lambda: _count() - 1
_calls = [0]


def _spin():
    n = 0
    while True:
        n += 1


def kernel(x):
    _calls[0] += 1
    if _calls[0] == 12:   # the last verification call: it leaves the thread once it has passed
        threading.Thread(target=_spin, daemon=True).start()
    return mx.softmax(x, axis=-1)
