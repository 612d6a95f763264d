"""Row softmax over the last axis. Baseline: `mx.softmax`; templates: MLX ops, simd-per-row and group-per-row
kernels (Metal and CUDA) with register-resident or online variants."""
from __future__ import annotations

from ._norms_common import row_task
from ._rows import naive_row, row_templates
from ._src import header
from .base import Family, Template

REFERENCE = '''import mlx.core as mx

def reference(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
'''
BASELINE = '''import mlx.core as mx

def baseline(x):
    return mx.softmax(x, axis=-1)
'''


def make_task(dtype: str = "float16"):
    return row_task("softmax", ["x"], REFERENCE, BASELINE, "mx.softmax", dtype,
                    "softmax over the last axis of a (rows, cols) array")


def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("softmax.ops renders ops candidates only")
    up = "x.astype(mx.float32)" if k["upcast"] else "x"
    if k["formulation"] == "lse":
        body = f"    xf = {up}\n    y = mx.exp(xf - mx.logsumexp(xf, axis=-1, keepdims=True))\n"
    else:
        body = (f"    xf = {up}\n    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))\n"
                "    y = e * mx.reciprocal(mx.sum(e, axis=-1, keepdims=True))\n")
    src = header("softmax", "softmax.ops", k, kind) + "\n\ndef _softmax(x):\n" + body + "    return y.astype(x.dtype)\n"
    src += "\n\nkernel = mx.compile(_softmax)\n" if k["compile"] else "\n\nkernel = _softmax\n"
    return src


OPS = Template(id="softmax.ops", pattern="softmax.ops_lse", kinds=("ops",),
               knobs={"formulation": ["max_sub", "lse"], "upcast": [True, False], "compile": [False, True]},
               render=_render_ops, description="MLX ops, fused by mx.compile", difficulty=1, predicted_speedup=1.0)

FAMILY = Family(name="softmax", make_task=make_task, templates=[OPS, *row_templates("softmax", "softmax", 1.6)],
                naive=lambda kind: naive_row("softmax", "softmax", kind) if kind != "ops" else _render_ops({"formulation": "max_sub", "upcast": True, "compile": False}, "ops"),
                description="row softmax (attention scores, logits)")
