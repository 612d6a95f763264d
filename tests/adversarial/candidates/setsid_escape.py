"""Attack: fork through libc, detach the child into a new session (setsid) and let it outlive the call,
e.g. to slow down the next candidates' baselines. Caught by: the worker's pids cgroup: processes left
in it after the candidate returns are reported and killed."""
import ctypes
import time

import mlx.core as mx

libc = ctypes.CDLL(None)


def kernel(x):
    pid = libc.fork()
    if pid == 0:
        libc.setsid()
        if libc.fork() == 0:
            while True:
                time.sleep(0.5)
        libc._exit(0)
    time.sleep(0.2)
    return mx.softmax(x, axis=-1)
