"""Attention prefill: softmax(Q K^T / sqrt(Dh) [+ causal mask]) V, GQA when Hkv < Hq.

q (B, Hq, L, Dh), k/v (B, Hkv, L, Dh), fp16, and `causal` (1,) fp32: 1 for a causal mask (the task's choice,
`make_task(causal=True)`; candidates read it on the device, so one template serves both). Baseline
`mx.fast.scaled_dot_product_attention` (cuDNN's flash kernel on the H200); the `ops` template is the naive
softmax(Q K^T) V in MLX operations; the kernel template is flash-style (online softmax, the L x L scores never
stored) on CUDA cores / SIMD lanes, without tensor-core MMA.
"""
from __future__ import annotations

from ._decode import render_prefill
from ._flash_mma import flash_mma_valid, render_flash_mma
from ._flash_mma2 import flash_mma2_valid, render_flash_mma2
from ._flash_wgmma import flash_wgmma_valid, render_flash_wgmma
from ._flash_sg import flash_sg_valid, render_flash_sg
from ._src import header
from .base import Family, Template
from ..task import InputSpec, KernelTask, Workload

REFERENCE = '''import mlx.core as mx

def reference(q, k, v, causal):
    B, Hq, L, Dh = q.shape
    Hkv = k.shape[1]
    qg = q.astype(mx.float32).reshape(B, Hkv, Hq // Hkv, L, Dh) * (Dh ** -0.5)
    s = qg @ k.astype(mx.float32)[:, :, None].swapaxes(-1, -2)
    tri = mx.arange(L)[:, None] >= mx.arange(L)[None, :]
    s = mx.where(mx.logical_or(causal[0] <= 0, tri), s, -mx.inf)
    p = mx.softmax(s, axis=-1)
    return (p @ v.astype(mx.float32)[:, :, None]).reshape(B, Hq, L, Dh).astype(q.dtype)
'''
_BASE = '''import mlx.core as mx

def baseline(q, k, v, causal):
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5, mask={mask})
'''
SMALL = [Workload(name="b1_hq4_hkv2_l40_d64", dims={"Bt": 1, "Hq": 4, "Hkv": 2, "L": 40, "Dh": 64}),
         Workload(name="b1_hq2_hkv2_l21_d128", dims={"Bt": 1, "Hq": 2, "Hkv": 2, "L": 21, "Dh": 128})]
BENCH = [Workload(name="b1_h32_kv8_l4096_d128_gqa", dims={"Bt": 1, "Hq": 32, "Hkv": 8, "L": 4096, "Dh": 128}),
         Workload(name="b1_h32_l4096_d128", dims={"Bt": 1, "Hq": 32, "Hkv": 32, "L": 4096, "Dh": 128})]


def make_task(causal: bool = False, dtype: str = "float16") -> KernelTask:
    inputs = [InputSpec(name=n, shape=["Bt", h, "L", "Dh"], dtype=dtype, init="normal")
              for n, h in (("q", "Hq"), ("k", "Hkv"), ("v", "Hkv"))]
    inputs.append(InputSpec(name="causal", shape=[1], init="ones" if causal else "zeros"))
    return KernelTask(name="attention_causal" if causal else "attention", family="attention",
                      description=("causal " if causal else "") + "attention prefill",
                      inputs=inputs, outputs=["out"], reference=REFERENCE,
                      baseline=_BASE.format(mask='"causal"' if causal else "None"),
                      baseline_name="mx.fast.scaled_dot_product_attention", workloads=SMALL, bench_workloads=BENCH,
                      seeds=[0, 1])


def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("attention.ops renders ops candidates only")
    ct = "mx.float32" if k["upcast"] else "q.dtype"
    if k["gqa"] == "repeat":
        kv = ("    k = mx.repeat(k, Hq // Hkv, axis=1)\n    v = mx.repeat(v, Hq // Hkv, axis=1)\n"
              f"    s = (q * (Dh ** -0.5)).astype({ct}) @ k.astype({ct}).swapaxes(-1, -2)\n")
        out_v = f"    o = p.astype({ct}) @ v.astype({ct})\n"
    else:
        kv = (f"    qg = (q * (Dh ** -0.5)).reshape(B, Hkv, Hq // Hkv, L, Dh).astype({ct})\n"
              f"    s = qg @ k.astype({ct})[:, :, None].swapaxes(-1, -2)\n")
        out_v = f"    o = p.astype({ct}) @ v.astype({ct})[:, :, None]\n"
    mask = ("    tri = mx.arange(L)[:, None] >= mx.arange(L)[None, :]\n"
            "    s = mx.where(mx.logical_or(causal[0] <= 0, tri), s, mx.array(-float('inf'), s.dtype))\n")
    body = f'''

def _attention(q, k, v, causal):
    B, Hq, L, Dh = q.shape
    Hkv = k.shape[1]
{kv}{mask}    p = mx.softmax(s, axis=-1, precise=True)
{out_v}    return o.reshape(B, Hq, L, Dh).astype(q.dtype)
'''
    src = header("attention", "attention.ops", k, kind) + body
    return src + ("\n\nkernel = mx.compile(_attention)\n" if k["compile"] else "\n\nkernel = _attention\n")


def _render_flash(k: dict, kind: str) -> str:
    return render_prefill("attention", "attention.flash", k, kind)


OPS = Template(id="attention.ops", pattern="attention.ops_sdpa", kinds=("ops",),
               knobs={"gqa": ["reshape", "repeat"], "upcast": [True, False], "compile": [False, True]},
               render=_render_ops, description="naive softmax(Q K^T) V in MLX ops (the L x L scores in memory)",
               difficulty=1, predicted_speedup=0.2)
FLASH = Template(
    id="attention.flash", pattern="attention.flash_tiling", kinds=("metal", "cuda"),
    knobs={"q_per_group": [8, 4, 16], "lanes_per_key": [16, 8, 32], "warps": [4, 2, 8], "unroll": [2, 1, 4],
           "fast_exp": [False, True]},
    render=_render_flash,
    description="flash-style: a threadgroup owns q_per_group query rows of one head and streams every key once "
                "through its warps (online softmax, merge through threadgroup memory); CUDA cores, no MMA",
    difficulty=4, predicted_speedup=0.1,
    valid=lambda k: (k["warps"] * k["q_per_group"] <= 32 and 32 % k["lanes_per_key"] == 0
                     and k["unroll"] * 128 // k["lanes_per_key"] <= 32))


def _naive(kind: str) -> str:
    if kind == "ops":
        return _render_ops({"gqa": "repeat", "upcast": True, "compile": False}, "ops")
    return _render_flash({"q_per_group": 1, "lanes_per_key": 32, "warps": 1, "unroll": 1, "fast_exp": False}, kind)


FLASH_MMA = Template(
    id="attention.flash_mma", pattern="attention.flash_tiling", kinds=("cuda",),
    knobs={"warps": [4, 8, 2], "block_kv": [32, 64, 16]},
    render=render_flash_mma,
    description="flash attention on tensor cores: mma.sync m16n8k16 + ldmatrix.trans (inline PTX), Q fragments in "
                "registers, K/V tiles through shared memory with the next tile prefetched to registers, online "
                "softmax on the accumulator fragments, P kept in registers; causal stops at the diagonal",
    difficulty=5, predicted_speedup=0.3, valid=flash_mma_valid)  # H200 run 1: 0.24-0.32x of cuDNN

FLASH_MMA2 = Template(
    id="attention.flash_mma2", pattern="attention.flash_tiling", kinds=("cuda",),
    knobs={"warps": [4, 8, 2], "rows": [32, 16], "block_kv": [64, 32, 128, 16]},
    render=render_flash_mma2,
    description="flash attention on tensor cores, FlashAttention-2 data movement: cp.async double-buffered K/V tiles "
                "(one barrier a tile), Q through shared memory, ldmatrix.x4 for Q/K and ldmatrix.x4.trans for V, "
                "16 or 32 query rows a warp, the softmax scale folded into ex2's FFMA, masks on diagonal/tail tiles "
                "only, dynamic shared memory",
    difficulty=5, predicted_speedup=0.5, valid=flash_mma2_valid)  # H100: 0.51x of cuDNN, 0.60x causal

FLASH_WGMMA = Template(
    id="attention.flash_wgmma", pattern="attention.flash_tiling", kinds=("cuda",),
    knobs={"warpgroups": [2, 3, 1], "block_kv": [64, 128, 96], "stages": [2, 1, 3], "pv_n": [128, 64],
           "q_in": ["regs", "smem"], "stagger": [True, False]},
    render=render_flash_wgmma,
    description="flash attention on Hopper's warpgroup MMA (sm_90a): wgmma.mma_async m64nNk16, S = Q K^T with K "
                "(and Q, or Q's fragments from registers) read from 128-byte-swizzled shared memory through matrix "
                "descriptors, O += P V with P from registers and V transposed from shared memory; 64 query rows a "
                "warpgroup, cp.async K/V rings `stages` tiles ahead, P V of tile j-1 under the online softmax of tile "
                "j, warpgroup 1 staggered half an iteration (ping-pong); causal stops at the diagonal. fp16/bf16, GQA, "
                "Dh 64/128. The Metal twin is attention.flash_sg",
    difficulty=5, predicted_speedup=0.7, valid=flash_wgmma_valid)  # H100: 0.68-0.71x of cuDNN, 0.75x causal

FLASH_SG = Template(
    id="attention.flash_sg", pattern="attention.simdgroup_mma", kinds=("metal",),
    knobs={"warps": [4, 2, 8], "block_kv": [32, 16, 8]},
    render=render_flash_sg,
    description="flash attention on Apple's matrix units (the Metal twin of flash_mma2): simdgroup_matrix 8x8 "
                "multiply-accumulate for Q K^T and P V, each simdgroup 8 query rows with Q's fragments kept for the "
                "pass, K/V tiles through threadgroup memory, online softmax on thread_elements() (fp32), masks on "
                "diagonal/tail tiles only",
    difficulty=5, predicted_speedup=0.3, valid=flash_sg_valid)

FAMILY = Family(name="attention", make_task=make_task, templates=[OPS, FLASH, FLASH_MMA, FLASH_MMA2, FLASH_WGMMA, FLASH_SG], naive=_naive,
                description="attention prefill, causal or not (make_task(causal=True))")
