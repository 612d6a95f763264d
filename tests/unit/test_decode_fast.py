"""decode.gqa_fused / paged_decode.gqa_fused on the CPU simulator: GQA groups over many splits with a partial last
tile (contiguous and paged, pages smaller than a tile), both dialects, both merges; the fused merge's counters
back at zero after a call and a second call right; two register sets (stages=2) over odd tile counts; and broken
code being caught (a wrong merge weight, a dropped split, an early merge, a counter not reset, a running sum not
rescaled, the second register set's tiles skipped)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from ksearch_engine import families
from ksearch_engine.evaluate import Evaluator
from ksearch_engine.task import Workload

# G = 4 query heads per KV head, 200 keys in tiles of 16: 13 splits, the last one 8 keys long
DEC_W = [Workload(name="b1_hq8_hkv2_s200_d64", dims={"Bt": 1, "Hq": 8, "Hkv": 2, "S": 200, "Dh": 64})]
# pages of 8 keys under tiles of 16, 72 keys per sequence (a partial last tile), two sequences
PAGED_W = [Workload(name="b2_hq8_hkv2_p8_blk9_d64",
                    dims={"Bt": 2, "Hq": 8, "Hkv": 2, "P": 8, "NBLK": 9, "NPAGES": 18, "Dh": 64})]
SMALL = dict(warps=2, block_keys=16, target_blocks=64)      # decode: 13 splits of one tile each
MULTI = dict(warps=2, block_keys=16, target_blocks=8)       # decode: 4 splits of 4 tiles (the last 1.5)
# two register sets over odd tile counts (decode: 3 splits of 5, 5, 2.5 tiles; paged: 2 splits of 3, 1.5)
STAGED = dict(warps=2, block_keys=16, target_blocks=6, stages=2)


def _ev(name, workloads):
    task = families.get(name).make_task()
    return Evaluator(task.model_copy(update={"seeds": task.seeds[:1], "workloads": workloads}), backend="sim")


def _render(name, kind, **knobs):
    t = families.get(name).template(f"{name}.gqa_fused")
    k = dict(t.defaults(), **knobs)
    assert t.valid(k)
    return t.render(k, kind)


def _check(ev, src, what):
    r = ev.evaluate(src, timing=False)
    assert r.status == "passed", f"{what}: {r.summary()}\n{r.log_tail}"


@pytest.mark.parametrize("name,workloads", [("decode", DEC_W), ("paged_decode", PAGED_W)])
def test_fused_many_splits_cuda_both_merges(name, workloads):
    with _ev(name, workloads) as ev:
        _check(ev, _render(name, "cuda", **SMALL, merge="fused"), "cuda fused")
        _check(ev, _render(name, "cuda", **MULTI, merge="fused"), "cuda fused, tiles per split")
        _check(ev, _render(name, "cuda", **MULTI, merge="kernel"), "cuda kernel merge")


@pytest.mark.parametrize("name,workloads", [("decode", DEC_W), ("paged_decode", PAGED_W)])
def test_fused_metal_and_two_register_sets(name, workloads):
    with _ev(name, workloads) as ev:
        _check(ev, _render(name, "metal", **SMALL, merge="fused"), "metal")
        _check(ev, _render(name, "metal", **MULTI, merge="kernel"), "metal, tiles per split")
        _check(ev, _render(name, "cuda", **STAGED), "cuda, two register sets")
        _check(ev, _render(name, "metal", **STAGED), "metal, two register sets")


def test_fused_other_thread_shapes_and_one_split():
    """4 warps x 32-key tiles (4 lanes per key), 8 warps x 64 keys (4 lanes), and one split (no merge at all)."""
    with _ev("decode", DEC_W) as ev:
        _check(ev, _render("decode", "cuda", warps=4, block_keys=32, target_blocks=16), "4x32")
        _check(ev, _render("decode", "cuda", warps=8, block_keys=64, target_blocks=8), "8x64")
        _check(ev, _render("decode", "metal", warps=4, block_keys=64, target_blocks=1), "one split")


@pytest.mark.parametrize("label,old,new", [
    ("stale register set", "if (j0 + TK < s1) {", "if (false) {"),
    ("merge weight", "const float c = exp2f(mm[g * SPLITS + s] - M);", "const float c = 1.0f;"),
    ("dropped split", "for (int s = 0; s < SPLITS; ++s) {\n        const float c",
     "for (int s = 0; s < SPLITS - 1; ++s) {\n        const float c"),
    ("early merge", "atomicAdd(sem + bh, 1) == SPLITS - 1", "atomicAdd(sem + bh, 1) == SPLITS - 2"),
    ("running sum", "m_run[g] = mn; lacc[g] *= cr;", "m_run[g] = mn;"),
])
def test_fused_merge_errors_are_caught(label, old, new):
    src = _render("decode", "cuda", **(STAGED if label == "stale register set" else MULTI))
    broken = src.replace(old, new)
    assert broken != src, label
    with _ev("decode", DEC_W) as ev:
        r = ev.evaluate(broken, timing=False)
    # failed, or (an early merge leaves a counter at 1, so later calls never merge) flagged as replaying output
    assert r.status in ("failed", "cheating"), f"{label}: {r.status}"


def _reference(q, k, v):
    B, Hq, _, Dh = q.shape
    Hkv = k.shape[1]
    qg = q.astype(np.float32).reshape(B, Hkv, Hq // Hkv, Dh) / np.sqrt(Dh)
    s = qg @ k.astype(np.float32).transpose(0, 1, 3, 2)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v.astype(np.float32)).reshape(B, Hq, 1, Dh)


@pytest.mark.parametrize("reset", [True, False])
def test_fused_counters_are_zero_again_and_a_second_call_is_right(reset):
    import mlx.core as mx
    from ksearch_engine.sim import install_mlx_shim, uninstall_mlx_shim

    src = _render("decode", "cuda", **SMALL)
    if not reset:
        src = src.replace("if (t == 0) sem[bh] = 0;", "")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 8, 1, 64)).astype(np.float16) * np.float16(2)
    k = rng.standard_normal((1, 2, 200, 64)).astype(np.float16)
    v = rng.standard_normal((1, 2, 200, 64)).astype(np.float16)
    ref = _reference(q, k, v)
    install_mlx_shim(check_races=False)
    try:
        ns: dict = {}
        exec(compile(src, "candidate", "exec"), ns)
        outs = []
        for _ in range(2):
            outs.append(np.array(ns["kernel"](mx.array(q), mx.array(k), mx.array(v)).astype(mx.float32)))
        sem = np.array(ns["_SEM"][2])
    finally:
        uninstall_mlx_shim()
    assert np.abs(outs[0] - ref).max() < 1e-2
    if reset:
        assert (sem == 0).all(), sem
        assert np.abs(outs[1] - ref).max() < 1e-2
    else:
        assert (sem == 26).all(), sem                    # 13 splits counted twice, never zeroed
        assert not np.abs(outs[1] - ref).max() < 1e-2    # the second call's merge never runs


# the knob sets bench/headline.py times first (DEC), at the bench shapes
BENCH_SETS = [dict(warps=4, block_keys=64, target_blocks=256, stages=1), dict(warps=4, block_keys=32, stages=2),
              dict(warps=8, block_keys=64, stages=2)]


def _cuda_unit(name, knobs, dims, fn):
    """The rendered kernels' bodies inside signatures written the way MLX's cuda_kernel writes them (inputs
    `const T*`, outputs `T*`, template arguments as constexpr ints and `using T`)."""
    src = _render(name, "cuda", **knobs)
    paged = name == "paged_decode"
    ins = [("Q", "__half"), ("K", "__half"), ("V", "__half")] + ([("table", "int32_t")] if paged else [])
    outs = [("out", "__half"), ("opart", "float"), ("mpart", "float"), ("lpart", "float")]
    text = ""
    for var, extra in (("_SOURCE", []), ("_SOURCE_FUSED", [("sem_inout", "int32_t")])):
        body = re.search(var + r' = r"""\n(.*?)\n"""', src, re.S).group(1)
        if not body.strip():
            continue
        params = [f"const {t}* {n}" for n, t in ins + extra] + [f"{t}* {n}" for n, t in outs]
        consts = "".join(f"  constexpr int {a} = {v};\n" for a, v in dims.items())
        text += (f"namespace mlx {{ namespace core {{ namespace cu {{\n__global__ void {fn}{var.lower()}("
                 f"{', '.join(params)}) {{\n  using T = __half;\n{consts}{body}\n}}\n}}}}}}\n")
    return text


@pytest.mark.parametrize("sets,spill", [(BENCH_SETS, False),
                                        ([dict(warps=4, block_keys=64, target_blocks=256, stages=2)], True)])
def test_fused_bench_sets_compile_for_sm90_without_spills(tmp_path, sets, spill):
    """nvcc (where installed) on the CUDA renders of the bench's knob sets at the bench shapes: a GPU compile error
    or register spills show here, before a GPU run (and a set known to spill is seen spilling)."""
    import shutil
    import subprocess

    if not shutil.which("nvcc"):
        pytest.skip("no nvcc")
    gqa = dict(HQ=32, HKV=8, DH=128, SEQ=4096, SPLITS=32, CHUNK=128)
    mha = dict(HQ=32, HKV=32, DH=128, SEQ=4096, SPLITS=16, CHUNK=256)
    unit = "#include <cuda_fp16.h>\n#include <cstdint>\n"
    for i, kn in enumerate(sets):
        unit += _cuda_unit("decode", kn, gqa, f"gqa{i}") + _cuda_unit("decode", kn, mha, f"mha{i}")
        unit += _cuda_unit("paged_decode", kn, dict(gqa, NBLK=256, PAGE=16), f"paged{i}")
    (tmp_path / "k.cu").write_text(unit)
    r = subprocess.run(["nvcc", "-arch=sm_90", "-c", "-o", str(tmp_path / "k.o"), "--ptxas-options=-v",
                        str(tmp_path / "k.cu")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    info = r.stdout + r.stderr
    assert info.count("Compiling entry function") == 2 * 3 * len(sets)
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", info)]
    assert len(spills) == 2 * 3 * len(sets)
    # the last case: two register sets of 64-key tiles over 4 warps need more than 255 registers at G = 4
    assert (max(spills) > 0) == spill, info[-3000:]
