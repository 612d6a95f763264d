"""The issue-15 templates on the CPU simulator: tiled GQA decode (contiguous and paged, CUDA and Metal), the MoE
grouped GEMM and flash attention on tensor cores (CUDA: the simulator runs the exact warp-shuffle twins of
mma.sync / ldmatrix that _mma.py guards with KSIM_CUDA). Defaults are covered by test_families.py; here: other
knobs, the PTX being what the GPU gets, and broken fragment bookkeeping being caught."""
from __future__ import annotations

import pytest

from ksearch_engine import families
from ksearch_engine.evaluate import Evaluator


def _ev(name, **opts):
    task = families.get(name).make_task(**opts)
    return Evaluator(task.model_copy(update={"seeds": task.seeds[:1]}), backend="sim")


def _render(name, tid, kind="cuda", **knobs):
    t = families.get(name).template(tid)
    k = dict(t.defaults(), **knobs)
    assert t.valid(k)
    return t.render(k, kind)


def test_tensor_core_sources_carry_the_ptx_for_the_gpu_and_the_twin_for_the_simulator():
    for name, tid in (("moe", "moe.grouped_mma"), ("attention", "attention.flash_mma")):
        src = _render(name, tid)
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
        assert "#ifdef KSIM_CUDA" in src
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in _render("attention", "attention.flash_mma")


@pytest.mark.parametrize("name,tid", [("decode", "decode.gqa_tiles"), ("paged_decode", "paged_decode.gqa_tiles")])
def test_gqa_tiles_other_shapes_of_the_threadgroup(name, tid):
    """8 warps x 32-key tiles (8 lanes per key) and a single split (no combine kernel), in both dialects."""
    with _ev(name) as ev:
        for kind in ("cuda", "metal"):
            r = ev.evaluate(_render(name, tid, kind, warps=8, block_keys=32, target_blocks=1), timing=False)
            assert r.status == "passed", f"{kind}: {r.summary()}\n{r.log_tail}"
        r = ev.evaluate(_render(name, tid, "cuda", warps=2, block_keys=16, target_blocks=2048), timing=False)
        assert r.status == "passed", r.summary()


def test_gqa_tiles_split_merge_error_is_caught():
    src = _render("decode", "decode.gqa_tiles")
    broken = src.replace("c * opart[", "opart[")           # merge the splits without their weights
    assert broken != src
    with _ev("decode") as ev:
        assert ev.evaluate(broken, timing=False).status == "failed"


def test_moe_grouped_mma_small_tiles_and_a_wrong_fragment_is_caught():
    src = _render("moe", "moe.grouped_mma", block_m=64, block_n=64, block_k=16, warps_m=2, warps_n=2, group_m=1)
    swapped = src.replace("af[m][1] = ks_ld2(p + 8 * SK);", "af[m][1] = ks_ld2(p + 8);")  # rows g+8 read row g
    assert swapped != src
    with _ev("moe") as ev:
        r = ev.evaluate(src, timing=False)
        assert r.status == "passed", f"{r.summary()}\n{r.log_tail}"
        assert ev.evaluate(swapped, timing=False).status == "failed"


def test_flash_mma_causal_small_tiles_and_ignoring_the_mask_is_caught():
    src = _render("attention", "attention.flash_mma", warps=2, block_kv=16)
    ignoring = src.replace("causal[0] > 0.5f", "false")
    assert ignoring != src
    with _ev("attention", causal=True) as ev:
        r = ev.evaluate(src, timing=False)
        assert r.status == "passed", f"{r.summary()}\n{r.log_tail}"
        assert ev.evaluate(ignoring, timing=False).status == "failed"
