"""ssd.chunked_kernels and ssd.chunked_mma on the CPU simulator: the chunked SSD as three kernels (chunk end states, a carry over
chunks, intra-chunk scores + inter-chunk term), CUDA and Metal. The family's own small workloads are one chunk
at the default chunk of 64, so the tests use chunk 16 (three chunks at L = 37) and add a workload with the
bench's head and state sizes (P 64, N 128: the full register tiles) over three chunks of 64 with a ragged end.
Breaking the carried state, the decay mask or the causal mask must fail the check. ssd.chunked_mma (CUDA only: its
Metal twin is ssd.chunked_kernels) runs its GEMMs as mma.sync m16n8k8 tf32 with 3xTF32 operand splits; the
simulator runs the exact warp-shuffle twin of the instruction (_mma.py TF32_HEADER), so a wrong fragment shows."""
from __future__ import annotations

import pytest

from tests.bench_modules import load_bench
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


def _src(kind: str, tid: str = TID, **knobs) -> str:
    t = families.get("ssd").template(tid)
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


MMA = "ssd.chunked_mma"


def test_tensor_core_variant_passes_and_carries_the_ptx():
    src = _src("cuda", MMA)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in src and "cvt.rna.tf32.f32" in src
    assert "#ifdef KSIM_CUDA" in src
    with _ev() as ev:
        for knobs in (dict(chunk=16, warps=2, k_tile=8),):
            r = ev.evaluate(_src("cuda", MMA, **knobs), timing=False)
            assert r.status == "passed", f"{knobs}: {r.summary()}\n{r.log_tail}"
    with _ev(wide=True) as ev:
        r = ev.evaluate(_src("cuda", MMA, chunk=64), timing=False)
        assert r.status == "passed", f"{r.summary()}\n{r.log_tail}"


@pytest.mark.parametrize("what,old,new", [
    ("the A fragment rows g+8 zeroed", "ks_split(ah[1], al[1], ", "ks_split(ah[1], al[1], 0.0f * "),
    ("a staged A fragment's hi part zeroed", "ah[1] = Ah[", "ah[1] = 0u * Ah["),
    ("the small parts of the split dropped", "ks_mma1688(acc[f], al, bh); ks_mma1688(acc[f], ah, bl); ", ""),
])
def test_a_broken_tensor_core_path_is_caught(what, old, new):
    src = _src("cuda", MMA, chunk=16)
    broken = src.replace(old, new)
    assert broken != src, what
    with _ev() as ev:
        r = ev.evaluate(broken, timing=False)
    assert r.status == "failed", f"{what}: {r.summary()}"


def test_knobs_change_the_code_and_the_sweep_entries_are_valid():
    t = families.get("ssd").template(TID)
    base = t.render(t.defaults(), "cuda")
    for knob, values in t.knobs.items():
        assert all(t.render(dict(t.defaults(), **{knob: v}), "cuda") != base for v in values[1:]), knob
    mod = load_bench("families", "ssd")
    mine = [(name, k) for name, k in mod.SWEEPS["ssd"] if name.startswith("chunked_")]
    assert mine and mod.SWEEPS["ssd"][0][0] == "chunked_kernels"       # the H100 best (headline_h100_dec5b) first
    assert all(families.get("ssd").template(f"ssd.{name}").valid(dict(t.defaults(), **k)) for name, k in mine)
    assert not t.valid(dict(t.defaults(), chunk=16, k_tile=32))
