"""Kernel families the offline search knows: each module exposes `FAMILY: Family` (see base.py).

`get(name)` returns one family, `names()` lists them. Modules are imported lazily so that a broken family
cannot stop the others from loading; the error names the module to fix.
"""
from __future__ import annotations

import importlib
import importlib.util

from .base import Family, Template

_MODULES = {
    "softmax": "softmax", "rmsnorm": "rmsnorm", "layernorm": "layernorm",
    "attention": "attention", "decode": "decode", "paged_decode": "paged_decode",
    "scan": "scan", "ssd": "ssd", "moe_gating": "moe_gating", "moe": "moe",
}


def names() -> list[str]:
    """Family names whose module is present."""
    out = []
    for name, mod in _MODULES.items():
        if importlib.util.find_spec(f"{__name__}.{mod.split(':')[0]}") is not None:
            out.append(name)
    return out


def get(name: str) -> Family:
    if name not in _MODULES:
        raise KeyError(f"unknown kernel family '{name}': known families are {', '.join(names())}")
    modname, _, attr = _MODULES[name].partition(":")
    try:
        mod = importlib.import_module(f"{__name__}.{modname}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{modname}":
            raise KeyError(f"kernel family '{name}' is not built yet (no module ksearch_engine/families/{modname}.py)") from None
        raise
    return getattr(mod, attr or "FAMILY")


__all__ = ["Family", "Template", "get", "names"]
