"""A toy row-softmax family for the search tests: its knobs really change speed on MLX's CPU backend.

The naive start loops in Python over rows (one small MLX op per row: launch-bound). `toy.chunked` processes
`rows` rows per MLX call: more rows per call, fewer calls, faster. `toy.fused` is one vectorized pass
(difficulty 4: above the default gate, so it waits until the easier nodes are spent). `toy.broken` renders code
that does not compile when `variant` is "typo" (to exercise failures and debug attempts).
"""
from __future__ import annotations

from ksearch_engine.families.base import Family, Template
from ksearch_engine.task import InputSpec, KernelTask, Workload

REFERENCE = "import mlx.core as mx\n\ndef reference(x):\n    return mx.softmax(x, axis=-1)\n"

NAIVE = '''import mlx.core as mx

def kernel(x):
    rows = []
    for r in range(x.shape[0]):
        e = mx.exp(x[r] - mx.max(x[r]))
        rows.append(e / mx.sum(e))
    return mx.stack(rows)
'''


def make_task(rows: int = 512, cols: int = 128) -> KernelTask:
    return KernelTask(
        name="toy-softmax", family="softmax", inputs=[InputSpec(name="x", shape=["R", "C"], init="normal")],
        outputs=["y"], reference=REFERENCE,
        workloads=[Workload(name="small", dims={"R": 8, "C": 33})],
        bench_workloads=[Workload(name="bench", dims={"R": rows, "C": cols})], seeds=[0, 1])


def _chunked(k: dict, kind: str) -> str:
    sub = "mx.max(xs, axis=-1, keepdims=True)" if k["subtract_max"] else "0.0"
    return f'''import mlx.core as mx

ROWS = {k["rows"]}

def kernel(x):
    parts = []
    for r0 in range(0, x.shape[0], ROWS):
        xs = x[r0:r0 + ROWS]
        e = mx.exp(xs - {sub})
        parts.append(e / mx.sum(e, axis=-1, keepdims=True))
    return mx.concatenate(parts, axis=0)
'''


def _fused(k: dict, kind: str) -> str:
    return "import mlx.core as mx\n\ndef kernel(x):\n    return mx.softmax(x, axis=-1, precise=%s)\n" % k["precise"]


def _broken(k: dict, kind: str) -> str:
    if k["variant"] == "typo":
        return "import mlx.core as mx\n\ndef kernel(x)\n    return mx.softmax(x, axis=-1)\n"
    return "import mlx.core as mx\n\ndef kernel(x):\n    return mx.softmax(x, axis=-1)\n"


CHUNKED = Template(id="toy.chunked", pattern="toy_rows_per_call", kinds=("ops",),
                   knobs={"rows": [2, 8, 32, 128, 512], "subtract_max": [True]}, render=_chunked,
                   description="vectorized softmax over blocks of rows", difficulty=1, predicted_speedup=4.0)
FUSED = Template(id="toy.fused", pattern="softmax.ops_lse", kinds=("ops",), knobs={"precise": [False, True]},
                 render=_fused, description="one fused mx.softmax call", difficulty=4, predicted_speedup=8.0)
BROKEN = Template(id="toy.broken", pattern="toy_broken", kinds=("ops",), knobs={"variant": ["typo", "ok"]},
                  render=_broken, description="a template whose default does not compile", difficulty=2,
                  predicted_speedup=0.5)


def family(with_broken: bool = False) -> Family:
    return Family(name="toy-softmax", make_task=make_task,
                  templates=[CHUNKED, FUSED] + ([BROKEN] if with_broken else []),
                  naive=lambda kind: NAIVE, description="toy row softmax")
