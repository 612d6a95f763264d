"""Mamba-2 SSD (state-space duality) scan, prefill.

Per head h (group g = h // (H/G)), state (P, N):
    h_t = exp(dt_t * A_h) * h_(t-1) + dt_t * x_t (outer) B_t,     y_t = h_t C_t + D_h * x_t
Inputs x (batch, L, H, P), dt (batch, L, H) positive, A (H,) negative, B/C (batch, L, G, N), D (H,); fp32.
Baseline: the chunked SSD formulation in MLX ops that mlx-lm's `ssm_attn` uses (intra-chunk masked matmuls, a
short recurrence over chunk states). Templates: the same in ops with a chunk knob, kernels with the state
in registers (N/SPT lanes per (head, p) row, C.h reduced by shuffles, inputs loaded a chunk of steps at a time),
and the chunked algorithm as three kernels (_ssd_chunked.py: chunk end states + C B^T per chunk, a carry over
chunks, intra-chunk scores + inter-chunk term), with fp32 CUDA-core GEMMs (ssd.chunked_kernels, CUDA and Metal)
or tensor-core 3xTF32 GEMMs (ssd.chunked_mma, CUDA).
"""
from __future__ import annotations

from ._src import Dialect, header, kernel_ctor, tag
from ._ssd_chunked import chunked_valid, render_chunked, render_chunked_mma
from .base import Family, Template
from ..task import InputSpec, KernelTask, Workload

INPUTS = ["x", "dt", "A", "B", "C", "D"]
REFERENCE = '''import mlx.core as mx

def reference(x, dt, A, B, C, D):
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    rep = H // G
    Bh, Ch = mx.repeat(B, rep, axis=2), mx.repeat(C, rep, axis=2)
    h = mx.zeros((b, H, P, N), dtype=mx.float32)
    ys = []
    for t in range(L):
        d = dt[:, t, :, None, None]
        h = mx.exp(d * A[:, None, None]) * h + d * x[:, t, :, :, None] * Bh[:, t, :, None, :]
        ys.append((h * Ch[:, t, :, None, :]).sum(axis=-1) + D[:, None] * x[:, t])
    return mx.stack(ys, axis=1)
'''

_CHUNKED = '''
def _ssd(x, dt, A, B, C, D):
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    T = CHUNK
    nc = (L + T - 1) // T
    pad = nc * T - L
    Bh, Ch = mx.repeat(B, H // G, axis=2), mx.repeat(C, H // G, axis=2)
    u = dt[..., None] * x
    if pad:  # dt = 0 past the end: decay 1, no input; the padded outputs are dropped
        u = mx.concatenate([u, mx.zeros((b, pad, H, P), u.dtype)], axis=1)
        dtp = mx.concatenate([dt, mx.zeros((b, pad, H), dt.dtype)], axis=1)
        Bh = mx.concatenate([Bh, mx.zeros((b, pad, H, N), Bh.dtype)], axis=1)
        Ch = mx.concatenate([Ch, mx.zeros((b, pad, H, N), Ch.dtype)], axis=1)
    else:
        dtp = dt
    # (b, c, h, T, .) layout
    u = u.reshape(b, nc, T, H, P).transpose(0, 1, 3, 2, 4)
    Bc = Bh.reshape(b, nc, T, H, N).transpose(0, 1, 3, 2, 4)
    Cc = Ch.reshape(b, nc, T, H, N).transpose(0, 1, 3, 2, 4)
    acum = mx.cumsum((dtp * A).reshape(b, nc, T, H).transpose(0, 1, 3, 2), axis=-1)     # (b, c, h, T)
    seg = acum[..., :, None] - acum[..., None, :]
    causal = mx.arange(T)[:, None] >= mx.arange(T)[None, :]
    Lmat = mx.exp(mx.where(causal, seg, -mx.inf))                                      # decay s -> t within a chunk
    y = ((Cc @ Bc.swapaxes(-1, -2)) * Lmat) @ u                                        # intra-chunk
    decay_out = mx.exp(acum[..., -1:] - acum)                                          # s -> chunk end
    states = (Bc * decay_out[..., None]).swapaxes(-1, -2) @ u                          # (b, c, h, N, P)
    chunk_decay = mx.exp(acum[..., -1])                                                # (b, c, h)
    carry = mx.zeros((b, H, N, P), dtype=mx.float32)
    carries = []
    for c in range(nc):
        carries.append(carry)
        carry = chunk_decay[:, c, :, None, None] * carry + states[:, c]
    hin = mx.stack(carries, axis=1)                                                    # state entering each chunk
    y = y + (Cc * mx.exp(acum)[..., None]) @ hin                                       # inter-chunk
    y = y.transpose(0, 1, 3, 2, 4).reshape(b, nc * T, H, P)[:, :L]
    return y + D[:, None] * x
'''
BASELINE = "import mlx.core as mx\n\nCHUNK = 128\n" + _CHUNKED + "\n\ndef baseline(*args):\n    return _ssd(*args)\n"


def make_task() -> KernelTask:
    inputs = [InputSpec(name="x", shape=["Bt", "L", "H", "P"], init="normal"),
              InputSpec(name="dt", shape=["Bt", "L", "H"], init="positive", low=0.01, high=0.3),
              InputSpec(name="A", shape=["H"], init="uniform", low=-4.0, high=-0.5),
              InputSpec(name="B", shape=["Bt", "L", "G", "N"], init="normal"),
              InputSpec(name="C", shape=["Bt", "L", "G", "N"], init="normal"),
              InputSpec(name="D", shape=["H"], init="uniform")]
    small = [Workload(name="b1_l37_h4_p8_g2_n16", dims={"Bt": 1, "L": 37, "H": 4, "P": 8, "G": 2, "N": 16}),
             Workload(name="b2_l20_h2_p4_g1_n32", dims={"Bt": 2, "L": 20, "H": 2, "P": 4, "G": 1, "N": 32})]
    bench = [Workload(name="mamba2_b1_l4096_h32_p64_n128", dims={"Bt": 1, "L": 4096, "H": 32, "P": 64, "G": 1, "N": 128})]
    return KernelTask(name="ssd", family="scan", description="Mamba-2 SSD scan (prefill)", inputs=inputs, outputs=["y"],
                      reference=REFERENCE, baseline=BASELINE, baseline_name="chunked SSD in MLX ops (mlx-lm ssm_attn style)",
                      workloads=small, bench_workloads=bench, seeds=[0, 1],
                      tolerances={"float32": {"atol": 3e-4, "rtol": 3e-4}})


def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("ssd.ops_chunked renders ops candidates only")
    src = header("ssd", "ssd.ops_chunked", k, kind) + f"\nCHUNK = {k['chunk']}\n" + _CHUNKED
    return src + ("\n\nkernel = mx.compile(_ssd)\n" if k["compile"] else "\n\nkernel = _ssd\n")


def _source(kind: str, k: dict) -> str:
    d = Dialect(kind, fast_math=k["fast_exp"])
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    return "\n".join([
        f"constexpr int TCH = {k['chunk']};",
        "constexpr int LPR = NST / SPT;                 // lanes per (head, p) row: a power of two <= 32",
        f"const int g = {gid};",
        "const bool live = g < BATCH * NH * HP * LPR;",
        "const int gg = live ? g : 0;",
        "const int row = gg / LPR;", "const int sub = gg % LPR;",
        "const int p = row % HP;", "const int hh = (row / HP) % NH;", "const int b = row / (HP * NH);",
        "const int grp = hh / (NH / NG);",
        "const float ah = A[hh];", "const float dd = D[hh];",
        "float h[SPT];", "for (int j = 0; j < SPT; ++j) h[j] = 0.0f;",
        "for (int t0 = 0; t0 < SEQ; t0 += TCH) {",
        "  float dl[TCH]; float xv[TCH]; float bv[TCH * SPT]; float cv[TCH * SPT];",
        "  for (int i = 0; i < TCH; ++i) {",
        "    const int t = t0 + i;", "    const bool in = t < SEQ;",
        "    const size_t bt = (size_t)b * SEQ + (in ? t : 0);",
        "    dl[i] = in ? dt[bt * NH + hh] : 0.0f;",
        "    xv[i] = in ? x[(bt * NH + hh) * HP + p] : 0.0f;",
        "    for (int j = 0; j < SPT; ++j) {",
        "      bv[i * SPT + j] = B[(bt * NG + grp) * NST + sub * SPT + j];",
        "      cv[i * SPT + j] = C[(bt * NG + grp) * NST + sub * SPT + j];", "    }", "  }",
        "  for (int i = 0; i < TCH; ++i) {",
        f"    const float da = {d.exp('dl[i] * ah')};",
        "    const float dx = dl[i] * xv[i];", "    float yp = 0.0f;",
        "    for (int j = 0; j < SPT; ++j) { h[j] = da * h[j] + dx * bv[i * SPT + j]; yp += cv[i * SPT + j] * h[j]; }",
        f"    for (int o = LPR / 2; o > 0; o /= 2) yp += {d.shfl_xor('yp', 'o')};",
        "    const int t = t0 + i;",
        "    if (live && sub == 0 && t < SEQ) y[(((size_t)b * SEQ + t) * NH + hh) * HP + p] = yp + dd * xv[i];",
        "  }", "}",
    ])


def _render_kernel(k: dict, kind: str) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError("ssd.registers renders metal or cuda candidates")
    tpg = k["threads_per_group"]
    return f'''{header("ssd", "ssd.registers", k, kind)}
_SOURCE = r"""
{_source(kind, k)}
"""
_HEADER = ""
_K = {kernel_ctor(kind, tag("ssd.registers", k, kind), INPUTS, ["y"])}
SPT = {k["states_per_thread"]}


def kernel(x, dt, A, B, C, D):
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    if N & (N - 1):
        raise ValueError(f"ssd.registers needs a power-of-two state size N, got {{N}}")
    spt = min(max(SPT, N // 32), N)        # at most 32 lanes per row, at most N states per lane
    total = b * H * P * (N // spt)
    return _K(inputs=[x, dt, A, B, C, D],
              template=[("BATCH", b), ("SEQ", L), ("NH", H), ("HP", P), ("NG", G), ("NST", N), ("SPT", spt)],
              grid=(((total + {tpg} - 1) // {tpg}) * {tpg}, 1, 1), threadgroup=({tpg}, 1, 1),
              output_shapes=[x.shape], output_dtypes=[mx.float32])[0]
'''


OPS = Template(id="ssd.ops_chunked", pattern="scan.ops_chunked_ssd", kinds=("ops",),
               knobs={"chunk": [64, 32, 128, 256], "compile": [False, True]}, render=_render_ops,
               description="chunked SSD in MLX ops: masked intra-chunk matmuls + a recurrence over chunk states",
               difficulty=2, predicted_speedup=1.0)
REGISTERS = Template(
    id="ssd.registers", pattern="scan.state_in_registers", kinds=("metal", "cuda"),
    knobs={"states_per_thread": [4, 1, 2, 8, 16], "chunk": [16, 4, 8, 32], "threads_per_group": [128, 64, 256],
           "fast_exp": [True, False]},
    render=_render_kernel, description="state in registers, N/SPT lanes per (head, p) row, shuffles over N",
    difficulty=3, predicted_speedup=10.0, valid=lambda k: k["chunk"] * k["states_per_thread"] <= 256)

CHUNKED = Template(
    id="ssd.chunked_kernels", pattern="scan.chunked_two_pass", kinds=("metal", "cuda"),
    knobs={"chunk": [64, 32, 16], "warps": [8, 4, 2], "k_tile": [8, 16]}, render=render_chunked,
    description="chunked SSD as three kernels: chunk end states (GEMM over the chunk), a carry over chunks, "
                "masked intra-chunk scores + inter-chunk term (register-tiled GEMMs through threadgroup memory)",
    difficulty=4, predicted_speedup=3.5, valid=chunked_valid)  # H100: 3.51x (chunk 64, 8 warps, k-tile 8)

CHUNKED_MMA = Template(
    id="ssd.chunked_mma", pattern="scan.chunked_two_pass", kinds=("cuda",),
    knobs={"chunk": [64, 32, 16], "warps": [8, 4, 2], "k_tile": [16, 8]}, render=render_chunked_mma,
    description="ssd.chunked_kernels with its three GEMMs on tensor cores: mma.sync m16n8k8 tf32, each operand split "
                "into two tf32 parts (3xTF32: about fp32 precision), fp32 accumulation (Metal twin: ssd.chunked_kernels)",
    difficulty=5, predicted_speedup=2.3, valid=chunked_valid)  # H100: 2.32x, slower than CUDA cores here

FAMILY = Family(name="ssd", make_task=make_task, templates=[OPS, REGISTERS, CHUNKED, CHUNKED_MMA],
                naive=lambda kind: _render_kernel({"states_per_thread": 32, "chunk": 1, "threads_per_group": 64,
                                                   "fast_exp": False}, kind) if kind != "ops" else
                _render_ops({"chunk": 1, "compile": False}, "ops"),
                description="Mamba-2 SSD scan prefill")
