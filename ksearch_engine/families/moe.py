"""MoE expert matmul (one SwitchLinear): y[t, k] = w[idx[t, k]] @ x[t] for the k experts routed to each token.

Inputs x (T, D) fp16, w (E, O, D) fp16 (experts' weights as stored), route (T, K) int32 whose value mod E is the
expert (so one generator serves every E). Output (T, K, O) fp16.
Baseline: mlx-lm's SwitchGLU path: sort the (token, slot) pairs by expert, `mx.gather_mm(..., sorted_indices=True)`,
unsort. Templates: MLX-ops variants (sorted / unsorted gather_mm, or every expert densely then a gather: more
FLOPs but dense GEMMs), and a GEMV-style kernel (a warp per (row, block of output columns), lanes over D).
"""
from __future__ import annotations

from ._src import Dialect, header, kernel_ctor, tag
from ._moe_gemm import gemm_valid, render_grouped
from .base import Family, Template
from ..task import InputSpec, KernelTask, Workload

REFERENCE = '''import mlx.core as mx

def reference(x, w, route):
    # expert by expert: gathering each token's (K, O, D) weights would need T*K*O*D floats (1.9 TB at Mixtral's
    # shapes); this needs T*K*O
    idx = route % w.shape[0]
    xf = x.astype(mx.float32)
    y = mx.zeros((*idx.shape, w.shape[1]), dtype=mx.float32)
    for e in range(w.shape[0]):
        ye = xf @ w[e].astype(mx.float32).T                           # (T, O): every token through expert e
        y = y + mx.where((idx == e)[..., None], ye[:, None, :], 0.0)
    return y.astype(x.dtype)
'''
BASELINE = '''import mlx.core as mx

def baseline(x, w, route):
    idx = route % w.shape[0]
    T, K = idx.shape
    flat = idx.reshape(-1)
    order = mx.argsort(flat)
    inv = mx.argsort(order)
    dt = mx.float32 if mx.default_device() == mx.cpu else x.dtype   # MLX's CPU gather_mm is float32-only
    xs = mx.take(x, order // K, axis=0)[:, None, :].astype(dt)
    y = mx.gather_mm(xs, w.astype(dt).swapaxes(-1, -2), rhs_indices=flat[order], sorted_indices=True)
    return mx.take(y[:, 0, :], inv, axis=0).reshape(T, K, -1).astype(x.dtype)
'''
SMALL = [Workload(name="t9_e4_k2_d64_o48", dims={"T": 9, "E": 4, "K": 2, "D": 64, "O": 48}),
         Workload(name="t5_e6_k3_d40_o20", dims={"T": 5, "E": 6, "K": 3, "D": 40, "O": 20}),
         # 40 rows per expert: fills more than one 16-row MMA fragment (rows g + 8 of the fragment layout)
         Workload(name="t40_e2_k2_d32_o24", dims={"T": 40, "E": 2, "K": 2, "D": 32, "O": 24})]
BENCH = [Workload(name="mixtral_t4096_e8_k2_d4096_o14336", dims={"T": 4096, "E": 8, "K": 2, "D": 4096, "O": 14336}),
         Workload(name="qwen15moe_t4096_e60_k4_d2048_o1408", dims={"T": 4096, "E": 60, "K": 4, "D": 2048, "O": 1408})]


def make_task(dtype: str = "float16") -> KernelTask:
    inputs = [InputSpec(name="x", shape=["T", "D"], dtype=dtype, init="normal", low=-0.5, high=0.5),
              InputSpec(name="w", shape=["E", "O", "D"], dtype=dtype, init="normal", low=-0.1, high=0.1),
              InputSpec(name="route", shape=["T", "K"], dtype="int32", init="randint", low=0, high=1 << 20)]
    return KernelTask(name="moe", family="moe", description=__doc__.strip().splitlines()[0], inputs=inputs,
                      outputs=["y"], reference=REFERENCE, baseline=BASELINE,
                      baseline_name="mlx-lm SwitchLinear: sort + gather_mm", workloads=SMALL, bench_workloads=BENCH,
                      seeds=[0, 1])


def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("moe.ops renders ops candidates only")
    m = k["method"]
    if m == "sorted":
        body = BASELINE.split("\n", 2)[2].replace("def baseline(x, w, route)", "def _moe(x, w, route)")
    elif m == "unsorted":
        body = ("def _moe(x, w, route):\n    idx = route % w.shape[0]\n"
                "    dt = mx.float32 if mx.default_device() == mx.cpu else x.dtype   # CPU gather_mm: float32 only\n"
                "    y = mx.gather_mm(x[:, None, None, :].astype(dt), w.astype(dt).swapaxes(-1, -2), rhs_indices=idx)\n"
                "    return y[:, :, 0, :].astype(x.dtype)\n")
    else:  # dense: every expert for every token, then keep the routed ones
        body = ("def _moe(x, w, route):\n    E, O, D = w.shape\n    idx = route % E\n"
                "    y = (x @ w.reshape(E * O, D).T).reshape(x.shape[0], E, O)\n"
                "    return mx.take_along_axis(y, idx[:, :, None], axis=1)\n")
    src = header("moe", "moe.ops", k, kind) + "\n\n" + body
    return src + ("\n\nkernel = mx.compile(_moe)\n" if k["compile"] else "\n\nkernel = _moe\n")


def _source(kind: str, k: dict) -> str:
    d = Dialect(kind)
    cpw, vec, wpg = k["cols_per_warp"], k["vec"], k["warps_per_group"]
    wptr = "device const T*" if d.metal else "const T*"
    return "\n".join([
        f"constexpr int CPW = {cpw};", f"constexpr int VEC = {vec};", f"constexpr int WPG = {wpg};",
        "constexpr int CB = (NO + CPW - 1) / CPW;        // column blocks per row",
        f"const int warp = {d.bid()} * WPG + {d.tid()} / 32;", f"const int lane = {d.tid()} % 32;",
        "const bool live = warp < NR * CB;",
        "const int r = live ? warp / CB : 0;            // row = (token, slot)",
        "const int c0 = (live ? warp % CB : 0) * CPW;",
        "const int e = route[r] % NE;",
        f"{wptr} xr = x + (size_t)(r / KS) * ND;",
        "float acc[CPW];",
        "for (int j = 0; j < CPW; ++j) acc[j] = 0.0f;",
        "for (int d0 = lane * VEC; d0 < ND; d0 += 32 * VEC) {",
        "  float xv[VEC];",
        "  for (int v = 0; v < VEC; ++v) xv[v] = (d0 + v < ND) ? static_cast<float>(xr[d0 + v]) : 0.0f;",
        "  for (int j = 0; j < CPW; ++j) {",
        "    const int c = c0 + j;",
        "    if (c >= NO) break;",
        f"    {wptr} wr = w + ((size_t)e * NO + c) * ND;",
        "    for (int v = 0; v < VEC; ++v) if (d0 + v < ND) acc[j] += xv[v] * static_cast<float>(wr[d0 + v]);",
        "  }", "}",
        "for (int j = 0; j < CPW; ++j) {",
        f"  for (int o = 16; o > 0; o /= 2) acc[j] += {d.shfl_xor('acc[j]', 'o')};",
        "  if (live && lane == 0 && c0 + j < NO) y[(size_t)r * NO + c0 + j] = static_cast<T>(acc[j]);",
        "}",
    ])


def _render_kernel(k: dict, kind: str) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError("moe.gemv_rows renders metal or cuda candidates")
    cpw, wpg = k["cols_per_warp"], k["warps_per_group"]
    return f'''{header("moe", "moe.gemv_rows", k, kind)}
_SOURCE = r"""
{_source(kind, k)}
"""
_HEADER = ""
_K = {kernel_ctor(kind, tag("moe.gemv_rows", k, kind), ["x", "w", "route"], ["y"])}


def kernel(x, w, route):
    T, D = x.shape
    E, O, _ = w.shape
    K = route.shape[1]
    warps = T * K * ((O + {cpw} - 1) // {cpw})
    groups = (warps + {wpg} - 1) // {wpg}
    y = _K(inputs=[x, w, route], template=[("T", x.dtype), ("NR", T * K), ("ND", D), ("NO", O), ("KS", K), ("NE", E)],
           grid=(groups * {wpg * 32}, 1, 1), threadgroup=({wpg * 32}, 1, 1),
           output_shapes=[(T * K, O)], output_dtypes=[x.dtype])[0]
    return y.reshape(T, K, O)
'''


OPS = Template(id="moe.ops", pattern="moe.grouped_gemm", kinds=("ops",),
               knobs={"method": ["sorted", "unsorted", "dense"], "compile": [False, True]}, render=_render_ops,
               description="gather_mm sorted by expert (mlx-lm), unsorted, or dense over all experts",
               difficulty=1, predicted_speedup=1.0)
GEMV = Template(
    id="moe.gemv_rows", pattern="matmul.gemv_simd_rows", kinds=("metal", "cuda"),
    knobs={"cols_per_warp": [4, 1, 2, 8], "vec": [4, 1, 2, 8], "warps_per_group": [4, 2, 8]},
    render=_render_kernel, description="a warp per (row, CPW output columns), lanes over D, no weight reuse across rows",
    difficulty=2, predicted_speedup=0.3)

GROUPED = Template(
    id="moe.grouped_mma", pattern="moe.grouped_gemm", kinds=("cuda",),
    knobs={"block_m": [128, 64, 256], "block_n": [128, 64, 256], "block_k": [32, 64, 16], "warps_m": [2, 4, 1],
           "warps_n": [4, 2, 8], "group_m": [8, 4, 16, 1]},
    render=render_grouped,
    description="grouped GEMM over the pairs sorted by expert on tensor cores (mma.sync m16n8k16 inline PTX, fp32 "
                "accumulation), rows gathered through the sort order in the kernel, register-staged double buffer, "
                "results written to their (token, slot) rows",
    difficulty=4, predicted_speedup=3.0, valid=gemm_valid)

FAMILY = Family(name="moe", make_task=make_task, templates=[OPS, GEMV, GROUPED],
                naive=lambda kind: _render_kernel({"cols_per_warp": 1, "vec": 1, "warps_per_group": 1}, kind)
                if kind != "ops" else _render_ops({"method": "unsorted", "compile": False}, "ops"),
                description="MoE expert matmul (SwitchLinear)")
