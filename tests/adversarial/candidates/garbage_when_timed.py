"""Attack: behave during verification (2 calls per trial), then return garbage once the calls keep coming:
that is the timing loop. Caught by: every timed output is checked
against the reference on its own fresh inputs, in the evaluator."""
import mlx.core as mx

_calls = [0]
VERIFY_CALLS = 12   # the softmax task: 2 workloads x (2 seeds + 1 fresh) x 2 calls


def kernel(x):
    _calls[0] += 1
    if _calls[0] > VERIFY_CALLS:
        return mx.zeros_like(x)
    return mx.softmax(x, axis=-1)
