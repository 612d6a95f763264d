"""What a kernel family offers the search: its task, and parameterized candidate templates.

A template renders a candidate module (see docs/CONTRACTS.md) from knob values, in one of three kinds:
`ops` (MLX operations), `metal` (mx.fast.metal_kernel) or `cuda` (mx.fast.cuda_kernel). The offline proposer
walks the spec's patterns for the family, picks the template that implements a pattern, and mutates its knobs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..task import KernelTask


@dataclass
class Template:
    id: str                                   # unique within the family, e.g. "softmax.simd_row"
    pattern: str                              # the specs/patterns id it implements, e.g. "warp_per_row"
    kinds: tuple[str, ...]                    # which candidate kinds it renders: "ops", "metal", "cuda"
    knobs: dict[str, list]                    # knob -> allowed values (first is the default)
    render: Callable[[dict, str], str]        # (knob values, kind) -> candidate module source
    description: str = ""
    difficulty: int = 2                       # 1..5
    predicted_speedup: float = 1.0            # rough prior vs the family's baseline
    valid: Callable[[dict], bool] = field(default=lambda k: True)  # rejects knob combinations that cannot work

    def defaults(self) -> dict:
        return {k: v[0] for k, v in self.knobs.items()}


@dataclass
class Family:
    name: str                                 # e.g. "softmax", "rmsnorm", "scan", "attention"
    make_task: Callable[..., KernelTask]      # make_task(**options) -> KernelTask (options: shapes preset, dtype)
    templates: list[Template]
    naive: Callable[[str], str] | None = None  # kind -> the naive starting candidate (e.g. a one-thread-per-row port)
    description: str = ""

    def template(self, tid: str) -> Template:
        for t in self.templates:
            if t.id == tid:
                return t
        raise KeyError(f"family {self.name} has no template {tid}")
