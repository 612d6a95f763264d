"""Attack: read the API key from its own environment (inherited from the evaluator). Caught by: the
sandbox scrubs every variable that looks like a key, token, secret or password."""
import os

import mlx.core as mx


def kernel(x):
    leaked = {k: v for k, v in os.environ.items() if "$KEY" in v}
    if leaked:
        raise RuntimeError(f"LEAK {leaked}")
    return mx.softmax(x, axis=-1)
