"""RMSNorm over the last axis: y = x * rsqrt(mean(x^2) + eps) * w. Baseline `mx.fast.rms_norm`."""
from __future__ import annotations

from ._norms_common import row_task
from ._rows import EPS, naive_row, row_templates
from ._src import header
from .base import Family, Template

REFERENCE = f'''import mlx.core as mx

def reference(x, w):
    xf = x.astype(mx.float32)
    r = mx.rsqrt(mx.mean(xf * xf, axis=-1, keepdims=True) + {EPS})
    return (xf * r * w.astype(mx.float32)).astype(x.dtype)
'''
BASELINE = f'''import mlx.core as mx

def baseline(x, w):
    return mx.fast.rms_norm(x, w, {EPS})
'''


def make_task(dtype: str = "float16"):
    return row_task("rmsnorm", ["x", "w"], REFERENCE, BASELINE, "mx.fast.rms_norm", dtype,
                    "RMSNorm over the last axis with a weight vector, eps 1e-5")


def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("rmsnorm.ops renders ops candidates only")
    up = "x.astype(mx.float32)" if k["upcast"] else "x"
    body = (f"    xf = {up}\n"
            + ("    r = mx.rsqrt(mx.mean(mx.square(xf), axis=-1, keepdims=True) + %r)\n" % EPS
               if k["formulation"] == "mean_square" else
               "    r = mx.rsqrt((xf[..., None, :] @ xf[..., :, None])[..., 0] / xf.shape[-1] + %r)\n" % EPS)
            + "    return (xf * r * w).astype(x.dtype)\n")
    src = header("rmsnorm", "rmsnorm.ops", k, kind) + "\n\ndef _rmsnorm(x, w):\n" + body
    src += "\n\nkernel = mx.compile(_rmsnorm)\n" if k["compile"] else "\n\nkernel = _rmsnorm\n"
    return src


OPS = Template(id="rmsnorm.ops", pattern="general.compile_fusion", kinds=("ops",),
               knobs={"formulation": ["mean_square", "dot"], "upcast": [True, False], "compile": [False, True]},
               render=_render_ops, description="MLX ops, fused by mx.compile", difficulty=1, predicted_speedup=0.8)

FAMILY = Family(name="rmsnorm", make_task=make_task, templates=[OPS, *row_templates("rmsnorm", "rmsnorm", 1.1)],
                naive=lambda kind: naive_row("rmsnorm", "rmsnorm", kind) if kind != "ops" else _render_ops({"formulation": "mean_square", "upcast": True, "compile": False}, "ops"),
                description="RMSNorm (Llama-style) over the hidden axis")
