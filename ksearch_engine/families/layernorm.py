"""LayerNorm over the last axis with weight and bias. Baseline `mx.fast.layer_norm`."""
from __future__ import annotations

from ._norms_common import row_task
from ._rows import EPS, naive_row, row_templates
from ._src import header
from .base import Family, Template

REFERENCE = f'''import mlx.core as mx

def reference(x, w, b):
    xf = x.astype(mx.float32)
    mu = mx.mean(xf, axis=-1, keepdims=True)
    var = mx.mean(mx.square(xf - mu), axis=-1, keepdims=True)
    return ((xf - mu) * mx.rsqrt(var + {EPS}) * w.astype(mx.float32) + b.astype(mx.float32)).astype(x.dtype)
'''
BASELINE = f'''import mlx.core as mx

def baseline(x, w, b):
    return mx.fast.layer_norm(x, w, b, {EPS})
'''


def make_task(dtype: str = "float16"):
    return row_task("layernorm", ["x", "w", "b"], REFERENCE, BASELINE, "mx.fast.layer_norm", dtype,
                    "LayerNorm over the last axis with weight and bias, eps 1e-5")


def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("layernorm.ops renders ops candidates only")
    up = "x.astype(mx.float32)" if k["upcast"] else "x"
    if k["formulation"] == "two_pass":
        stats = ("    mu = mx.mean(xf, axis=-1, keepdims=True)\n"
                 "    var = mx.mean(mx.square(xf - mu), axis=-1, keepdims=True)\n")
    else:  # moments: one pass over x for both sums (cancels when |mean| >> std)
        stats = ("    mu = mx.mean(xf, axis=-1, keepdims=True)\n"
                 "    var = mx.maximum(mx.mean(mx.square(xf), axis=-1, keepdims=True) - mu * mu, 0.0)\n")
    body = f"    xf = {up}\n" + stats + f"    return ((xf - mu) * mx.rsqrt(var + {EPS}) * w + b).astype(x.dtype)\n"
    src = header("layernorm", "layernorm.ops", k, kind) + "\n\ndef _layernorm(x, w, b):\n" + body
    src += "\n\nkernel = mx.compile(_layernorm)\n" if k["compile"] else "\n\nkernel = _layernorm\n"
    return src


OPS = Template(id="layernorm.ops", pattern="general.compile_fusion", kinds=("ops",),
               knobs={"formulation": ["two_pass", "moments"], "upcast": [True, False], "compile": [False, True]},
               render=_render_ops, description="MLX ops, fused by mx.compile", difficulty=1, predicted_speedup=1.0)

FAMILY = Family(name="layernorm", make_task=make_task,
                templates=[OPS, *row_templates("layernorm", "layernorm", 2.0)],
                naive=lambda kind: naive_row("layernorm", "layernorm", kind) if kind != "ops" else _render_ops({"formulation": "two_pass", "upcast": True, "compile": False}, "ops"),
                description="LayerNorm over the hidden axis")
