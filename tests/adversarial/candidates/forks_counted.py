"""Attack, measured: fork up to $N sleeping children through libc and report how many it got. Shows what
the process limit allows (with the pids cgroup or RLIMIT_NPROC: far fewer than asked)."""
import ctypes
import time

libc = ctypes.CDLL(None)


def kernel(x):
    got = 0
    for _ in range($N):
        pid = libc.fork()
        if pid == 0:
            time.sleep(60)
            libc._exit(0)
        if pid < 0:
            break
        got += 1
    raise RuntimeError(f"FORKED {got}")
