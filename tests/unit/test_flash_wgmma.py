"""attention.flash_wgmma (flash attention on Hopper's wgmma): the knobs reach the source, impossible knob sets are
refused with a reason, the simulator's twins (wgmma from the descriptors' canonical layout) pass several tiles, both
masks, GQA and bf16 and catch a wrong swizzle and a dropped mask, and the renders compile for sm_90a without spills
or ptxas serializing the wgmma (where nvcc is installed). The GPU check is bench/wgmma_check.py."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.bench_modules import load_bench
from ksearch_engine import families
from ksearch_engine.evaluate import Evaluator
from ksearch_engine.families._flash_wgmma import smem_bytes, why_invalid
from ksearch_engine.task import Workload

TID = "attention.flash_wgmma"
# several 128-row query blocks and 64/96/128-key tiles; L is no multiple of any tile
LONG = [Workload(name="b1_hq2_hkv1_l150_d64", dims={"Bt": 1, "Hq": 2, "Hkv": 1, "L": 150, "Dh": 64})]
L100 = [Workload(name="b1_hq1_hkv1_l100_d128", dims={"Bt": 1, "Hq": 1, "Hkv": 1, "L": 100, "Dh": 128})]


def _t():
    return families.get("attention").template(TID)


def _knobs(**kw):
    return dict(_t().defaults(), **kw)


def _render(**kw):
    k = _knobs(**kw)
    assert _t().valid(k), (k, why_invalid(k))
    return _t().render(k, "cuda")


def _ev(workloads, **opts):
    task = families.get("attention").make_task(**opts)
    return Evaluator(task.model_copy(update={"seeds": task.seeds[:1], "workloads": workloads}), backend="sim")


def test_flash_wgmma_source_has_the_ptx_and_the_knobs_reach_it():
    src = _render()
    for ptx in ("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
                "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "wgmma.fence.sync.aligned",
                "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned", "fence.proxy.async.shared::cta",
                "cp.async.cg.shared.global", "ex2.approx.ftz.f32", "#ifdef KSIM_CUDA"):
        assert ptx in src, ptx
    assert f"shared_memory={smem_bytes(_knobs())}" in src
    d = _knobs()
    assert (d["warpgroups"], d["block_kv"], d["stages"], d["q_in"], d["stagger"]) == (2, 64, 2, "regs", True)
    assert "constexpr int NWG = 2; constexpr int BKV = 64; constexpr int PF = 2;" in src
    assert "constexpr int KST = 4; constexpr int VST = 5;" in src                 # staggered: one more of each
    assert "ks_wgrsk<BKV, false>(s, qf[kd]" in src and "ks_wgss<BKV" not in src   # Q in registers
    assert "if (wg == 1) {" in src                                                 # the staggered barrier
    lock = _render(warpgroups=3, block_kv=128 // 2, stages=1, q_in="smem", stagger=False)
    assert "constexpr int NWG = 3;" in lock and "constexpr int KST = 2; constexpr int VST = 3;" in lock
    assert "ks_wgss<BKV, false>(s, qa +" in lock and "if (wg == 1) {" not in lock
    assert "__launch_bounds__(384, 1)" in lock                                     # 384 threads: the 168-register cap
    assert "__launch_bounds__" not in src
    assert "constexpr int PVN = 64 < DH ? 64 : DH;" in _render(pv_n=64)
    assert "m64n96k16" in _render(block_kv=96)


def test_flash_wgmma_invalid_knobs_are_refused_with_a_reason():
    t = _t()
    cases = {"block_kv": (dict(block_kv=48), "block_kv=48"),
             "warpgroups": (dict(warpgroups=4, stagger=False), "warpgroups=4"),
             "stagger": (dict(warpgroups=3, stagger=True), "stagger pairs two warpgroups"),
             "registers": (dict(warpgroups=3, block_kv=128, stagger=False, q_in="smem"), "registers"),
             "smem": (dict(block_kv=128, stages=2, stagger=False, q_in="smem"), "shared memory"),
             "smem_stagger": (dict(block_kv=128, stages=1, q_in="smem"), "shared memory")}
    for name, (kw, why) in cases.items():
        k = _knobs(**kw)
        assert not t.valid(k), name
        assert why in why_invalid(k), (name, why_invalid(k))
        with pytest.raises(ValueError, match=re.escape(why)):
            t.render(k, "cuda")
    # what fits: 128-key tiles staggered only with Q in registers (225 KB), 3 warpgroups with 64-key tiles
    assert t.valid(_knobs(block_kv=128, stages=1)) and smem_bytes(_knobs(block_kv=128, stages=1)) <= 227 * 1024
    assert t.valid(_knobs(warpgroups=3, stagger=False, q_in="smem", stages=3))
    n_valid = 0
    for wg in t.knobs["warpgroups"]:                   # every valid combination renders
        for bkv in t.knobs["block_kv"]:
            for st in t.knobs["stages"]:
                for q in t.knobs["q_in"]:
                    for sg in t.knobs["stagger"]:
                        k = _knobs(warpgroups=wg, block_kv=bkv, stages=st, q_in=q, stagger=sg)
                        if t.valid(k):
                            n_valid += 1
                            assert f"constexpr int BKV = {bkv};" in t.render(k, "cuda")
    assert n_valid >= 20


def test_flash_wgmma_many_tiles_gqa_tail_on_the_simulator():
    """L=150, Dh=64, GQA 2:1, two query blocks: the default (staggered, Q in registers, 64-key tiles, 2 ahead),
    causal, and the lockstep 128-key kernel with Q in shared memory (S by shared-memory descriptors for both
    operands), not causal."""
    for causal, kw in ((True, dict()), (False, dict(block_kv=128, stages=1, q_in="smem", stagger=False))):
        with _ev(LONG, causal=causal) as ev:
            r = ev.evaluate(_render(**kw), timing=False)
            assert r.status == "passed", (kw, r.summary(), r.log_tail)


def test_flash_wgmma_dh128_bf16_and_what_the_simulator_catches():
    """Dh=128 (two 64-column swizzle regions: the k-step's region jump, V's leading byte offset), bf16, 96-key tiles,
    causal; a K/V staging without the swizzle and the P V descriptor's LBO off by a region fail."""
    src = _render(block_kv=96, stages=1)
    no_swizzle = src.replace("#define KS_SW(R, r, c8) ((((c8) >> 3) * (R) + (r)) * 128 + ((((c8) & 7) ^ ((r) & 7)) << 4))",
                             "#define KS_SW(R, r, c8) ((((c8) >> 3) * (R) + (r)) * 128 + (((c8) & 7) << 4))")
    bad_lbo = src.replace("PVN == 128 ? REG_B : 1024", "PVN == 128 ? 2 * REG_B : 1024")
    assert len({src, no_swizzle, bad_lbo}) == 3
    with _ev(L100, causal=True, dtype="bfloat16") as ev:
        r = ev.evaluate(src, timing=False)
        assert r.status == "passed", (r.summary(), r.log_tail)
    with _ev(L100, causal=True) as ev:
        for broken in (no_swizzle, bad_lbo):
            assert ev.evaluate(broken, timing=False).status != "passed"


BENCH_SETS = [dict(), dict(block_kv=128, stages=1), dict(block_kv=128, stages=1, q_in="smem", stagger=False),
              dict(warpgroups=3, stagger=False, q_in="smem"), dict(block_kv=96, stages=1)]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_flash_wgmma_compiles_for_sm90a_without_spills_or_serialized_wgmma(tmp_path):
    """nvcc/ptxas (sm_90a) on the GPU side of the renders (inline PTX, not the twins), each in a kernel shaped like
    MLX's cuda_kernel wrapper at the benchmark's GQA shape (Dh=128): no spills, under the register cap, and no
    "wgmma ... serialized" warning (a branch around a wgmma or a register touched in flight would make ptxas wait
    after every wgmma)."""
    unit = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
    sets = [(kw, "__half") for kw in BENCH_SETS] + [(dict(), "__nv_bfloat16")]
    for i, (kw, ty) in enumerate(sets):
        src = _render(**kw)
        body = re.search(r'_SOURCE%s = r"""(.*?)"""' % ("_BF16" if "bf" in ty else ""), src, re.S).group(1)
        hdr = re.search(r'_HEADER = r"""(.*?)"""', src, re.S).group(1)
        (tmp_path / f"k{i}.cu").write_text(
            f"{unit}{hdr}\n__global__ void k{i}(const {ty}* Q, const {ty}* K, const {ty}* V, const float* causal, "
            f"{ty}* out) {{\nconstexpr int HQ = 32; constexpr int HKV = 8; constexpr int DH = 128; "
            f"constexpr int SEQ = 4096;\n{body}\n}}\n")
    procs = [subprocess.Popen(["nvcc", "-arch=sm_90a", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / f"k{i}.cubin"),
                               str(tmp_path / f"k{i}.cu")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(len(sets))]
    for (kw, ty), p in zip(sets, procs):
        out = p.communicate(timeout=300)[0]
        assert p.returncode == 0, out[-3000:]
        assert "serialized" not in out, (kw, out[-2000:])
        assert int(re.search(r"(\d+) bytes spill stores", out).group(1)) == 0, (kw, out)
        regs = int(re.search(r"Used (\d+) registers", out).group(1))
        assert regs <= (168 if kw.get("warpgroups") == 3 else 255), (kw, regs)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_flash_wgmma_on_a_gpu_before_hopper_fails_with_a_message_naming_the_fallback(tmp_path):
    """An A100 (sm_80) has no wgmma: the compile stops at one line that says so and names the template to use."""
    src = _render()
    body = re.search(r'_SOURCE = r"""(.*?)"""', src, re.S).group(1)
    hdr = re.search(r'_HEADER = r"""(.*?)"""', src, re.S).group(1)
    (tmp_path / "a.cu").write_text(
        f"#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n{hdr}\n__global__ void a(const __half* Q, const __half* K, "
        f"const __half* V, const float* causal, __half* out) {{\nconstexpr int HQ = 4; constexpr int HKV = 4; "
        f"constexpr int DH = 128; constexpr int SEQ = 64;\n{body}\n}}\n")
    p = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "a.cubin"), str(tmp_path / "a.cu")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "needs a Hopper GPU (sm_90a" in p.stderr and "attention.flash_mma2" in p.stderr, p.stderr[-2000:]


def _bench_module(name: str):
    return load_bench(name, "wgmma")


def test_flash_wgmma_is_in_the_attention_sweeps_first_with_at_most_three_valid_settings():
    t = _t()
    fam = _bench_module("families")
    for name in ("attention", "attention_causal"):
        mine = [k for tname, k in fam.SWEEPS[name] if tname == "flash_wgmma"]
        assert fam.SWEEPS[name][0] == ("flash_wgmma", {}) and 1 <= len(mine) <= 3   # the default first
        assert all(t.valid(dict(t.defaults(), **k)) for k in mine)
    head = _bench_module("headline")
    mine = [k for k in head.ATT if k.get("template") == TID]
    assert head.ATT[0] == {"template": TID} and 1 <= len(mine) <= 3
    assert all(t.valid(dict(t.defaults(), **{a: v for a, v in k.items() if a != "template"})) for k in mine)
    assert head.PLAN["attention"][3] is head.ATT and head.PLAN["attention_causal"][3] is head.ATT
