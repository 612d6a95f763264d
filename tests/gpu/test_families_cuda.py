"""On a machine with MLX's CUDA backend: every family's CUDA templates (defaults) and its best swept setting
pass the sandboxed evaluator on `mlx-cuda`, the real product path. Skipped where there is no NVIDIA GPU.

    pytest tests/gpu/test_families_cuda.py      # on the GPU machine
"""
from __future__ import annotations

import pytest

from ksearch_engine import backend as backends
from ksearch_engine import families
from ksearch_engine.evaluate import Evaluator

pytestmark = pytest.mark.skipif(backends.detect().name != "mlx-cuda", reason="needs MLX's CUDA backend (an NVIDIA GPU)")


@pytest.mark.parametrize("name", families.names())
def test_cuda_templates_pass_on_the_gpu(name):
    fam = families.get(name)
    task = fam.make_task()
    task = task.model_copy(update={"seeds": task.seeds[:1]})
    with Evaluator(task, backend="mlx-cuda") as ev:
        for t in fam.templates:
            if "cuda" not in t.kinds:
                continue
            r = ev.evaluate(t.render(t.defaults(), "cuda"), timing=False)
            assert r.status == "passed", f"{t.id}: {r.summary()}\n{r.log_tail}"
            assert r.verified_by == "mlx-cuda"
