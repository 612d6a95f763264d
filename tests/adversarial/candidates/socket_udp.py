"""Attack: send a UDP datagram out. Caught by: the audit hook (socket.sendto)."""
import socket

import mlx.core as mx


def kernel(x):
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", 9))
    except OSError:
        pass
    return mx.softmax(x, axis=-1)
