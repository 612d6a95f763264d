"""Paged decode attention: KV in fixed-size pages (num_pages, Hkv, P, Dh) reached through a block table
(B, S/P) of page ids (every sequence has S = blocks * P tokens). Baseline: gather the pages with `mx.take`
into a contiguous cache, then `mx.fast.scaled_dot_product_attention`.
"""
from __future__ import annotations

from ._decode import decode_valid, naive_decode, render_decode
from ._gqa_decode import render_tiles, tiles_valid
from ._gqa_async import ASYNC_DESCRIPTION, async_valid, render_async
from ._gqa_fused import FUSED_DESCRIPTION, fused_valid, render_fused
from ._src import header
from .base import Family, Template
from ..task import InputSpec, KernelTask, Workload

_GATHER = '''
def _gather(pages, block_table):
    B, nblk = block_table.shape
    _, Hkv, P, Dh = pages.shape
    g = mx.take(pages, block_table.reshape(-1), axis=0).reshape(B, nblk, Hkv, P, Dh)
    return g.transpose(0, 2, 1, 3, 4).reshape(B, Hkv, nblk * P, Dh)
'''
REFERENCE = '''import mlx.core as mx
''' + _GATHER + '''

def reference(q, k_pages, v_pages, block_table):
    k, v = _gather(k_pages, block_table), _gather(v_pages, block_table)
    B, Hq, _, Dh = q.shape
    Hkv = k.shape[1]
    qg = q.astype(mx.float32).reshape(B, Hkv, Hq // Hkv, Dh) * (Dh ** -0.5)
    p = mx.softmax(qg @ k.astype(mx.float32).transpose(0, 1, 3, 2), axis=-1)
    return (p @ v.astype(mx.float32)).reshape(B, Hq, 1, Dh).astype(q.dtype)
'''
BASELINE = '''import mlx.core as mx
''' + _GATHER + '''

def baseline(q, k_pages, v_pages, block_table):
    k, v = _gather(k_pages, block_table), _gather(v_pages, block_table)
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5)
'''
SMALL = [Workload(name="b2_hq8_hkv2_p16_blk4_d64", dims={"Bt": 2, "Hq": 8, "Hkv": 2, "P": 16, "NBLK": 4, "NPAGES": 8, "Dh": 64}),
         Workload(name="b1_hq4_hkv4_p8_blk9_d128", dims={"Bt": 1, "Hq": 4, "Hkv": 4, "P": 8, "NBLK": 9, "NPAGES": 9, "Dh": 128})]
BENCH = [Workload(name="llama3_8b_gqa_kv4096_p16", dims={"Bt": 1, "Hq": 32, "Hkv": 8, "P": 16, "NBLK": 256, "NPAGES": 256, "Dh": 128}),
         Workload(name="llama3_8b_gqa_b8_kv4096_p16", dims={"Bt": 8, "Hq": 32, "Hkv": 8, "P": 16, "NBLK": 256, "NPAGES": 2048, "Dh": 128})]


def make_task(dtype: str = "float16") -> KernelTask:
    inputs = [InputSpec(name="q", shape=["Bt", "Hq", 1, "Dh"], dtype=dtype, init="normal"),
              InputSpec(name="k_pages", shape=["NPAGES", "Hkv", "P", "Dh"], dtype=dtype, init="normal"),
              InputSpec(name="v_pages", shape=["NPAGES", "Hkv", "P", "Dh"], dtype=dtype, init="normal"),
              InputSpec(name="block_table", shape=["Bt", "NBLK"], dtype="int32", init="permutation")]
    return KernelTask(name="paged_decode", family="decode_attention", description=__doc__.strip().splitlines()[0],
                      inputs=inputs, outputs=["out"], reference=REFERENCE, baseline=BASELINE,
                      baseline_name="mx.take pages + mx.fast.scaled_dot_product_attention",
                      workloads=SMALL, bench_workloads=BENCH, seeds=[0, 1])


def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("paged_decode.ops renders ops candidates only")
    if k["gather"] == "take":
        g = ('    g = mx.take(pages, block_table.reshape(-1), axis=0).reshape(B, nblk, Hkv, P, Dh)\n')
    else:
        g = ('    g = pages[block_table]\n')
    body = f'''

def _gather(pages, block_table):
    B, nblk = block_table.shape
    _, Hkv, P, Dh = pages.shape
{g}    return g  # (B, nblk, Hkv, P, Dh): no transpose, the einsum-like matmuls below read it in place


def _paged(q, k_pages, v_pages, block_table):
    B, Hq, _, Dh = q.shape
    nblk = block_table.shape[1]
    Hkv, P = k_pages.shape[1], k_pages.shape[2]
    k, v = _gather(k_pages, block_table), _gather(v_pages, block_table)
    qg = (q.astype(mx.float32) * (Dh ** -0.5)).reshape(B, 1, Hkv, Hq // Hkv, Dh)
    s = qg @ k.astype(mx.float32).swapaxes(-1, -2)               # (B, nblk, Hkv, G, P)
    s = s.transpose(0, 2, 3, 1, 4).reshape(B, Hkv, Hq // Hkv, nblk * P)
    p = mx.softmax(s, axis=-1, precise=True).reshape(B, Hkv, Hq // Hkv, nblk, P).transpose(0, 3, 1, 2, 4)
    o = (p @ v.astype(mx.float32)).sum(axis=1)                    # (B, Hkv, G, Dh)
    return o.reshape(B, Hq, 1, Dh).astype(q.dtype)
'''
    src = header("paged_decode", "paged_decode.ops", k, kind) + body
    return src + ("\n\nkernel = mx.compile(_paged)\n" if k["compile"] else "\n\nkernel = _paged\n")


OPS = Template(id="paged_decode.ops", pattern="decode.block_table", kinds=("ops",),
               knobs={"gather": ["take", "index"], "compile": [False, True]}, render=_render_ops,
               description="attention per page in MLX ops, no contiguous copy of the cache", difficulty=2)
SPLIT = Template(
    id="paged_decode.split_kv", pattern="decode.block_table", kinds=("metal", "cuda"),
    knobs={"lanes_per_key": [16, 8, 32, 4], "warps": [4, 2, 8], "splits": [32, 1, 4, 8, 16, 64],
           "unroll": [2, 1, 4], "fast_exp": [False, True]},
    render=lambda k, kind: render_decode("paged_decode", "paged_decode.split_kv", k, kind, paged=True),
    description="flash-decoding that reads K/V pages through the block table directly",
    difficulty=3, predicted_speedup=5.0, valid=decode_valid)

TILES = Template(
    id="paged_decode.gqa_tiles", pattern="decode.block_table", kinds=("metal", "cuda"),
    knobs={"warps": [4, 8, 2], "block_keys": [64, 32, 128], "target_blocks": [512, 1024, 256, 2048]},
    render=lambda k, kind: render_tiles("paged_decode", "paged_decode.gqa_tiles", k, kind, paged=True),
    description="split-KV GQA decode in key tiles: each KV head read once for its query heads, every K/V load of a "
                "tile issued before any arithmetic, next tile prefetched, splits chosen to fill the GPU, log2 LSE merge",
    difficulty=3, predicted_speedup=7.0, valid=tiles_valid)  # H200 run 1: 6.9x B1, 13.9x B8

FUSED = Template(
    id="paged_decode.gqa_fused", pattern="decode.block_table", kinds=("metal", "cuda"),
    knobs={"warps": [4, 8, 2], "block_keys": [64, 32, 128], "target_blocks": [256, 512, 128, 384, 1024],
           "merge": ["fused", "kernel"], "stages": [1, 2]},
    render=lambda k, kind: render_fused("paged_decode", "paged_decode.gqa_fused", k, kind, paged=True),
    description=FUSED_DESCRIPTION,
    difficulty=3, predicted_speedup=5.6, valid=fused_valid)  # H100: 5.6x B1

ASYNC = Template(
    id="paged_decode.gqa_async", pattern="decode.block_table", kinds=("metal", "cuda"),
    knobs={"warps": [4, 8, 2], "block_keys": [32, 16, 64], "stages": [2, 3, 4, 1],
           "target_blocks": [132, 264, 528, 66], "compute": ["mma", "fma"], "merge": ["fused", "kernel"]},
    render=lambda k, kind: render_async("paged_decode", "paged_decode.gqa_async", k, kind, paged=True),
    description=ASYNC_DESCRIPTION,
    difficulty=4, predicted_speedup=9.8, valid=async_valid)  # H100: 9.8x B1, 19x B8

FAMILY = Family(name="paged_decode", make_task=make_task, templates=[OPS, SPLIT, TILES, FUSED, ASYNC],
                naive=lambda kind: naive_decode("paged_decode", kind, paged=True) if kind != "ops" else _render_ops({"gather": "take", "compile": False}, "ops"),
                description="single-token decode attention over a paged KV cache")
