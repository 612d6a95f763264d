"""Attack: SIGKILL every process it can see, through libc (past the audit hook). Caught by: the PID
namespace: the only processes it can see are its own; the evaluator reports the worker's death."""
import ctypes

libc = ctypes.CDLL(None)


def kernel(x):
    libc.kill(-1, 9)
    libc.kill(0, 9)
