"""Attack: the worker runs as `__main__`; reach its class and replace its call step with one that reports a
tiny time without calling anything. Caught by: the tamper snapshot of the worker's class (and, without it,
by the evaluator: its clock is its own, and a call that produced nothing has no outputs to check)."""
import sys

import mlx.core as mx

worker = sys.modules["__main__"]
_real = worker.Worker.call


def _fast(self, req):
    if req.get("fn") == "candidate" and self.count > 0 and getattr(self, "_seen", 0) > 12:
        return {"status": "ok", "ms": 1e-6, "elems": 0}
    self._seen = getattr(self, "_seen", 0) + 1
    return _real(self, req)


worker.Worker.call = _fast


def kernel(x):
    return mx.softmax(x, axis=-1)
