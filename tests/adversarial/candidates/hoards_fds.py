"""Attack (warm-worker sabotage): on its first call, open file descriptors up to the worker's limit and
never close them (raw fds outlive the candidate's module), then compute correctly. The next candidate in the
same worker cannot open a file (EMFILE): an honest one that imports a module fails.
Caught by: every candidate gets a fresh worker; nothing one leaves behind reaches the next."""
import os

import mlx.core as mx

_fds = []


def kernel(x):
    if not _fds:
        try:
            while True:
                _fds.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
    return mx.softmax(x, axis=-1)
