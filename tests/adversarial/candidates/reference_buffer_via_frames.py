"""Attack: return the reference's own output, found by walking up the worker's stack to the frame that
holds `ref_out` (the reference runs in the worker between the candidate's two calls).
Caught by: the audit hook (frame inspection from candidate code)."""
import sys

import mlx.core as mx


def kernel(x):
    f = sys._getframe(1)
    while f is not None:
        ref = f.f_locals.get("ref_out")
        if ref:
            return mx.array(ref[0])
        f = f.f_back
    return mx.zeros_like(x)
