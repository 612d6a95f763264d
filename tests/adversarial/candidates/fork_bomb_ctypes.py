"""Attack: a fork bomb through libc (past the audit hook). Caught by: the pids cgroup (and, once the
worker is no longer root, RLIMIT_NPROC) stop it; the wall limit ends it; the cgroup kills every copy."""
import ctypes

libc = ctypes.CDLL(None)


def kernel(x):
    while True:
        libc.fork()
