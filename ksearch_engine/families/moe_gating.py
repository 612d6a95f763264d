"""MoE router gating: softmax over E experts, the top k (sorted by weight, ties to the lower index),
optionally renormalized over the k (Mixtral; Qwen1.5-MoE does not).

Inputs: logits (T, E) fp32; k_slots (K,) int32 — its length is k (templates read k from it); renorm (1,)
fp32, 1 to renormalize. Outputs: weights (T, K) fp32, experts (T, K) int32. Baseline: mlx-lm's router,
`mx.softmax` + `mx.argpartition` + `mx.take_along_axis` (its k come unsorted).
"""
from __future__ import annotations

from ._src import Dialect, header, kernel_ctor, tag
from .base import Family, Template
from ..task import InputSpec, KernelTask, Workload

REFERENCE = '''import mlx.core as mx

def reference(logits, k_slots, renorm):
    K = k_slots.shape[0]
    p = mx.softmax(logits.astype(mx.float32), axis=-1)
    idx = mx.argsort(-p, axis=-1)[:, :K]
    w = mx.take_along_axis(p, idx, axis=-1)
    w = mx.where(renorm[0] > 0, w / w.sum(axis=-1, keepdims=True), w)
    return w, idx.astype(mx.int32)
'''
BASELINE = '''import mlx.core as mx

def baseline(logits, k_slots, renorm):
    K = k_slots.shape[0]
    gates = mx.softmax(logits, axis=-1, precise=True)
    inds = mx.argpartition(-gates, kth=K - 1, axis=-1)[..., :K]
    scores = mx.take_along_axis(gates, inds, axis=-1)
    scores = mx.where(renorm[0] > 0, scores / scores.sum(axis=-1, keepdims=True), scores)
    return scores, inds
'''
SMALL = [Workload(name="t37_e8_k2", dims={"T": 37, "E": 8, "K": 2}),
         Workload(name="t20_e60_k4", dims={"T": 20, "E": 60, "K": 4})]
BENCH = [Workload(name="mixtral_t4096_e8_k2", dims={"T": 4096, "E": 8, "K": 2}),
         Workload(name="qwen15moe_t4096_e60_k4", dims={"T": 4096, "E": 60, "K": 4})]


def make_task(renormalize: bool = False) -> KernelTask:
    inputs = [InputSpec(name="logits", shape=["T", "E"], init="normal", low=-3.0, high=3.0),
              InputSpec(name="k_slots", shape=["K"], dtype="int32", init="arange"),
              InputSpec(name="renorm", shape=[1], init="ones" if renormalize else "zeros")]
    return KernelTask(name="moe_gating", family="moe", description=__doc__.strip().splitlines()[0], inputs=inputs,
                      outputs=["weights", "experts"], reference=REFERENCE, baseline=BASELINE,
                      baseline_name="mlx-lm router: softmax + argpartition", workloads=SMALL, bench_workloads=BENCH,
                      seeds=[0, 1])


def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("moe_gating.ops renders ops candidates only")
    if k["method"] == "argsort":
        sel = "    idx = mx.argsort(-p, axis=-1)[:, :K]\n    w = mx.take_along_axis(p, idx, axis=-1)\n"
    elif k["method"] == "argpartition":
        sel = ("    part = mx.argpartition(-p, kth=K - 1, axis=-1)[:, :K]\n"
               "    pv = mx.take_along_axis(p, part, axis=-1)\n"
               "    order = mx.argsort(-pv, axis=-1)          # sort only the k\n"
               "    idx = mx.take_along_axis(part, order, axis=-1)\n    w = mx.take_along_axis(pv, order, axis=-1)\n")
    else:  # k passes of argmax over the logits (softmax is monotone), masking each winner
        sel = ("    z = logits\n    ids, ws = [], []\n    for _ in range(K):\n"
               "        i = mx.argmax(z, axis=-1, keepdims=True)\n        ids.append(i)\n"
               "        ws.append(mx.take_along_axis(p, i, axis=-1))\n"
               "        z = mx.where(mx.arange(z.shape[-1]) == i, -mx.inf, z)\n"
               "    idx = mx.concatenate(ids, axis=-1)\n    w = mx.concatenate(ws, axis=-1)\n")
    body = f'''

def _gate(logits, k_slots, renorm):
    K = k_slots.shape[0]
    p = mx.softmax(logits.astype(mx.float32), axis=-1, precise=True)
{sel}    w = mx.where(renorm[0] > 0, w / w.sum(axis=-1, keepdims=True), w)
    return w, idx.astype(mx.int32)
'''
    src = header("moe_gating", "moe_gating.ops", k, kind) + body
    return src + ("\n\nkernel = mx.compile(_gate)\n" if k["compile"] else "\n\nkernel = _gate\n")


def _kernel_source(kind: str, k: dict) -> str:
    d = Dialect(kind, fast_math=k["fast_exp"])
    lpt = k["lanes_per_token"]
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    red_max = [f"for (int o = LPT / 2; o > 0; o /= 2) m = {d.fmax('m', d.shfl_xor('m', 'o'))};"]
    red_sum = [f"for (int o = LPT / 2; o > 0; o /= 2) s += {d.shfl_xor('s', 'o')};"]
    argmax = ["for (int o = LPT / 2; o > 0; o /= 2) {",
              f"  const float ov = {d.shfl_xor('bv', 'o')};", f"  const int oi = {d.shfl_xor('bi', 'o')};",
              "  if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }", "}"]
    return "\n".join([
        f"constexpr int LPT = {lpt};", "constexpr int EPT = (NE + LPT - 1) / LPT;",
        f"const int g = {gid};", "const int tok = g / LPT;", "const int lane = g % LPT;",
        "const bool live = tok < NT;", "const size_t row = (size_t)(live ? tok : 0) * NE;",
        "float v[EPT];",
        f"float m = {d.neg_inf};",
        "for (int i = 0; i < EPT; ++i) {           // expert e = i * LPT + lane: coalesced across lanes",
        "  const int e = i * LPT + lane;",
        f"  v[i] = (e < NE) ? logits[row + e] : {d.neg_inf};",
        f"  m = {d.fmax('m', 'v[i]')};", "}",
        *red_max,
        "float s = 0.0f;",
        f"for (int i = 0; i < EPT; ++i) if (i * LPT + lane < NE) s += {d.exp('v[i] - m')};",
        *red_sum,
        "const float inv = 1.0f / s;",
        "float wsel[KS]; int isel[KS]; float wsum = 0.0f;",
        "for (int r = 0; r < KS; ++r) {",
        f"  float bv = {d.neg_inf}; int bi = 1 << 30;",
        "  for (int i = 0; i < EPT; ++i) {",
        "    const int e = i * LPT + lane;",
        "    if (e < NE && (v[i] > bv || (v[i] == bv && e < bi))) { bv = v[i]; bi = e; }", "  }",
        *["  " + ln for ln in argmax],
        f"  wsel[r] = {d.exp('bv - m')} * inv; isel[r] = bi; wsum += wsel[r];",
        f"  if (bi % LPT == lane) v[bi / LPT] = {d.neg_inf};    // the owner masks the winner",
        "}",
        "const float scale = (renorm[0] > 0.0f) ? 1.0f / wsum : 1.0f;",
        "if (live && lane == 0) {",
        "  for (int r = 0; r < KS; ++r) { weights[(size_t)tok * KS + r] = wsel[r] * scale; experts[(size_t)tok * KS + r] = isel[r]; }",
        "}",
    ])


def _render_kernel(k: dict, kind: str) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError("moe_gating.k_passes renders metal or cuda candidates")
    tpg, lpt = k["threads_per_group"], k["lanes_per_token"]
    return f'''{header("moe_gating", "moe_gating.k_passes", k, kind)}
_SOURCE = r"""
{_kernel_source(kind, k)}
"""
_HEADER = ""
_K = {kernel_ctor(kind, tag("moe_gating.k_passes", k, kind), ["logits", "k_slots", "renorm"], ["weights", "experts"])}


def kernel(logits, k_slots, renorm):
    T, E = logits.shape
    K = k_slots.shape[0]
    n = T * {lpt}
    return tuple(_K(inputs=[logits, k_slots, renorm], template=[("NT", T), ("NE", E), ("KS", K)],
                    grid=(((n + {tpg} - 1) // {tpg}) * {tpg}, 1, 1), threadgroup=({tpg}, 1, 1),
                    output_shapes=[(T, K), (T, K)], output_dtypes=[mx.float32, mx.int32]))
'''


OPS = Template(id="moe_gating.ops", pattern="moe.ops_topk", kinds=("ops",),
               knobs={"method": ["argpartition", "argsort", "k_argmax"], "compile": [False, True]},
               render=_render_ops, description="top-k in MLX ops", difficulty=1, predicted_speedup=1.0)
KPASS = Template(
    id="moe_gating.k_passes", pattern="moe.topk_k_passes", kinds=("metal", "cuda"),
    knobs={"lanes_per_token": [8, 4, 16, 32, 1], "threads_per_group": [128, 64, 256], "fast_exp": [False, True]},
    render=_render_kernel,
    description="LPT lanes per token hold its logits; softmax sums and k argmax passes by shuffles; one kernel",
    difficulty=2, predicted_speedup=5.0, valid=lambda k: k["threads_per_group"] % 32 == 0)

FAMILY = Family(name="moe_gating", make_task=make_task, templates=[OPS, KPASS],
                naive=lambda kind: _render_kernel({"lanes_per_token": 1, "threads_per_group": 64, "fast_exp": False}, kind)
                if kind != "ops" else _render_ops({"method": "argsort", "compile": False}, "ops"),
                description="MoE router softmax + top-k")
