"""Shared GPU-bench helpers: load candidate modules, check them, time one call per eval + synchronize.

Timing follows NOTES.md (H200 section): one call per `mx.eval` + `mx.synchronize()` (MLX records each eval as
a CUDA graph; several calls in one eval run concurrently and under-report), input copies rotated so the working
set exceeds the ~50 MB L2, and for short kernels the GPU time read from torch.profiler (CUPTI sees MLX's kernels):
the sum of kernel durations per call. Both numbers are reported; GPU time is the headline.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
import types

import mlx.core as mx
import numpy as np

L2_BYTES = 120e6


def load(source: str, name: str = "candidate") -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def to_mx(task, arrays):
    out = []
    for spec, a in zip(task.inputs, arrays):
        x = mx.array(a)
        if spec.dtype == "float16":
            x = x.astype(mx.float16)
        elif spec.dtype == "bfloat16":
            x = x.astype(mx.bfloat16)
        out.append(x)
    mx.eval(*out)
    return out


def compare(task, got, expected, scale: float = 1.0) -> tuple[bool, float]:
    """(ok, worst excess over the task's tolerance) for output tuples; `scale` loosens it (long reductions)."""
    dts = {s.dtype for s in task.inputs}
    dt = "float16" if "float16" in dts else ("bfloat16" if "bfloat16" in dts else "float32")
    tol = task.tolerance(dt)
    worst = -math.inf
    if len(got) != len(expected):
        return False, math.inf
    for g, e in zip(got, expected):
        g = np.array(g.astype(mx.float32) if g.dtype in (mx.float16, mx.bfloat16) else g, dtype=np.float64)
        e = np.array(e.astype(mx.float32) if e.dtype in (mx.float16, mx.bfloat16) else e, dtype=np.float64)
        if g.shape != e.shape:
            return False, math.inf
        err = np.abs(g - e) - (tol.atol + tol.rtol * np.abs(e)) * scale
        if np.isnan(g).any() and not np.isnan(e).any():
            return False, math.inf
        worst = max(worst, float(np.nanmax(err)) if err.size else -math.inf)
    return worst <= 0, worst


def input_sets(task, workload, seed: int = 1234):
    arrays = task.make_inputs(workload, seed)
    nbytes = sum(a.nbytes for a in arrays)
    copies = max(1, min(64, math.ceil(L2_BYTES / max(nbytes, 1))))
    base = to_mx(task, arrays)
    sets = [base] + [[x + 0 for x in base] for _ in range(copies - 1)]  # distinct buffers, same values
    for s in sets:
        mx.eval(*s)
    return sets, nbytes


def wall_ms(fn, sets, repeats: int) -> list[float]:
    ts = []
    for i in range(repeats):
        xs = sets[i % len(sets)]
        t0 = time.perf_counter()
        mx.eval(*as_tuple(fn(*xs)))
        mx.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def kernel_events(prof) -> list[dict]:
    """The GPU kernel records (name, dur in us) of a finished torch.profiler session."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            ev = json.load(f).get("traceEvents", [])
    finally:
        os.unlink(path)
    return [e for e in ev if e.get("cat") == "kernel" and "dur" in e]


class GpuTimer:
    """GPU kernel time per call through torch.profiler (CUPTI); unavailable -> None."""

    def __init__(self):
        self.ok = False
        self.why = ""
        self.last_kernels: dict[str, float] = {}
        try:
            import torch  # noqa: F401
            from torch.profiler import ProfilerActivity, profile  # noqa: F401
            self.ok = True
        except Exception as e:  # noqa: BLE001
            self.why = f"torch.profiler unavailable: {type(e).__name__}: {e}"

    def per_call_ms(self, fn, sets, repeats: int) -> tuple[float | None, int]:
        if not self.ok:
            return None, 0
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(repeats):
                mx.eval(*as_tuple(fn(*sets[i % len(sets)])))
                mx.synchronize()
        kern = kernel_events(prof)
        if not kern:
            self.last_kernels = {}
            return None, 0
        # per kernel name, its GPU ms per call (a split pass vs its merge kernel, say)
        by: dict[str, float] = {}
        for e in kern:
            n = str(e.get("name", "?"))[:120]
            by[n] = by.get(n, 0.0) + float(e["dur"]) / 1e3 / repeats
        self.last_kernels = by
        return sum(float(e["dur"]) for e in kern) / 1e3 / repeats, len(kern) // max(repeats, 1)


def measure(fn, sets, gpu: GpuTimer, budget_s: float = 1.5, max_repeats: int = 50) -> dict:
    for i in range(2):  # warm-up (compiles, allocator)
        mx.eval(*as_tuple(fn(*sets[i % len(sets)])))
    mx.synchronize()
    first = wall_ms(fn, sets, 1)[0]
    reps = int(max(3, min(max_repeats, budget_s * 1e3 / max(first, 1e-3) / 2)))
    w = wall_ms(fn, sets, reps)
    g, nk = gpu.per_call_ms(fn, sets, reps)
    med = statistics.median(w)
    q = np.percentile(w, [25, 75])
    out = {"wall_ms": med, "wall_iqr_ms": float(q[1] - q[0]), "gpu_ms": g, "kernels_per_call": nk, "repeats": reps}
    per = getattr(gpu, "last_kernels", {})
    if len(per) > 1:   # several kernels a call: each one's share
        out["kernel_ms"] = {n: round(v, 5) for n, v in per.items()}
    return out


# -- torch's op on the same tensors: the peer column of bench/families.py and bench/headline.py ---------------------
def torch_gpu_ms(fn, n_sets: int, repeats: int = 30) -> float | None:
    """GPU kernel time per call of a torch function (profiler), one call per synchronize, inputs rotated."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for i in range(3):
        fn(i % n_sets)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(repeats):
            fn(i % n_sets)
            torch.cuda.synchronize()
    kern = kernel_events(prof)
    return sum(float(e["dur"]) for e in kern) / 1e3 / repeats if kern else None


def _to_torch(x):
    import torch
    if x.dtype in (mx.float16, mx.bfloat16):
        t = torch.from_numpy(np.array(x.astype(mx.float32))).cuda()
        return t.half() if x.dtype == mx.float16 else t.bfloat16()
    return torch.from_numpy(np.array(x)).cuda()


def _peer_fns(family: str, ts):
    """(function of a set index, the op's name) for the family's torch peer, or (None, why)."""
    import torch
    import torch.nn.functional as tf

    if family == "softmax":
        return (lambda i: torch.softmax(ts[i][0], dim=-1)), "torch.softmax"
    if family == "layernorm":
        return (lambda i: tf.layer_norm(ts[i][0], ts[i][0].shape[-1:], ts[i][1], ts[i][2], 1e-5)), "F.layer_norm"
    if family == "rmsnorm":
        return (lambda i: tf.rms_norm(ts[i][0], ts[i][0].shape[-1:], ts[i][1], 1e-5)), "F.rms_norm"
    if family == "moe_gating":
        def gate(i):
            logits, k_slots, renorm = ts[i]
            w, e = torch.topk(torch.softmax(logits.float(), dim=-1), k_slots.shape[0], dim=-1)
            return (w / w.sum(-1, keepdim=True) if float(renorm[0]) else w), e
        return gate, "torch.softmax + torch.topk"
    if family == "decode":
        def dec(i):
            q, k, v = ts[i]
            return tf.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])
        return dec, "torch sdpa (enable_gqa)"
    if family.startswith("attention"):
        causal = family.endswith("causal")

        def att(i):
            q, k, v, _ = ts[i]
            return tf.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
        return att, "torch sdpa"
    if family in ("paged", "paged_decode"):
        def paged(i):
            q, kp, vp, bt = ts[i]
            B, nb = bt.shape
            _, Hkv, P, Dh = kp.shape
            k = kp[bt.long().reshape(-1)].reshape(B, nb, Hkv, P, Dh).transpose(1, 2).reshape(B, Hkv, nb * P, Dh)
            v = vp[bt.long().reshape(-1)].reshape(B, nb, Hkv, P, Dh).transpose(1, 2).reshape(B, Hkv, nb * P, Dh)
            return tf.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return paged, "torch index pages + sdpa"
    if family == "moe":
        if not hasattr(torch, "_grouped_mm"):
            return None, "torch has no _grouped_mm"

        def moe(i):
            x, w, route = ts[i]
            E = w.shape[0]
            idx = (route % E).reshape(-1)
            order = torch.argsort(idx)
            offs = torch.cumsum(torch.bincount(idx, minlength=E), 0).to(torch.int32)
            return torch._grouped_mm(x[order // route.shape[1]], w.transpose(-2, -1), offs=offs)
        return moe, "torch._grouped_mm (sorted)"
    return None, "no torch op for this family"


def torch_peer(family: str, sets, repeats: int = 30) -> tuple[float | None, str]:
    """torch's op on the same tensors as the MLX sets: (GPU ms per call, the op's name); None where there is none."""
    try:
        import torch  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return None, f"no torch: {e}"
    fn, name = _peer_fns(family, [[_to_torch(x) for x in s] for s in sets])
    if fn is None:
        return None, name
    try:
        return torch_gpu_ms(fn, len(sets), repeats=5 if family == "moe" else repeats), name
    except Exception as e:  # noqa: BLE001
        return None, f"{name} failed: {type(e).__name__}: {str(e)[:200]}"
