"""Attack: sleep until killed (hold the evaluator hostage). Caught by: the wall-clock limit; the worker and
everything it started are killed."""
import time


def kernel(x):
    time.sleep(10 ** 6)
