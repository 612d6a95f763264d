"""ssd.chunked_kernels on the CPU simulator: the chunked SSD as three kernels (chunk end states, a carry over
chunks, intra-chunk scores + inter-chunk term), CUDA and Metal. The family's own small workloads are one chunk
at the default chunk of 64, so the tests use chunk 16 (three chunks at L = 37) and add a workload with the
bench's head and state sizes (P 64, N 128: the full register tiles) over three chunks of 64 with a ragged end.
Breaking the carried state, the decay mask or the causal mask must fail the check."""
from __future__ import annotations

import pytest

from ksearch_engine import families
from ksearch_engine.evaluate import Evaluator
from ksearch_engine.task import Workload

TID = "ssd.chunked_kernels"
WIDE = Workload(name="b1_l150_h2_p64_g1_n128", dims={"Bt": 1, "L": 150, "H": 2, "P": 64, "G": 1, "N": 128})


def _ev(wide: bool = False):
    task = families.get("ssd").make_task()
    upd = {"seeds": task.seeds[:1]}
    if wide:
        upd["workloads"] = [WIDE]
    return Evaluator(task.model_copy(update=upd), backend="sim")


def _src(kind: str, **knobs) -> str:
    t = families.get("ssd").template(TID)
    k = dict(t.defaults(), **knobs)
    assert t.valid(k)
    return t.render(k, kind)


@pytest.mark.parametrize("kind", ["cuda", "metal"])
def test_three_chunks_and_the_bench_tile_shapes_pass(kind):
    with _ev() as ev:
        for knobs in (dict(chunk=16), dict(chunk=16, warps=2, k_tile=8), dict(chunk=32, warps=4)):
            r = ev.evaluate(_src(kind, **knobs), timing=False)
            assert r.status == "passed", f"{knobs}: {r.summary()}\n{r.log_tail}"
    with _ev(wide=True) as ev:
        r = ev.evaluate(_src(kind, chunk=64), timing=False)
        assert r.status == "passed", f"{r.summary()}\n{r.log_tail}"


BREAKS = {
    # the carry kernel hands every chunk a zero incoming state
    "carried state": ("hin[(((size_t)b * NC + c) * NH + hh) * PER + r] = h;",
                      "hin[(((size_t)b * NC + c) * NH + hh) * PER + r] = 0.0f;"),
    # the carry forgets the decay over the chunk it crosses
    "chunk decay": ("h = dv[u] * h + sv[u];", "h = h + sv[u];"),
    # intra-chunk scores without the decay between the steps
    "decay mask": ("CBT[qbase + s * TCH + t] * expf(ac[t] - ac[s])", "CBT[qbase + s * TCH + t]"),
    # intra-chunk scores without the causal mask
    "causal mask": ("(t < TCH && s <= t) ?", "(t < TCH) ?"),
    # the chunk end state without the decay from each step to the chunk end
    "end-state decay": ("w[i] = expf(aend - ac[i]) * dts[i];", "w[i] = dts[i];"),
}


@pytest.mark.parametrize("what", list(BREAKS))
def test_a_broken_chunked_kernel_is_caught(what):
    src = _src("cuda", chunk=16)
    old, new = BREAKS[what]
    broken = src.replace(old, new)
    assert broken != src, f"{what}: the text to break is not in the source"
    with _ev() as ev:
        r = ev.evaluate(broken, timing=False)
    assert r.status == "failed" and r.worst is not None, f"{what}: {r.summary()}"


def test_knobs_change_the_code_and_the_sweep_entries_are_valid():
    import importlib.util
    import sys
    from pathlib import Path

    t = families.get("ssd").template(TID)
    base = t.render(t.defaults(), "cuda")
    for knob, values in t.knobs.items():
        assert all(t.render(dict(t.defaults(), **{knob: v}), "cuda") != base for v in values[1:]), knob
    spec = importlib.util.spec_from_file_location("bench_families_ssd", Path(__file__).resolve().parents[2] / "bench" / "families.py")
    sys.path.insert(0, str(Path(spec.origin).parent))
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(Path(spec.origin).parent))
    mine = [k for name, k in mod.SWEEPS["ssd"] if name == "chunked_kernels"]
    assert mine and mod.SWEEPS["ssd"][0][0] == "chunked_kernels"       # expected best first
    assert all(t.valid(dict(t.defaults(), **k)) for k in mine)
    assert not t.valid(dict(t.defaults(), chunk=16, k_tile=32))
