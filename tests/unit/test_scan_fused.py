"""scan.chunked_fused (_scan_fused.py) on the CPU simulator: the one-kernel chunked Mamba-1 scan, CUDA and Metal.

The family's small workloads (B2 L37 D8 N16, B1 L64 D12 N8) run at knob sets that give several sequence chunks
per channel with a ragged last chunk (L 37 is no multiple of the chunk length), several threadgroups (D 12 over
8 channels a group, two batch rows), a group with dead channels, one chunk per warp (32 channels) and four (8),
pass 1 backwards (warm_l2) and forwards, and the accurate exp. Dropping the state carried across chunks, or its decay, must fail the check. The
stateful variant (bench/mamba_prefill.py) starts from h0 and returns the final state. Invalid knob sets are
refused with a reason. nvcc (where installed) compiles the bench sweep's knob sets at the bench shape: no
spills, and registers x threads within what one threadgroup may use (else the launch fails on the GPU).
Kept small: each simulator evaluation is ~2.5-3.5 s; the file takes ~25 s here with a cold simulator cache."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from tests.bench_modules import load_bench
from ksearch_engine import families
from ksearch_engine.evaluate import Evaluator
from ksearch_engine.families._scan_fused import chunked_fused_problem

TID = "scan.chunked_fused"


def _ev():
    task = families.get("scan").make_task()
    return Evaluator(task.model_copy(update={"seeds": task.seeds[:1]}), backend="sim")


def _knobs(**kn) -> dict:
    t = families.get("scan").template(TID)
    k = dict(t.defaults(), **kn)
    assert t.valid(k), chunked_fused_problem(k)
    return k


def _src(kind: str, **kn) -> str:
    return families.get("scan").template(TID).render(_knobs(**kn), kind)


# (8 channels, 4 chunks, 2 staged steps): L37 -> 4 chunks of 10 steps (the last 7 long: a partial block), D12 -> 2
# groups, one half dead; (32 channels, 2 chunks, 4 staged steps, pass 1 forwards, accurate exp): one chunk per
# warp, L37 -> 2 chunks of 20. The defaults (16 channels x 32 chunks, 4 steps) run in test_families.py.
SMALL = dict(channels_per_group=8, seq_chunks=4, stage_steps=2)
SETS = {"cuda": [SMALL, dict(channels_per_group=32, seq_chunks=2, stage_steps=4, warm_l2=False, fast_exp=False)],
        "metal": [SMALL]}


@pytest.mark.parametrize("kind", ["cuda", "metal"])
def test_chunks_groups_and_ragged_ends_pass(kind):
    with _ev() as ev:
        for kn in SETS[kind]:
            r = ev.evaluate(_src(kind, **kn), timing=False)
            assert r.status == "passed", f"{kind} {kn}: {r.summary()}\n{r.log_tail}"


BREAKS = {
    # every chunk's pass 2 starts from zero instead of the state carried into it
    "carried state": ("stg[at] = hr;", "stg[at] = 0.0f;"),
    # the carry forgets the decay over the chunk it crosses
    "chunk decay": ("hr = ks_ex2(an * sdl[cj * CPG + pc]) * hr + v;", "hr = hr + v;"),
}


@pytest.mark.parametrize("what", list(BREAKS))
def test_a_broken_carry_is_caught(what):
    src = _src("cuda", **SMALL)
    old, new = BREAKS[what]
    broken = src.replace(old, new)
    assert broken != src, f"{what}: the text to break is not in the source"
    with _ev() as ev:
        r = ev.evaluate(broken, timing=False)
    assert r.status == "failed" and r.worst is not None, f"{what}: {r.summary()}"


def _ref_with_state(x, dl, A, B, C, D, h0):
    h = h0.astype(np.float64).copy()
    y = np.zeros(x.shape)
    for t in range(x.shape[1]):
        dt = dl[:, t, :, None]
        h = np.exp(dt * A) * h + dt * B[:, t, None, :] * x[:, t, :, None]
        y[:, t] = (h * C[:, t, None, :]).sum(-1) + D * x[:, t]
    return y, h


@pytest.mark.parametrize("kind", ["cuda", "metal"])
def test_stateful_variant_starts_from_h0_and_returns_the_final_state(kind):
    import mlx.core as mx
    from ksearch_engine.families.scan import render_stateful
    from ksearch_engine.sim import install_mlx_shim, uninstall_mlx_shim

    rng = np.random.default_rng(3)
    Bt, L, Dm, N = 2, 29, 12, 8           # 4 chunks of 8 steps (the last 5), 2 groups a batch row (one half dead)
    x = rng.standard_normal((Bt, L, Dm)).astype(np.float32)
    dl = rng.uniform(0.01, 0.5, (Bt, L, Dm)).astype(np.float32)
    A = rng.uniform(-4.0, -0.1, (Dm, N)).astype(np.float32)
    Bm = rng.standard_normal((Bt, L, N)).astype(np.float32)
    Cm = rng.standard_normal((Bt, L, N)).astype(np.float32)
    D = rng.uniform(-1, 1, (Dm,)).astype(np.float32)
    h0 = rng.standard_normal((Bt, Dm, N)).astype(np.float32)
    y_ref, h_ref = _ref_with_state(x, dl, A, Bm, Cm, D, h0)
    y_zero, _ = _ref_with_state(x, dl, A, Bm, Cm, D, np.zeros_like(h0))
    assert np.abs(y_ref - y_zero).max() > 0.1             # h0 matters to y
    src = render_stateful(_knobs(**SMALL), kind, TID)
    install_mlx_shim(check_races=False)
    try:
        ns: dict = {}
        exec(compile(src, "candidate", "exec"), ns)
        y, h = ns["scan_with_state"](*(mx.array(a) for a in (x, dl, A, Bm, Cm, D, h0)))
        y, h = np.array(y), np.array(h)
    finally:
        uninstall_mlx_shim()
    assert np.abs(y - y_ref).max() < 2e-4 * (1 + np.abs(y_ref).max())
    assert np.abs(h - h_ref).max() < 2e-4 * (1 + np.abs(h_ref).max())


@pytest.mark.parametrize("knobs,reason", [
    (dict(channels_per_group=12), "divide a warp"),
    (dict(channels_per_group=16, seq_chunks=64), "more than 512"),
    (dict(channels_per_group=8, seq_chunks=2), "whole number of warps"),
    (dict(channels_per_group=16, seq_chunks=32, stage_steps=8), "registers"),
    (dict(channels_per_group=32, seq_chunks=8, stage_steps=2), "carry needs stage_steps"),
    (dict(channels_per_group=32, seq_chunks=8, stage_steps=1), "carry needs stage_steps"),
    (dict(channels_per_group=8, seq_chunks=64, stage_steps=4), "threadgroup memory"),
    (dict(channels_per_group=32, seq_chunks=16, stage_steps=8), "registers"),
])
def test_invalid_knobs_are_refused_with_a_reason(knobs, reason):
    t = families.get("scan").template(TID)
    k = dict(t.defaults(), **knobs)
    why = chunked_fused_problem(k)
    assert why is not None and reason in why, why
    assert not t.valid(k)
    with pytest.raises(ValueError, match=re.escape(why)):
        t.render(k, "cuda")


def _bench(name: str):
    return load_bench(name, "scan")


def _bench_sweep():
    return _bench("families").SWEEPS["scan"]


def test_sweep_puts_the_fused_kernel_first_with_valid_knobs():
    sweep = _bench_sweep()
    mine = [k for name, k in sweep if name == "chunked_fused"]
    assert sweep[0][0] == "chunked_fused" and 3 <= len(mine) <= 4
    assert all(chunked_fused_problem(_knobs_full(k)) is None for k in mine)


def _knobs_full(k: dict) -> dict:
    return dict(families.get("scan").template(TID).defaults(), **k)


def _cuda_unit(knobs: dict, i: int, stateful: bool, seq: int) -> str:
    """The rendered body inside the signature MLX's cuda_kernel writes (inputs `const float*`, outputs `float*`,
    template arguments as constexpr ints), in a namespace of its own (each header defines ks_ex2)."""
    from ksearch_engine.families.scan import render_stateful

    src = render_stateful(knobs, "cuda", TID) if stateful else families.get("scan").template(TID).render(knobs, "cuda")
    body = re.search(r'_SOURCE = r"""\n(.*?)\n"""', src, re.S).group(1)
    hdr = re.search(r'_HEADER = r"""(.*?)"""', src, re.S).group(1)
    ins = ["x", "delta", "A", "B", "C", "D"] + (["h0"] if stateful else [])
    outs = ["y"] + (["hlast"] if stateful else [])
    params = [f"const float* {n}" for n in ins] + [f"float* {n}" for n in outs]
    return (f"namespace u{i} {{\n{hdr}\nnamespace mlx {{ namespace core {{ namespace cu {{\n"
            f"__global__ void scan{i}({', '.join(params)}) {{\n"
            f"  constexpr int BATCH = 1; constexpr int SEQ = {seq}; constexpr int DIM = 2048; constexpr int NST = 16;\n"
            f"{body}\n}}\n}}}}}}}}\n")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_sweep_sets_compile_for_sm90_within_the_register_file(tmp_path):
    """The bench sweep's knob sets (and the stateful kernel mamba_prefill uses, at L512) through nvcc/ptxas for
    sm_90 at the bench shape (L4096 D2048 N16): they compile, do not spill, and registers (rounded up to 8, as
    the hardware allots them) x threads fit the 64K registers of one threadgroup."""
    sets = [_knobs_full(k) for name, k in _bench_sweep() if name == "chunked_fused"]
    template, prefill = _bench("mamba_prefill").SCANS["chunked_fused"]
    assert template == TID
    units = [(k, False, 4096) for k in sets] + [(_knobs_full(prefill), True, 512), (_knobs_full(prefill), True, 4096)]
    cu = tmp_path / "k.cu"
    prelude = ("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cooperative_groups.h>\n"   # as MLX's header
               "#define inf (1.0f / 0.0f)\n")
    cu.write_text(prelude + "".join(_cuda_unit(k, i, st, seq) for i, (k, st, seq) in enumerate(units)))
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = re.findall(r"Compiling entry function '\S*scan(\d+)EP\S*'.*?(\d+) bytes spill stores.*?Used (\d+) registers",
                       r.stdout + r.stderr, re.S)
    assert len(found) == len(units), r.stderr[-3000:]
    for i, spill, regs in found:
        k = units[int(i)][0]
        threads = k["channels_per_group"] * k["seq_chunks"]
        assert int(spill) == 0, (k, r.stderr[-2000:])
        assert threads * (-(-int(regs) // 8) * 8) <= 65536, f"{k}: {regs} registers x {threads} threads"
