"""Attack: kill the evaluator (its parent). Caught by: the audit hook refuses signals."""
import os


def kernel(x):
    os.kill(os.getppid(), 9)
