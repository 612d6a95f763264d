"""Mamba-1 selective scan (prefill).

    h_t = exp(delta_t * A) * h_(t-1) + delta_t * B_t * x_t        (per channel d, state n)
    y_t = C_t . h_t + D * x_t

Inputs x, delta: (batch, L, D); A: (D, N) negative; B, C: (batch, L, N); D: (D,). Output y: (batch, L, D), fp32.
Baseline: the per-token loop of MLX ops that mlx-lm's Mamba block runs. Templates: a chunked formulation in
MLX ops (a short loop inside chunks plus a short loop over chunks, instead of one step per token), and
kernels with the state in registers: lanes of one channel share its N states and reduce C.h with shuffles,
and each lane loads a chunk of timesteps before running the recurrence over them; the same over sequence
chunks in three kernels; and scan.chunked_fused (_scan_fused.py): one kernel, a thread per (channel, sequence
chunk) holding all N states, the chunks of a channel in one threadgroup (two passes and a carry between them).
"""
from __future__ import annotations

from ._scan_fused import chunked_fused_valid, render_chunked_fused, render_chunked_fused_stateful
from ._src import Dialect, header, kernel_ctor, tag
from .base import Family, Template
from ..task import InputSpec, KernelTask, Workload

LOOP = '''import mlx.core as mx

def {name}(x, delta, A, B, C, D):
    h = mx.zeros((x.shape[0], x.shape[2], A.shape[1]), dtype=mx.float32)
    ys = []
    for t in range(x.shape[1]):
        dt = delta[:, t, :, None]
        h = mx.exp(dt * A) * h + dt * B[:, t, None, :] * x[:, t, :, None]
        ys.append((h * C[:, t, None, :]).sum(axis=-1) + D * x[:, t])
    return mx.stack(ys, axis=1)
'''
REFERENCE = LOOP.format(name="reference")
BASELINE = LOOP.format(name="baseline")
INPUTS = ["x", "delta", "A", "B", "C", "D"]


def make_task() -> KernelTask:
    inputs = [
        InputSpec(name="x", shape=["Bt", "L", "Dm"], init="normal", low=-1.0, high=1.0),
        InputSpec(name="delta", shape=["Bt", "L", "Dm"], init="positive", low=0.01, high=0.5),
        InputSpec(name="A", shape=["Dm", "N"], init="uniform", low=-4.0, high=-0.1),
        InputSpec(name="B", shape=["Bt", "L", "N"], init="normal", low=-1.0, high=1.0),
        InputSpec(name="C", shape=["Bt", "L", "N"], init="normal", low=-1.0, high=1.0),
        InputSpec(name="D", shape=["Dm"], init="uniform", low=-1.0, high=1.0),
    ]
    small = [Workload(name="b2_l37_d8_n16", dims={"Bt": 2, "L": 37, "Dm": 8, "N": 16}),
             Workload(name="b1_l64_d12_n8", dims={"Bt": 1, "L": 64, "Dm": 12, "N": 8})]
    bench = [Workload(name="mamba370m_b1_l512", dims={"Bt": 1, "L": 512, "Dm": 2048, "N": 16}),
             Workload(name="b1_l4096_d2048_n16", dims={"Bt": 1, "L": 4096, "Dm": 2048, "N": 16})]
    return KernelTask(name="scan", family="scan", description=__doc__.strip().splitlines()[0], inputs=inputs,
                      outputs=["y"], reference=REFERENCE, baseline=BASELINE,
                      baseline_name="per-token loop of MLX ops (mlx-lm Mamba-1 style)",
                      workloads=small, bench_workloads=bench, seeds=[0, 1],
                      tolerances={"float32": {"atol": 2e-4, "rtol": 2e-4}})


# -- ops: chunked -------------------------------------------------------------------------------------
def _render_ops(k: dict, kind: str) -> str:
    if kind != "ops":
        raise ValueError("scan.ops_chunked renders ops candidates only")
    T = k["chunk"]
    body = f'''
CHUNK = {T}


def _scan(x, delta, A, B, C, D):
    Bt, L, Dm = x.shape
    N = A.shape[1]
    nc = (L + CHUNK - 1) // CHUNK
    pad = nc * CHUNK - L
    dx, dl, Bp, Cp = delta * x, delta, B, C
    if pad:  # delta = 0 past the end: the state just carries, the padded outputs are dropped
        z3 = mx.zeros((Bt, pad, Dm), dtype=x.dtype)
        zn = mx.zeros((Bt, pad, N), dtype=x.dtype)
        dx, dl = mx.concatenate([dx, z3], axis=1), mx.concatenate([dl, z3], axis=1)
        Bp, Cp = mx.concatenate([B, zn], axis=1), mx.concatenate([C, zn], axis=1)
    la = (dl[..., None] * A).reshape(Bt, nc, CHUNK, Dm, N)          # log decay per step
    u = (dx[..., None] * Bp[:, :, None, :]).reshape(Bt, nc, CHUNK, Dm, N)
    h = mx.zeros((Bt, nc, Dm, N), dtype=mx.float32)
    hs = []
    for t in range(CHUNK):                                           # all chunks advance together
        h = mx.exp(la[:, :, t]) * h + u[:, :, t]
        hs.append(h)
    hloc = mx.stack(hs, axis=2)                                      # state from a zero start per chunk
    cum = mx.exp(mx.cumsum(la, axis=2))                              # decay since the chunk start, <= 1
    carry = mx.zeros((Bt, Dm, N), dtype=mx.float32)
    carries = []
    for c in range(nc):                                              # carry the state across chunks
        carries.append(carry)
        carry = cum[:, c, -1] * carry + hloc[:, c, -1]
    hin = mx.stack(carries, axis=1)[:, :, None]
    hfull = hloc + cum * hin
    y = (hfull * Cp.reshape(Bt, nc, CHUNK, 1, N)).sum(axis=-1).reshape(Bt, nc * CHUNK, Dm)
    return y[:, :L] + D * x
'''
    src = header("scan", "scan.ops_chunked", k, kind) + body
    src += "\n\nkernel = mx.compile(_scan)\n" if k["compile"] else "\n\nkernel = _scan\n"
    return src


# -- kernels: state in registers ---------------------------------------------------------------------
def _scan_source(kind: str, k: dict, stateful: bool = False) -> str:
    d = Dialect(kind, fast_math=k["fast_exp"])
    T, TPG = k["chunk"], k["threads_per_group"]
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    red = [f"for (int o = LPC / 2; o > 0; o /= 2) yp += {d.shfl_xor('yp', 'o')};"]
    return "\n".join([
        f"constexpr int TCH = {T};",
        "constexpr int LPC = NST / SPT;                 // lanes per channel (a power of two <= 32)",
        f"const int g = {gid};",
        "const int total = BATCH * DIM * LPC;",
        "const bool live = g < total;",
        "const int gg = live ? g : 0;",
        "const int ch = gg / LPC;",
        "const int sub = gg % LPC;",
        "const int b = ch / DIM;",
        "const int d = ch % DIM;",
        "float a[SPT];",
        "float h[SPT];",
        "for (int j = 0; j < SPT; ++j) {",
        "  a[j] = A[d * NST + sub * SPT + j];",
        "  h[j] = " + ("h0[((size_t)b * DIM + d) * NST + sub * SPT + j];" if stateful else "0.0f;"),
        "}",
        "const float dd = D[d];",
        "for (int t0 = 0; t0 < SEQ; t0 += TCH) {",
        "  float dl[TCH]; float xv[TCH]; float bv[TCH * SPT]; float cv[TCH * SPT];",
        "  for (int i = 0; i < TCH; ++i) {          // loads first: TCH steps of independent memory requests",
        "    const int t = t0 + i;",
        "    const bool in = t < SEQ;",
        "    const size_t row = (size_t)b * SEQ + (in ? t : 0);",
        "    dl[i] = in ? delta[row * DIM + d] : 0.0f;",
        "    xv[i] = in ? x[row * DIM + d] : 0.0f;",
        "    for (int j = 0; j < SPT; ++j) {",
        "      bv[i * SPT + j] = B[row * NST + sub * SPT + j];",
        "      cv[i * SPT + j] = C[row * NST + sub * SPT + j];",
        "    }",
        "  }",
        "  for (int i = 0; i < TCH; ++i) {",
        "    const float dx = dl[i] * xv[i];",
        "    float yp = 0.0f;",
        "    for (int j = 0; j < SPT; ++j) {",
        f"      h[j] = {d.exp('dl[i] * a[j]')} * h[j] + dx * bv[i * SPT + j];",
        "      yp += cv[i * SPT + j] * h[j];",
        "    }",
        *["    " + ln for ln in red],
        "    const int t = t0 + i;",
        "    if (live && sub == 0 && t < SEQ) y[((size_t)b * SEQ + t) * DIM + d] = yp + dd * xv[i];",
        "  }",
        "}",
        *(["if (live) for (int j = 0; j < SPT; ++j) hlast[((size_t)b * DIM + d) * NST + sub * SPT + j] = h[j];"]
          if stateful else []),
    ])


def _shape_lines(tid: str) -> str:
    """The first lines of a register kernel's `kernel()`: its sizes, and the state sizes its lanes can hold."""
    return f"""    Bt, L, Dm = x.shape
    N = A.shape[1]
    if N & (N - 1) or N > 32 * STATES_PER_THREAD:
        raise ValueError(f"{tid} needs a power-of-two state size N <= {{32 * STATES_PER_THREAD}}, got {{N}}")
    spt = min(STATES_PER_THREAD, N)"""


def _render_kernel(k: dict, kind: str) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError("scan.registers renders metal or cuda candidates")
    TPG = k["threads_per_group"]
    name = tag("scan.registers", k, kind)
    return f'''{header("scan", "scan.registers", k, kind)}
_SOURCE = r"""
{_scan_source(kind, k)}
"""
_HEADER = ""
_K = {kernel_ctor(kind, name, INPUTS, ["y"])}
STATES_PER_THREAD = {k["states_per_thread"]}


def kernel(x, delta, A, B, C, D):
{_shape_lines('scan.registers')}
    total = Bt * Dm * (N // spt)
    groups = (total + {TPG} - 1) // {TPG}
    return _K(inputs=[x, delta, A, B, C, D],
              template=[("BATCH", Bt), ("SEQ", L), ("DIM", Dm), ("NST", N), ("SPT", spt)],
              grid=(groups * {TPG}, 1, 1), threadgroup=({TPG}, 1, 1),
              output_shapes=[x.shape], output_dtypes=[mx.float32])[0]
'''


def render_stateful(k: dict, kind: str = "cuda", template: str = "scan.registers") -> str:
    """A module defining `scan_with_state(x, delta, A, B, C, D, h0) -> (y, h_last)`: the register kernel with
    an initial state and the final state (B, D, N) written out, for a model's cache (bench/mamba_prefill.py).
    template="scan.chunked_fused": the one-kernel chunked scan with the same signature."""
    if template == "scan.chunked_fused":
        return render_chunked_fused_stateful(k, kind)
    if template != "scan.registers":
        raise ValueError(f"no stateful variant of {template}")
    TPG = k["threads_per_group"]
    name = tag("scan.registers_state", k, kind)
    return f'''{header("scan", "scan.registers (with state)", k, kind)}
_SOURCE = r"""
{_scan_source(kind, k, stateful=True)}
"""
_HEADER = ""
_K = {kernel_ctor(kind, name, INPUTS + ["h0"], ["y", "hlast"])}
STATES_PER_THREAD = {k["states_per_thread"]}


def scan_with_state(x, delta, A, B, C, D, h0):
    Bt, L, Dm = x.shape
    N = A.shape[1]
    spt = min(STATES_PER_THREAD, N)
    total = Bt * Dm * (N // spt)
    groups = (total + {TPG} - 1) // {TPG}
    y, h = _K(inputs=[x, delta, A, B, C, D, h0],
              template=[("BATCH", Bt), ("SEQ", L), ("DIM", Dm), ("NST", N), ("SPT", spt)],
              grid=(groups * {TPG}, 1, 1), threadgroup=({TPG}, 1, 1),
              output_shapes=[x.shape, (Bt, Dm, N)], output_dtypes=[mx.float32, mx.float32])
    return y, h
'''


# -- kernels: chunked over the sequence (three kernels) ---------------------------------------------------
def _chunk_loop(d, k: dict, body: list[str]) -> list[str]:
    """Lines running `body` for every step i of every TCH-block of this thread's sequence chunk: `dl[i]`,
    `xv[i]`, `bv[..]` (and `cv[..]` where the body reads it) loaded first. Every thread runs the same number of
    steps (LCH), so lanes that shuffle together stay converged; steps past the chunk or the sequence load
    delta = x = 0, which leaves the state as it is."""
    T = k["chunk"]
    need_c = any("cv[" in ln for ln in body)
    return [
        f"for (int t0 = 0; t0 < LCH; t0 += {T}) {{",
        f"  float dl[{T}]; float xv[{T}]; float bv[{T} * SPT];" + (f" float cv[{T} * SPT];" if need_c else ""),
        f"  for (int i = 0; i < {T}; ++i) {{",
        "    const int t = c * LCH + t0 + i;",
        "    const bool in = t0 + i < LCH && t < SEQ;",
        "    const size_t row = (size_t)b * SEQ + (in ? t : 0);",
        "    dl[i] = in ? delta[row * DIM + d] : 0.0f;",
        "    xv[i] = in ? x[row * DIM + d] : 0.0f;",
        "    for (int j = 0; j < SPT; ++j) {",
        "      bv[i * SPT + j] = B[row * NST + sub * SPT + j];",
        *(["      cv[i * SPT + j] = C[row * NST + sub * SPT + j];"] if need_c else []),
        "    }",
        "  }",
        f"  for (int i = 0; i < {T}; ++i) {{",
        *["    " + ln for ln in body],
        "  }",
        "}",
    ]


def _chunked_sources(kind: str, k: dict) -> tuple[str, str, str]:
    """(ends, carry, scan): the state each sequence chunk ends in from a zero start and the chunk's summed delta;
    the state each chunk starts in (a short loop over chunks per channel and state); the recurrence again from
    that state, writing y."""
    d = Dialect(kind, fast_math=k["fast_exp"])
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    head = [
        "constexpr int LPC = NST / SPT;                 // lanes per channel (a power of two <= 32)",
        "constexpr int LCH = (SEQ + NCH - 1) / NCH;     // steps per sequence chunk",
        f"const int g = {gid};",
        "const int per_chunk = BATCH * DIM * LPC;",
        "const bool live = g < per_chunk * NCH;",
        "const int gg = live ? g : 0;",
        "const int c = gg / per_chunk;                  // the sequence chunk (outermost: lanes of a channel share it)",
        "const int r = gg % per_chunk;",
        "const int ch = r / LPC;",
        "const int sub = r % LPC;",
        "const int b = ch / DIM;",
        "const int d = ch % DIM;",
        "float a[SPT];",
        "float h[SPT];",
    ]
    step = [f"h[j] = {d.exp('dl[i] * a[j]')} * h[j] + dx * bv[i * SPT + j];"]
    ends = "\n".join(head + [
        "for (int j = 0; j < SPT; ++j) { a[j] = A[d * NST + sub * SPT + j]; h[j] = 0.0f; }",
        "float sd = 0.0f;",
        *_chunk_loop(d, k, ["const float dx = dl[i] * xv[i];", "sd += dl[i];",
                            "for (int j = 0; j < SPT; ++j) " + step[0]]),
        "const size_t at = ((size_t)b * NCH + c) * DIM + d;",
        "if (live) for (int j = 0; j < SPT; ++j) hend[at * NST + sub * SPT + j] = h[j];",
        "if (live && sub == 0) sdel[at] = sd;",
    ])
    carry = "\n".join([
        f"const int g = {gid};",
        "if (g >= BATCH * DIM * NST) return;",
        "const int n = g % NST;",
        "const int d = (g / NST) % DIM;",
        "const int b = g / (NST * DIM);",
        "const float an = A[d * NST + n];",
        "float hc = 0.0f;",
        "for (int c = 0; c < NCH; ++c) {",
        "  const size_t at = ((size_t)b * NCH + c) * DIM + d;",
        "  hin[at * NST + n] = hc;",
        f"  hc = {d.exp('an * sdel[at]')} * hc + hend[at * NST + n];",
        "}",
    ])
    red = f"for (int o = LPC / 2; o > 0; o /= 2) yp += {d.shfl_xor('yp', 'o')};"
    scan = "\n".join(head + [
        "const size_t at = ((size_t)b * NCH + c) * DIM + d;",
        "for (int j = 0; j < SPT; ++j) { a[j] = A[d * NST + sub * SPT + j]; h[j] = hin[at * NST + sub * SPT + j]; }",
        "const float dd = D[d];",
        *_chunk_loop(d, k, ["const float dx = dl[i] * xv[i];", "float yp = 0.0f;",
                            "for (int j = 0; j < SPT; ++j) {", "  " + step[0], "  yp += cv[i * SPT + j] * h[j];", "}",
                            red,
                            "const int t = c * LCH + t0 + i;",
                            "if (live && sub == 0 && t0 + i < LCH && t < SEQ) y[((size_t)b * SEQ + t) * DIM + d] = yp + dd * xv[i];"]),
    ])
    return ends, carry, scan


def _render_chunked(k: dict, kind: str) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError("scan.chunked_registers renders metal or cuda candidates")
    TPG = k["threads_per_group"]
    name = tag("scan.chunked_registers", k, kind)
    ends, carry, scan = _chunked_sources(kind, k)
    return f'''{header("scan", "scan.chunked_registers", k, kind)}
_ENDS = r"""
{ends}
"""
_CARRY = r"""
{carry}
"""
_SCAN = r"""
{scan}
"""
_HEADER = ""
_KE = {kernel_ctor(kind, name + "_ends", ["x", "delta", "A", "B"], ["hend", "sdel"], src_var="_ENDS")}
_KC = {kernel_ctor(kind, name + "_carry", ["A", "hend", "sdel"], ["hin"], src_var="_CARRY")}
_KS = {kernel_ctor(kind, name + "_scan", INPUTS + ["hin"], ["y"], src_var="_SCAN")}
STATES_PER_THREAD = {k["states_per_thread"]}
SEQ_CHUNKS = {k["seq_chunks"]}


def kernel(x, delta, A, B, C, D):
{_shape_lines('scan.chunked_registers')}
    nch = max(1, min(SEQ_CHUNKS, L))
    tmpl = [("BATCH", Bt), ("SEQ", L), ("DIM", Dm), ("NST", N), ("SPT", spt), ("NCH", nch)]
    total = Bt * Dm * (N // spt) * nch
    grid = (((total + {TPG} - 1) // {TPG}) * {TPG}, 1, 1)
    hend, sdel = _KE(inputs=[x, delta, A, B], template=tmpl, grid=grid, threadgroup=({TPG}, 1, 1),
                     output_shapes=[(Bt, nch, Dm, N), (Bt, nch, Dm)], output_dtypes=[mx.float32, mx.float32])
    hin = _KC(inputs=[A, hend, sdel], template=tmpl, grid=(((Bt * Dm * N + 127) // 128) * 128, 1, 1),
              threadgroup=(128, 1, 1), output_shapes=[(Bt, nch, Dm, N)], output_dtypes=[mx.float32])[0]
    return _KS(inputs=[x, delta, A, B, C, D, hin], template=tmpl, grid=grid, threadgroup=({TPG}, 1, 1),
               output_shapes=[x.shape], output_dtypes=[mx.float32])[0]
'''


def _naive(kind: str) -> str:
    """One thread per channel, looping over time and then over the N states serially."""
    if kind == "ops":
        return _render_ops({"chunk": 1, "compile": False}, "ops")
    d = Dialect(kind)
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    src = "\n".join([
        f"const int ch = {gid};",
        "if (ch >= BATCH * DIM) return;",
        "const int b = ch / DIM;",
        "const int d = ch % DIM;",
        "float h[NST];",
        "for (int n = 0; n < NST; ++n) h[n] = 0.0f;",
        "for (int t = 0; t < SEQ; ++t) {",
        "  const size_t row = (size_t)b * SEQ + t;",
        "  const float dl = delta[row * DIM + d];",
        "  const float xv = x[row * DIM + d];",
        "  float acc = 0.0f;",
        "  for (int n = 0; n < NST; ++n) {",
        f"    h[n] = {d.exp('dl * A[d * NST + n]')} * h[n] + dl * B[row * NST + n] * xv;",
        "    acc += C[row * NST + n] * h[n];",
        "  }",
        "  y[row * DIM + d] = acc + D[d] * xv;",
        "}",
    ])
    return f'''{header("scan", "scan.naive", {}, kind)}
_SOURCE = r"""
{src}
"""
_HEADER = ""
_K = {kernel_ctor(kind, tag("scan.naive", {}, kind), INPUTS, ["y"])}


def kernel(x, delta, A, B, C, D):
    Bt, L, Dm = x.shape
    N = A.shape[1]
    return _K(inputs=[x, delta, A, B, C, D],
              template=[("BATCH", Bt), ("SEQ", L), ("DIM", Dm), ("NST", N)],
              grid=(((Bt * Dm + 63) // 64) * 64, 1, 1), threadgroup=(64, 1, 1),
              output_shapes=[x.shape], output_dtypes=[mx.float32])[0]
'''


OPS = Template(id="scan.ops_chunked", pattern="scan.chunked_two_pass", kinds=("ops",),
               knobs={"chunk": [16, 8, 32, 64, 128], "compile": [False, True]},
               render=_render_ops, description="chunked scan in MLX ops: CHUNK steps inside chunks, then L/CHUNK carries",
               difficulty=2, predicted_speedup=5.0)

REGISTERS = Template(
    id="scan.registers", pattern="scan.state_in_registers", kinds=("metal", "cuda"),
    knobs={"states_per_thread": [1, 2, 4, 8, 16], "chunk": [8, 1, 4, 16, 32], "threads_per_group": [128, 64, 256, 512],
           "fast_exp": [False, True]},
    render=_render_kernel,
    description="N/SPT lanes per channel hold the state in registers; C.h reduced with shuffles; inputs loaded a chunk at a time",
    difficulty=3, predicted_speedup=100.0,
    valid=lambda k: k["chunk"] * k["states_per_thread"] <= 256)

CHUNKED = Template(
    id="scan.chunked_registers", pattern="scan.chunked_two_pass", kinds=("metal", "cuda"),
    knobs={"seq_chunks": [16, 8, 32, 64], "states_per_thread": [1, 2, 4], "chunk": [16, 8, 32],
           "threads_per_group": [128, 64, 256], "fast_exp": [True, False]},
    render=_render_chunked,
    description="the sequence cut into chunks scanned side by side: each chunk's end state from a zero start, "
                "a short carry over chunks, then the recurrence again from each chunk's true start state",
    difficulty=3, predicted_speedup=250.0,
    valid=lambda k: k["chunk"] * k["states_per_thread"] <= 256)

FUSED = Template(
    id="scan.chunked_fused", pattern="scan.chunked_two_pass", kinds=("metal", "cuda"),
    knobs={"channels_per_group": [16, 8, 32], "seq_chunks": [32, 16, 64, 8], "stage_steps": [4, 2, 8],
           "warm_l2": [True, False], "fast_exp": [True, False]},
    render=render_chunked_fused,
    description="one kernel: a thread per (channel, sequence chunk) holds the channel's N states in registers (no "
                "shuffles); a threadgroup's chunks scan from zero, carry their end states in threadgroup memory, "
                "then scan again from their true start states",
    # H100 (bench/results/families.json): 0.0979 ms against the loop's 99.7 ms, 1018x; 0.0165 ms at L512
    difficulty=4, predicted_speedup=1000.0,
    valid=chunked_fused_valid)

FAMILY = Family(name="scan", make_task=make_task, templates=[OPS, REGISTERS, CHUNKED, FUSED], naive=_naive,
                description="Mamba-1 selective scan prefill")
