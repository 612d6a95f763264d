"""attention.flash_mma2 (FlashAttention-2 style prefill on tensor cores: cp.async double-buffered K/V, ldmatrix.x4
for Q and K, ldmatrix.x4.trans for V) on the CPU simulator, which runs the exact warp-shuffle twins of the PTX.

The family's small workloads (L 40 / 21) fit in one KV tile of the large knob sets, so these tests add sequences
that take several query blocks and several KV tiles (the double buffer turning over, diagonal tiles in the middle
of the sequence, a tail tile), GQA, Dh 64 and 128; and they show that the check catches a wrong ldmatrix row
address, a dropped mask and a prefetch into the buffer being read."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ksearch_engine import families
from ksearch_engine.evaluate import Evaluator
from ksearch_engine.task import Workload

TID = "attention.flash_mma2"
# several 16..64-row query blocks and 16..64-key tiles; L is no multiple of any tile
LONG = [Workload(name="b1_hq4_hkv2_l150_d64", dims={"Bt": 1, "Hq": 4, "Hkv": 2, "L": 150, "Dh": 64})]
LONG128 = [Workload(name="b1_hq2_hkv1_l77_d128", dims={"Bt": 1, "Hq": 2, "Hkv": 1, "L": 77, "Dh": 128})]


def _ev(workloads=None, **opts):
    task = families.get("attention").make_task(**opts)
    upd = {"seeds": task.seeds[:1]}
    if workloads:
        upd["workloads"] = workloads
    return Evaluator(task.model_copy(update=upd), backend="sim")


def _render(**knobs):
    t = families.get("attention").template(TID)
    k = dict(t.defaults(), **knobs)
    assert t.valid(k), k
    return t.render(k, "cuda")


def _check(ev, src):
    r = ev.evaluate(src, timing=False)
    assert r.status == "passed", f"{r.summary()}\n{r.log_tail}"


def test_flash_mma2_source_has_the_ptx_and_the_twins():
    src = _render()
    for ptx in ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global",
                "cp.async.commit_group", "cp.async.wait_group 0", "ex2.approx.ftz.f32"):
        assert ptx in src, ptx
    assert "#ifdef KSIM_CUDA" in src and "shared_memory=" in src
    fp16 = lambda s: s.split("_SOURCE_BF16")[0]        # noqa: E731  (the module holds an fp16 and a bf16 kernel)
    assert fp16(src).count("__syncthreads();") == 1    # one a tile
    assert fp16(_render(rows=16)).count("__syncthreads();") == 2   # + one before the loop: Q's fragments to registers
    assert "#pragma unroll" in src


def test_flash_mma2_knob_validity():
    t = families.get("attention").template(TID)
    ok = lambda **k: t.valid(dict(t.defaults(), **k))  # noqa: E731
    assert ok(warps=4, rows=32, block_kv=64) and ok(warps=8, rows=16, block_kv=128)
    assert not ok(rows=32, block_kv=128)                # 2 x 64 score fragments + 2 x 64 O accumulators
    assert not ok(rows=24)                               # rows are whole m16 blocks, at most two
    assert not ok(block_kv=48)
    for w in t.knobs["warps"]:                          # every valid combination renders
        for r in t.knobs["rows"]:
            for b in t.knobs["block_kv"]:
                if ok(warps=w, rows=r, block_kv=b):
                    assert "constexpr int BKV" in _render(warps=w, rows=r, block_kv=b)


@pytest.mark.parametrize("causal", [True, False])
def test_flash_mma2_many_tiles_gqa_tail(causal):
    """L=150, Dh=64, GQA 4:2: 32-row blocks with 16-key tiles (10 tiles, the buffers turn over many times) and
    64-row blocks (two warps of 32 rows) with 32-key tiles; the task's small workloads too."""
    with _ev(LONG, causal=causal) as ev:
        _check(ev, _render(warps=2, rows=16, block_kv=16))
        _check(ev, _render(warps=2, rows=32, block_kv=32))
    with _ev(causal=causal) as ev:
        _check(ev, _render(warps=4, rows=32, block_kv=64))


def test_flash_mma2_dh128_expected_best_knobs():
    """Dh=128 (the benchmark's), L=77, the knob sets headline.py tries first, causal."""
    with _ev(LONG128, causal=True) as ev:
        _check(ev, _render(warps=4, rows=32, block_kv=64))
        _check(ev, _render(warps=2, rows=16, block_kv=32))


def test_flash_mma2_wrong_fragment_address_is_caught():
    src = _render(warps=2, rows=16, block_kv=32)
    # K's ldmatrix: lanes 8..15 must address the upper 8 head-dim columns (b1), not the next 8 keys
    wrong = src.replace("kcol = ((lane >> 3) & 1) * 8", "kcol = (lane >> 4) * 8")
    assert wrong != src
    with _ev(LONG, causal=False) as ev:
        _check(ev, src)
        assert ev.evaluate(wrong, timing=False).status == "failed"


def test_flash_mma2_dropped_mask_and_prefetch_into_the_live_buffer_are_caught():
    src = _render(warps=2, rows=16, block_kv=16)
    no_mask = src.replace("    if (mask) {", "    if (false) {")
    same_buffer = src.replace("KS_TILE(j0 + BKV, (tile + 1) & 1)", "KS_TILE(j0 + BKV, tile & 1)")
    assert no_mask != src and same_buffer != src
    with _ev(LONG, causal=True) as ev:
        assert ev.evaluate(no_mask, timing=False).status == "failed"
        assert ev.evaluate(same_buffer, timing=False).status == "failed"


def test_flash_mma2_bf16():
    """bf16 inputs take the .bf16 MMA (and bf16 packing of P and O); the data path is the same 16-bit moves."""
    src = _render(warps=2, rows=32, block_kv=32)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src
    fp16_mma = src.replace("kern = _K if q.dtype == mx.float16 else _K_BF16", "kern = _K")  # bf16 bits read as fp16
    assert fp16_mma != src
    with _ev(LONG, causal=True, dtype="bfloat16") as ev:
        _check(ev, src)
        assert ev.evaluate(fp16_mma, timing=False).status == "failed"


# ---- attention.flash_sg: the Metal twin on simdgroup_matrix 8x8 (ksim.h models the tiles and thread_elements())

def _render_sg(**knobs):
    t = families.get("attention").template("attention.flash_sg")
    k = dict(t.defaults(), **knobs)
    assert t.valid(k), k
    return t.render(k, "metal")


def test_flash_sg_knob_validity():
    t = families.get("attention").template("attention.flash_sg")
    ok = lambda **k: t.valid(dict(t.defaults(), **k))  # noqa: E731
    assert ok(warps=4, block_kv=32) and ok(warps=8, block_kv=16)
    assert not ok(block_kv=128)                          # 256 staged rows of Dh=128: over Metal's 32 KB
    assert not ok(block_kv=12)                           # tiles are whole 8x8 fragments
    src = _render_sg()
    assert "simdgroup_multiply_accumulate" in src and "thread_elements()" in src


# the simulator computes every 8x8 product on all 32 lanes: smaller shapes than flash_mma2's
SG = [Workload(name="b1_hq4_hkv2_l53_d32", dims={"Bt": 1, "Hq": 4, "Hkv": 2, "L": 53, "Dh": 32})]


@pytest.mark.parametrize("causal", [True, False])
def test_flash_sg_many_tiles_gqa_tail(causal):
    """L=53, Dh=32, GQA 4:2: 16-row blocks with 8-key tiles (7 tiles, 4 query blocks), 32-row blocks with 16-key
    tiles."""
    with _ev(SG, causal=causal) as ev:
        _check(ev, _render_sg(warps=2, block_kv=8))
        _check(ev, _render_sg(warps=4, block_kv=16))


def test_flash_sg_dh128_and_bf16():
    with _ev(LONG128, causal=True) as ev:
        _check(ev, _render_sg(warps=4, block_kv=32))
    with _ev(SG, causal=False, dtype="bfloat16") as ev:
        _check(ev, _render_sg(warps=8, block_kv=16))


def test_flash_sg_wrong_fragment_layout_and_dropped_mask_are_caught():
    src = _render_sg(warps=2, block_kv=16)
    # the row of a lane's elements: lane bit 4 (q & 4) picks rows 4..7; without it the mask and the output rows
    # are wrong for half the lanes
    wrong_row = src.replace("const int fm = ((lane / 4) & 4) + (lane / 2) % 4;", "const int fm = (lane / 2) % 4;")
    # a row spans lanes differing in bits 0 and 3: reducing over bits 0 and 1 mixes rows
    wrong_reduce = src.replace("simd_shuffle_xor(mx, 8)", "simd_shuffle_xor(mx, 2)")
    no_mask = src.replace("    if (mask) {", "    if (false) {")
    assert len({src, wrong_row, wrong_reduce, no_mask}) == 4
    with _ev(SG, causal=True) as ev:
        # the wrong row mapping also has two lanes writing one output element: the simulator's thread-order
        # check reports it before the comparison with the reference (a SimError, status compile_error)
        assert ev.evaluate(wrong_row, timing=False).status in ("failed", "compile_error")
        assert ev.evaluate(wrong_reduce, timing=False).status == "failed"
        assert ev.evaluate(no_mask, timing=False).status == "failed"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
@pytest.mark.parametrize("knobs,dtype,max_spill", [
    (dict(warps=4, rows=32, block_kv=64), "__half", 16),       # 255 registers: ptxas 13.0 spills 12 bytes (GQA)
    (dict(warps=4, rows=32, block_kv=64), "__nv_bfloat16", 16),
    (dict(warps=4, rows=32, block_kv=32), "__half", 0),
    (dict(warps=8, rows=16, block_kv=64), "__half", 0)])
def test_flash_mma2_ptx_compiles_for_sm90(tmp_path, knobs, dtype, max_spill):
    """The GPU side of the source (the inline PTX, not the twins) through nvcc/ptxas for sm_90, in a kernel shaped
    like MLX's cuda_kernel wrapper, at the benchmark's GQA shape (Dh=128): it compiles, and spills at most a few
    bytes (registers are at the 255 limit with 2 x 16 rows a warp and 64-key tiles)."""
    src = _render(**knobs)
    body = re.search(r'_SOURCE%s = r"""(.*?)"""' % ("_BF16" if "bf" in dtype else ""), src, re.S).group(1)
    hdr = re.search(r'_HEADER = r"""(.*?)"""', src, re.S).group(1)
    cu = tmp_path / "k.cu"
    cu.write_text(f"#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n{hdr}\n"
                  f"template <int HQ, int HKV, int DH, int SEQ>\n"
                  f"__global__ void k(const {dtype}* Q, const {dtype}* K, const {dtype}* V, const float* causal, "
                  f"{dtype}* out) {{\n{body}\n}}\n"
                  f"template __global__ void k<32, 8, 128, 4096>(const {dtype}*, const {dtype}*, const {dtype}*, "
                  f"const float*, {dtype}*);\n")
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    spill = int(re.search(r"(\d+) bytes spill stores", r.stderr).group(1))
    assert spill <= max_spill, r.stderr
