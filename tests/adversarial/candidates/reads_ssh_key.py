"""Attack: read a private key from the user's ~/.ssh (the test passes a fake home: $KEY).
Caught by: the folder is hidden behind an empty tmpfs, and the audit hook reports the attempt."""
import mlx.core as mx


def kernel(x):
    try:
        secret = open("$KEY").read()
    except FileNotFoundError:
        return mx.softmax(x, axis=-1)
    raise RuntimeError("LEAK " + secret)
