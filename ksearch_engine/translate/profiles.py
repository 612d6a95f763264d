"""Kernel families the translator recognizes: the shapes of a kernel's arrays, where its sizes come from,
small default dims, and an MLX-ops `reference`.

A profile's `arrays` give the shape of each pointer parameter of the KERNEL, in order (dim names, or names
of the kernel's template parameters). Its `scalars` name the value of each scalar parameter of the HOST
launch function when there is a launch site (else of the kernel), in order: a dim name, or `=expr`, a Python
default (float parameters such as eps become keyword arguments of the wrapper). A profile applies only when
those counts match the code; otherwise the translator falls back to guessing and says so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Profile:
    family: str
    keywords: tuple[str, ...]
    arrays: list[tuple[str, ...]]
    scalars: list[str]
    dims: dict[str, int]
    reference: str
    bench_dims: dict[str, int] = field(default_factory=dict)
    init: dict[int, dict] = field(default_factory=dict)     # array index -> InputSpec init fields
    tolerance: float | None = None
    # (grid in blocks, block, shared bytes) as Python over the dims, used when the file has no launch site:
    # the usual launch for kernels of this family (one block per row, 16x16 tiles, ...)
    launch: tuple[str, str, str] | None = None
    kernel_scalars: list[str] | None = None   # like `scalars`, for the kernel's own parameters (no launch site)
    templates: dict[str, int] = field(default_factory=dict)   # usual template values when no launch gives them


PROFILES: list[Profile] = [
    Profile(
        family="paged_attention", launch=("_dim3(H, B)", "_dim3(32)", "0"), keywords=("paged",),
        arrays=[("B", "H", "D"), ("P", "S", "KVH", "D"), ("P", "S", "KVH", "D"), ("B", "MP"), ("B",), ("B", "H", "D")],
        scalars=["B", "H", "KVH", "S", "MP", "=1.0 / math.sqrt(q.shape[-1])"],
        kernel_scalars=["H", "KVH", "S", "MP", "=1.0 / math.sqrt(q.shape[-1])"], templates={"HEAD_DIM": 64},
        dims={"B": 2, "H": 4, "KVH": 2, "D": 64, "P": 8, "S": 4, "MP": 4},
        bench_dims={"B": 8, "H": 32, "KVH": 8, "D": 64, "P": 2048, "S": 16, "MP": 256},
        init={3: {"init": "randint", "low": 0, "high": "P"}, 4: {"init": "randint", "low": 1, "high": "MP*S+1"}},
        reference='''def reference(q, k_cache, v_cache, block_table, context_lens, scale=None):
    B, H, D = q.shape
    S, KVH = k_cache.shape[1], k_cache.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    outs = []
    for b in range(B):
        n = int(context_lens[b].item())
        pages = block_table[b, : (n + S - 1) // S]
        k = mx.repeat(k_cache[pages].reshape(-1, KVH, D)[:n], H // KVH, axis=1)   # (n, H, D)
        v = mx.repeat(v_cache[pages].reshape(-1, KVH, D)[:n], H // KVH, axis=1)
        s = (q[b][:, None, :] * k.transpose(1, 0, 2)).sum(-1) * scale             # (H, n)
        p = mx.softmax(s, axis=-1)
        outs.append((p[:, :, None] * v.transpose(1, 0, 2)).sum(1))
    return mx.stack(outs)
'''),
    Profile(
        family="attention", launch=("_dim3(_cdiv(LQ + 63, 64), BH)", "_dim3(64)", "0"), keywords=("flash_attention", "flash_attn", "attention", "sdpa"),
        arrays=[("BH", "LQ", "D"), ("BH", "LK", "D"), ("BH", "LK", "D"), ("BH", "LQ", "D")],
        scalars=["BH", "LQ", "LK", "=1.0 / math.sqrt(q.shape[-1])"],
        kernel_scalars=["LQ", "LK", "=1.0 / math.sqrt(q.shape[-1])"], templates={"HEAD_DIM": 64},
        dims={"BH": 2, "LQ": 40, "LK": 50, "D": 64},
        bench_dims={"BH": 32, "LQ": 1024, "LK": 1024, "D": 64},
        reference='''def reference(q, k, v, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.swapaxes(-1, -2)) * scale
    return mx.softmax(s, axis=-1) @ v
'''),
    Profile(
        family="mamba", launch=("_dim3(_cdiv(D + 127, 128), B)", "_dim3(128)", "0"), keywords=("selective_scan", "mamba", "ssm"),
        arrays=[("B", "L", "D"), ("B", "L", "D"), ("D", "N"), ("B", "L", "N"), ("B", "L", "N"), ("D",), ("B", "L", "D")],
        scalars=["B", "L", "D"], kernel_scalars=["L", "D"], templates={"NSTATE": 16},
        dims={"B": 2, "L": 12, "D": 40, "N": 16},
        bench_dims={"B": 1, "L": 2048, "D": 2048, "N": 16},
        init={1: {"init": "uniform", "low": 0.01, "high": 0.2}, 2: {"init": "uniform", "low": -1.0, "high": -0.1}},
        reference='''def reference(u, delta, A, Bm, Cm, Dskip):
    B, L, D = u.shape
    h = mx.zeros((B, D, A.shape[1]), dtype=mx.float32)
    ys = []
    for t in range(L):
        dt = delta[:, t, :, None]                                   # (B, D, 1)
        h = mx.exp(dt * A[None]) * h + dt * Bm[:, t, None, :] * u[:, t, :, None]
        ys.append((h * Cm[:, t, None, :]).sum(-1) + Dskip[None] * u[:, t])
    return mx.stack(ys, axis=1)
'''),
    Profile(
        family="moe", launch=("_dim3(_cdiv(T + 127, 128))", "_dim3(128)", "0"), keywords=("topk_routing", "moe", "router", "routing", "gating"),
        arrays=[("T", "E"), ("T", "TOPK"), ("T", "TOPK")],
        scalars=["T", "E"], templates={"TOPK": 2},
        dims={"T": 20, "E": 8},
        bench_dims={"T": 4096, "E": 64},
        reference='''def reference(logits):
    p = mx.softmax(logits, axis=-1)
    ids = mx.argsort(-p, axis=-1)[:, :TOPK]
    w = mx.take_along_axis(p, ids, axis=-1)
    return w / w.sum(axis=-1, keepdims=True), ids.astype(mx.int32)
'''),
    Profile(
        family="rmsnorm", launch=("_dim3(R)", "_dim3(128)", "4 * 4"), keywords=("rmsnorm", "rms_norm"),
        arrays=[("R", "C"), ("C",), ("R", "C")],
        scalars=["R", "C", "=1e-5"],
        dims={"R": 4, "C": 200},
        bench_dims={"R": 4096, "C": 4096},
        reference='''def reference(x, w, eps=1e-5):
    return mx.fast.rms_norm(x, w, eps)
'''),
    Profile(
        family="softmax", launch=("_dim3(R)", "_dim3(256)", "0"), keywords=("softmax",),
        arrays=[("R", "C"), ("R", "C")],
        scalars=["R", "C"],
        dims={"R": 4, "C": 300},
        bench_dims={"R": 4096, "C": 4096},
        reference='''def reference(x):
    return mx.softmax(x, axis=-1)
'''),
    Profile(
        family="matmul", launch=("_dim3(_cdiv(N + 15, 16), _cdiv(M + 15, 16))", "_dim3(16, 16)", "0"), keywords=("matmul", "gemm", "mm_tiled"),
        arrays=[("M", "K"), ("K", "N"), ("M", "N")],
        scalars=["M", "N", "K"],
        dims={"M": 20, "N": 24, "K": 40},
        bench_dims={"M": 2048, "N": 2048, "K": 2048},
        reference='''def reference(A, B):
    return A @ B
'''),
    Profile(
        family="gelu", launch=("_dim3(_cdiv(N + 255, 256))", "_dim3(256)", "0"), keywords=("gelu",),
        arrays=[("N",), ("N",)],
        scalars=["N"],
        dims={"N": 1000},
        bench_dims={"N": 1 << 24},
        reference='''def reference(x):
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + mx.tanh(c * (x + 0.044715 * x * x * x)))
'''),
]


def find_profile(kernel_name: str, path: str | None) -> Profile | None:
    """The family profile whose keywords match the kernel's name, else its file name, else its folder."""
    candidates = [kernel_name.lower()]
    if path:
        parts = re.split(r"[\\/]", path.lower())
        candidates.append(parts[-1])
        candidates += list(reversed(parts[:-1]))[:2]
    for text in candidates:
        for prof in PROFILES:
            if any(k in text for k in prof.keywords):
                return prof
    return None
