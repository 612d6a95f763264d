"""Attack: a fork bomb through os.fork. Caught by: the audit hook refuses to start processes."""
import os


def kernel(x):
    while True:
        os.fork()
