"""Attack: leave a thread running in the worker (to burn CPU during later baselines, or answer its pings).
Caught by: the worker counts threads before and after the candidate."""
import threading
import time

import mlx.core as mx


def _spin():
    while True:
        time.sleep(0.01)


def kernel(x):
    threading.Thread(target=_spin, daemon=True).start()
    return mx.softmax(x, axis=-1)
