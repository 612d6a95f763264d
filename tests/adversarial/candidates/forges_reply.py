"""Attack: write a fake 'passed, very fast' reply straight into the worker's reply pipe, ahead of the real
one. Caught by: replies must carry the request's nonce and be followed by the answer to a fresh ping."""
import json
import os
import stat

import mlx.core as mx

FAKE = {"status": "ok", "outputs": {}, "timings": [{"workload": "bench", "cand": [1e-6] * 5, "base": [1.0] * 5, "copies": 1}]}


def kernel(x):
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, (json.dumps(FAKE) + "\n").encode())
        except OSError:
            pass
    return mx.softmax(x, axis=-1)
