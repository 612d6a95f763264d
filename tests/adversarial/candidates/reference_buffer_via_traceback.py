"""Attack: reach the worker's frames through an exception's traceback (tb_frame.f_back...), then copy the
reference's output. Caught by: the audit hook (tb_frame read from candidate code)."""
import mlx.core as mx


def kernel(x):
    try:
        raise RuntimeError
    except RuntimeError as e:
        f = e.__traceback__.tb_frame
    while f is not None:
        ref = f.f_locals.get("ref_out")
        if ref:
            return mx.array(ref[0])
        f = f.f_back
    return mx.zeros_like(x)
