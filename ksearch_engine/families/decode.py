"""Decode attention: one query token per sequence against a contiguous KV cache, GQA.

q (B, Hq, 1, Dh), k/v (B, Hkv, S, Dh), fp16; scale 1/sqrt(Dh). Baseline `mx.fast.scaled_dot_product_attention`.
"""
from __future__ import annotations

from ._decode import decode_valid, naive_decode, render_decode
from ._gqa_decode import render_tiles, tiles_valid
from ._gqa_async import ASYNC_DESCRIPTION, async_valid, render_async
from ._gqa_fused import FUSED_DESCRIPTION, fused_valid, render_fused
from ._src import header
from .base import Family, Template
from ..task import InputSpec, KernelTask, Workload

REFERENCE = '''import mlx.core as mx

def reference(q, k, v):
    B, Hq, _, Dh = q.shape
    Hkv = k.shape[1]
    qg = q.astype(mx.float32).reshape(B, Hkv, Hq // Hkv, Dh) * (Dh ** -0.5)
    s = qg @ k.astype(mx.float32).transpose(0, 1, 3, 2)
    p = mx.softmax(s, axis=-1)
    return (p @ v.astype(mx.float32)).reshape(B, Hq, 1, Dh).astype(q.dtype)
'''
BASELINE = '''import mlx.core as mx

def baseline(q, k, v):
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5)
'''

SMALL = [Workload(name="b2_hq8_hkv2_s50_d64", dims={"Bt": 2, "Hq": 8, "Hkv": 2, "S": 50, "Dh": 64}),
         Workload(name="b1_hq4_hkv4_s130_d128", dims={"Bt": 1, "Hq": 4, "Hkv": 4, "S": 130, "Dh": 128})]
BENCH = [Workload(name="llama3_8b_gqa_kv4096", dims={"Bt": 1, "Hq": 32, "Hkv": 8, "S": 4096, "Dh": 128}),
         Workload(name="llama2_7b_mha_kv4096", dims={"Bt": 1, "Hq": 32, "Hkv": 32, "S": 4096, "Dh": 128})]


def make_task(dtype: str = "float16") -> KernelTask:
    inputs = [InputSpec(name="q", shape=["Bt", "Hq", 1, "Dh"], dtype=dtype, init="normal"),
              InputSpec(name="k", shape=["Bt", "Hkv", "S", "Dh"], dtype=dtype, init="normal"),
              InputSpec(name="v", shape=["Bt", "Hkv", "S", "Dh"], dtype=dtype, init="normal")]
    return KernelTask(name="decode", family="decode_attention", description=__doc__.strip().splitlines()[0],
                      inputs=inputs, outputs=["out"], reference=REFERENCE, baseline=BASELINE,
                      baseline_name="mx.fast.scaled_dot_product_attention", workloads=SMALL, bench_workloads=BENCH,
                      seeds=[0, 1])


def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("decode.ops renders ops candidates only")
    ct = "mx.float32" if k["upcast"] else "q.dtype"
    body = f'''

def _decode(q, k, v):
    B, Hq, _, Dh = q.shape
    Hkv = k.shape[1]
    qg = (q.reshape(B, Hkv, Hq // Hkv, Dh) * (Dh ** -0.5)).astype({ct})
    s = qg @ k.astype({ct}).swapaxes(-1, -2)
    p = mx.softmax(s.astype(mx.float32), axis=-1, precise=True).astype({ct})
    return (p @ v.astype({ct})).reshape(B, Hq, 1, Dh).astype(q.dtype)
'''
    src = header("decode", "decode.ops", k, kind) + body
    return src + ("\n\nkernel = mx.compile(_decode)\n" if k["compile"] else "\n\nkernel = _decode\n")


OPS = Template(id="decode.ops", pattern="attention.ops_sdpa", kinds=("ops",),
               knobs={"upcast": [True, False], "compile": [False, True]}, render=_render_ops,
               description="grouped matmuls in MLX ops (GQA by reshape, no K/V repeat)", difficulty=1)
SPLIT = Template(
    id="decode.split_kv", pattern="decode.split_kv", kinds=("metal", "cuda"),
    knobs={"lanes_per_key": [16, 8, 32, 4], "warps": [4, 2, 8], "splits": [32, 1, 4, 8, 16, 64],
           "unroll": [2, 1, 4], "fast_exp": [False, True]},
    render=lambda k, kind: render_decode("decode", "decode.split_kv", k, kind, paged=False),
    description="flash-decoding: KV split across threadgroups, GQA heads share loads, LSE merge",
    difficulty=3, predicted_speedup=1.2, valid=decode_valid)  # H200: 0.97x GQA, 1.43x MHA

TILES = Template(
    id="decode.gqa_tiles", pattern="decode.split_kv", kinds=("metal", "cuda"),
    knobs={"warps": [4, 8, 2], "block_keys": [64, 32, 128], "target_blocks": [512, 1024, 256, 2048]},
    render=lambda k, kind: render_tiles("decode", "decode.gqa_tiles", k, kind, paged=False),
    description="split-KV GQA decode in key tiles: each KV head read once for its query heads, every K/V load of a "
                "tile issued before any arithmetic, next tile prefetched, splits chosen to fill the GPU, log2 LSE merge",
    difficulty=3, predicted_speedup=1.45, valid=tiles_valid)  # H200 run 1: 1.44x GQA, 1.36x MHA

FUSED = Template(
    id="decode.gqa_fused", pattern="decode.split_kv", kinds=("metal", "cuda"),
    knobs={"warps": [4, 8, 2], "block_keys": [64, 32, 128], "target_blocks": [256, 512, 128, 384, 1024],
           "merge": ["fused", "kernel"], "stages": [1, 2]},
    render=lambda k, kind: render_fused("decode", "decode.gqa_fused", k, kind, paged=False),
    description=FUSED_DESCRIPTION,
    difficulty=3, predicted_speedup=1.2, valid=fused_valid)  # H100: 1.18x MHA; GQA slower than gqa_tiles

ASYNC = Template(
    id="decode.gqa_async", pattern="decode.split_kv", kinds=("metal", "cuda"),
    knobs={"warps": [4, 8, 2], "block_keys": [32, 16, 64], "stages": [2, 3, 4, 1],
           "target_blocks": [132, 264, 528, 66], "compute": ["mma", "fma"], "merge": ["fused", "kernel"]},
    render=lambda k, kind: render_async("decode", "decode.gqa_async", k, kind, paged=False),
    description=ASYNC_DESCRIPTION,
    difficulty=4, predicted_speedup=1.6, valid=async_valid)  # H100: 1.65-1.83x GQA, 1.32-1.43x MHA

FAMILY = Family(name="decode", make_task=make_task, templates=[OPS, SPLIT, TILES, FUSED, ASYNC],
                naive=lambda kind: naive_decode("decode", kind, paged=False) if kind != "ops" else _render_ops({"upcast": True, "compile": False}, "ops"),
                description="single-token decode attention over a contiguous KV cache")
