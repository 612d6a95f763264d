"""Mamba-1 selective scan as ONE kernel: the sequence cut into chunks inside each threadgroup (CUDA and Metal
from one source through `Dialect`; fp32).

A thread owns one channel d of one sequence chunk c and keeps the channel's whole state h[0..N) in registers, so
y_t = sum_n C_t[n] h[n] + D x_t needs no shuffles. A threadgroup is CPG channels x S chunks (thread
tid = c * CPG + dc: the lanes of a warp are consecutive channels, so x, delta and y move in CPG-float runs per
step); its chunks cover the whole sequence, LC steps each (LC a multiple of TS; steps past the end read
delta = x = 0, which leaves the state alone, and write nothing).
  1. Pass 1: every thread scans its chunk from a zero state; it keeps the end state and the chunk's summed delta
     (the chunk's decay is exp(A[d, n] * sum delta)). Under warm_l2 it walks the chunk backwards,
     h_end = sum_t exp(A * sd_t) * delta_t x_t B_t with sd_t the deltas summed after step t (as many operations as
     the forward recurrence), so the chunk starts, which pass 2 reads first, are the freshest lines in L2 then.
  2. Carry (through threadgroup memory, NSL states at a time): one thread per (channel, state) walks the S chunks
     in order, hin_0 = h0 (zeros, or the caller's state), hin_(c+1) = exp(A * sum delta_c) hin_c + hend_c, and
     hands each chunk its start state (the last value is the final state, written out by the stateful variant).
  3. Pass 2: every thread scans its chunk again from its true start state and writes y (under warm_l2, in CUDA:
     its x, delta loads evict-first (__ldcs) and its y stores streaming (__stcs), so they do not push out the
     lines of pass 1 that pass 2 has yet to read).
B_t and C_t are shared by all the channels of a chunk: each warp stages TS steps of them for its own chunks
(32 / CPG of them) in its slice of threadgroup memory (prefetched into registers one block ahead and stored
between two warp barriers), and every lane reads them back as broadcasts (float4 in CUDA). x and delta of the
next TS steps are loaded into registers while the current ones are used. exp(delta * A) is exp2 of delta times
A * log2(e) under fast_exp (CUDA: one ex2.approx.ftz, a bare MUFU op; Metal: fast::exp2), else the accurate exp.
x and delta are read twice (once per pass); the two passes do the exps twice. On an H100 (estimates, not
measurements) the 2 * L * D * N exps at 16 a clock per SM bound the bench shape (L4096 D2048 N16) near 0.065-0.075
ms (1.98-1.75 GHz), the FP32 work is about half of that and the issue slots ~80%; DRAM (x, delta twice, y: 160 MB)
near 0.05 ms, less by what pass 2 finds in L2.

Knobs: channels_per_group (CPG, 8/16/32: a warp holds 32 / CPG chunks), seq_chunks (S), stage_steps (TS: the
depth of the prefetch, ~16 registers a step), warm_l2, fast_exp. `chunked_fused_problem` says why a knob set is
refused; the wrapper refuses N not a multiple of 4 or above 16.
"""
from __future__ import annotations

from ._src import Dialect, header, kernel_ctor, tag

INPUTS = ["x", "delta", "A", "B", "C", "D"]
N_BENCH = 16                 # the state size the threadgroup-memory bound is checked at (Mamba's d_state)
N_MAX = 16                   # a thread holds N states and N decay factors in registers
SMEM_LIMIT = 32 * 1024       # Metal's threadgroup memory (CUDA's static limit is 48 KB)
MAX_THREADS = 512            # more would leave < 128 registers a thread (64K a threadgroup)
REGS_PER_GROUP = 65536       # CUDA: registers one threadgroup may use


def est_registers(k: dict) -> int:
    """About (a little above) the registers a thread needs at the bench shape (N 16), for a guard against
    threadgroups that cannot launch; tests/unit/test_scan_fused.py compiles the bench's sets with nvcc. ptxas 13.0,
    sm_90: 80-96 (stage_steps 2), 96-123 (4), 128 (8); the accurate exp a few more."""
    return 80 + 8 * k["stage_steps"] + (0 if k["fast_exp"] else 8)


LOG2E = "1.4426950408889634f"

EX2_CUDA = r"""
#ifdef KSIM_CUDA
__device__ inline float ks_ex2(float v) { return exp2f(v); }
#else
__device__ __forceinline__ float ks_ex2(float v) { float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v)); return r; }
#endif
"""


def smem_bytes(k: dict, n: int = N_BENCH) -> int:
    """Threadgroup memory of a knob set at state size n: the staging buffer (which the carry slices reuse) and
    the chunks' summed deltas."""
    s, ts, cpg = k["seq_chunks"], k["stage_steps"], k["channels_per_group"]
    return 4 * (s * (ts * 2 * n + 4) + s * cpg)


def chunked_fused_problem(k: dict) -> str | None:
    """Why this knob set cannot run (None when it can)."""
    cpg, s, ts = k["channels_per_group"], k["seq_chunks"], k["stage_steps"]
    if cpg not in (8, 16, 32):
        return f"channels_per_group must divide a warp (8, 16 or 32), got {cpg}"
    if s < 1 or ts < 1:
        return "seq_chunks and stage_steps must be positive"
    threads = cpg * s
    if threads % 32:
        return f"{cpg} channels x {s} chunks = {threads} threads is not a whole number of warps"
    if threads > MAX_THREADS:
        return (f"{cpg} channels x {s} chunks = {threads} threads: more than {MAX_THREADS} cannot keep ~100 "
                "registers each (64K registers per SM)")
    if threads * est_registers(k) > REGS_PER_GROUP:
        return (f"{threads} threads x ~{est_registers(k)} registers (stage_steps {ts}) exceed the 64K registers a "
                "threadgroup may use: the launch would fail")
    if 8 * ts < cpg:
        return "the carry needs stage_steps >= channels_per_group / 8 (its state slices reuse the staging buffer)"
    if smem_bytes(k) > SMEM_LIMIT:
        return (f"threadgroup memory {smem_bytes(k)} bytes at N={N_BENCH} exceeds {SMEM_LIMIT} "
                f"(seq_chunks x stage_steps too large)")
    return None


def chunked_fused_valid(k: dict) -> bool:
    return chunked_fused_problem(k) is None


def _source(kind: str, k: dict, stateful: bool = False) -> str:
    d = Dialect(kind, fast_math=k["fast_exp"])
    cu = not d.metal
    fast = k["fast_exp"]
    warm = k["warm_l2"]
    unroll = "#pragma unroll" if cu else ""
    syncw = "__syncwarp();" if cu else "simdgroup_barrier(mem_flags::mem_threadgroup);"
    sp = "const float*" if cu else "threadgroup const float*"

    def ex(v: str) -> str:       # exp(delta * A) with A already scaled (by log2 e when fast)
        if not fast:
            return d.exp(v)
        return f"ks_ex2({v})" if cu else f"fast::exp2({v})"

    def loads(kb: str, second: bool, stream: bool = False) -> list[str]:
        """Registers for block kb: this thread's x, delta (xn, vn) and its lanes' share of the warp's B (and C).
        stream: x and delta are read for the last time (CUDA: evict-first loads, leaving L2 to the lines pass 2
        still needs)."""
        na = 2 if second else 1
        ld = (lambda a: f"__ldcs(&{a})") if stream and cu else (lambda a: a)
        src = "(arr ? C[gi] : B[gi])" if second else "B[gi]"
        return [
            # a block inside the sequence (all but the tail of the last chunks) loads without per-step masks
            f"if (live && c * LC + ({kb} + 1) * TS <= SEQ) {{",
            f"  {unroll}",
            "  for (int i = 0; i < TS; ++i) {",
            f"    xn[i] = {ld(f'xp[({kb} * TS + i) * DIM]')};",
            f"    vn[i] = {ld(f'vp[({kb} * TS + i) * DIM]')};",
            "  }",
            "} else {",
            f"  {unroll}",
            "  for (int i = 0; i < TS; ++i) {",
            f"    const bool in = live && c * LC + {kb} * TS + i < SEQ;",
            f"    xn[i] = in ? {ld(f'xp[({kb} * TS + i) * DIM]')} : 0.0f;",
            f"    vn[i] = in ? {ld(f'vp[({kb} * TS + i) * DIM]')} : 0.0f;",
            "  }",
            "}",
            f"{{  // B{' and C' if second else ''}: the rows of this warp's chunks",
            f"  const bool full = ({na} * EW) % 32 == 0 && (warp * WCH + WCH - 1) * LC + ({kb} + 1) * TS <= SEQ;",
            f"  {unroll}",
            f"  for (int r = 0; r < ({na} * EW + 31) / 32; ++r) {{",
            "    const int e = lane + 32 * r;",
            "    const int f = e % (TS * NST);",
            "    const int g2 = e / (TS * NST);",
            *(["    const int arr = g2 % 2;", "    const int ch = warp * WCH + g2 / 2;"] if second else
              ["    const int ch = warp * WCH + g2;"]),
            f"    const bool in = full || (e < {na} * EW && ch * LC + {kb} * TS + f / NST < SEQ);",
            f"    const size_t gi = ((size_t)b * SEQ + ch * LC + {kb} * TS) * NST + f;",
            f"    pf[r] = in ? {src} : 0.0f;",
            "  }",
            "}",
        ]

    def stage(second: bool) -> list[str]:
        na = 2 if second else 1
        return [
            syncw + "  // every lane is done with the previous block's B, C",
            f"{unroll}",
            f"for (int r = 0; r < ({na} * EW + 31) / 32; ++r) {{",
            "  const int e = lane + 32 * r;",
            "  const int f = e % (TS * NST);",
            "  const int g2 = e / (TS * NST);",
            (f"  if (e < {na} * EW) stg[(warp * WCH + g2 / 2) * CST + (f / NST) * RW + (g2 % 2) * NST + f % NST] = pf[r];"
             if second else "  if (e < EW) stg[(warp * WCH + g2) * CST + (f / NST) * RW + f % NST] = pf[r];"),
            "}",
            syncw,
        ]

    def read_bc(second: bool) -> list[str]:
        if cu:
            out = ["float bb[NST];"] + (["float cc[NST];"] if second else []) + [
                unroll, "for (int q = 0; q < NST / 4; ++q) {",
                "  const float4 u = reinterpret_cast<const float4*>(sb)[q];",
                "  bb[4 * q] = u.x; bb[4 * q + 1] = u.y; bb[4 * q + 2] = u.z; bb[4 * q + 3] = u.w;"]
            if second:
                out += ["  const float4 w = reinterpret_cast<const float4*>(sb + NST)[q];",
                        "  cc[4 * q] = w.x; cc[4 * q + 1] = w.y; cc[4 * q + 2] = w.z; cc[4 * q + 3] = w.w;"]
            return out + ["}"]
        out = ["float bb[NST];"] + (["float cc[NST];"] if second else [])
        return out + ["for (int n = 0; n < NST; ++n) { bb[n] = sb[n];" + (" cc[n] = sb[NST + n];" if second else "") + " }"]

    def one_pass(second: bool) -> list[str]:
        back = warm and not second      # pass 1 from the chunk's end to its start
        ystore = "__stcs(&yp[(k * TS + i) * DIM], y0 + y1);" if cu and warm else "yp[(k * TS + i) * DIM] = y0 + y1;"
        if second:
            step = [
                "const float dx = dv * xc[i];",
                "float y0 = dd * xc[i];",
                "float y1 = 0.0f;",
                unroll,
                "for (int n = 0; n < NST; n += 2) {",
                f"  h[n] = {ex('dv * a[n]')} * h[n] + dx * bb[n];",
                f"  h[n + 1] = {ex('dv * a[n + 1]')} * h[n + 1] + dx * bb[n + 1];",
                "  y0 += cc[n] * h[n];",
                "  y1 += cc[n + 1] * h[n + 1];",
                "}",
                "const int t = c * LC + k * TS + i;",
                "if (live && t < SEQ) " + ystore,
            ]
        elif back:
            # h_end = sum_t exp(A * sd_t) * dt_t x_t B_t, sd_t = the deltas summed after step t up to the chunk end
            step = [
                "const float dx = dv * xc[i];",
                unroll,
                "for (int n = 0; n < NST; ++n) " + f"h[n] += {ex('sd * a[n]')} * (dx * bb[n]);",
                "sd += dv;",
            ]
        else:
            step = [
                "const float dx = dv * xc[i];",
                "sd += dv;",
                unroll,
                "for (int n = 0; n < NST; ++n) " + f"h[n] = {ex('dv * a[n]')} * h[n] + dx * bb[n];",
            ]
        nxt = "(NB - 2 - k)" if back else "(k + 1)"
        body = ["{", "  float xn[TS]; float vn[TS]; float xc[TS]; float vc[TS]; float pf[(2 * EW + 31) / 32];"]
        body += ["  " + ln for ln in loads("(NB - 1)" if back else "0", second, stream=second and warm)]
        body += ["  for (int k = 0; k < NB; ++k) {",
                 "    for (int i = 0; i < TS; ++i) { xc[i] = xn[i]; vc[i] = vn[i]; }"]
        body += ["    " + ln for ln in stage(second)]
        body += ["    if (k + 1 < NB) {"] + ["      " + ln for ln in loads(nxt, second, stream=second and warm)] + ["    }"]
        body += [f"    {unroll}", "    for (int i = TS - 1; i >= 0; --i) {" if back else "    for (int i = 0; i < TS; ++i) {",
                 f"      {sp} sb = stg + c * CST + i * RW;",
                 "      const float dv = vc[i];"]
        body += ["      " + ln for ln in read_bc(second)]
        body += ["      " + ln for ln in step]
        body += ["    }", "  }", "}"]
        return body

    h0 = "h0[((size_t)b * DIM + pd) * NST + n]" if stateful else None
    carry = [
        d.barrier() + "  // every warp is done with its staging slice: the carry reuses the buffer",
        "sdl[tid] = sd;",
        unroll,
        "for (int s0 = 0; s0 < NST; s0 += NSL) {",
        "  " + unroll,
        "  for (int j = 0; j < NSL; ++j) stg[(c * NSL + j) * CPG + dc] = h[s0 + j];",
        "  " + d.barrier(),
        "  for (int p = tid; p < CPG * NSL; p += TPG) {      // one thread per (channel, state) of the slice",
        "    const int pc = p % CPG;",
        "    const int pn = p / CPG;",
        "    const int n = s0 + pn;",
        "    const bool pl = d0 + pc < DIM;",
        "    const int pd = pl ? d0 + pc : 0;",
        f"    const float an = A[pd * NST + n]{' * ' + LOG2E if fast else ''};",
        f"    float hr = {('pl ? ' + h0 + ' : 0.0f') if stateful else '0.0f'};",
        *([f"    #pragma unroll 8"] if cu else []),
        "    for (int cj = 0; cj < SCH; ++cj) {",
        "      const int at = (cj * NSL + pn) * CPG + pc;",
        "      const float v = stg[at];",
        "      stg[at] = hr;                                   // the state chunk cj starts from",
        f"      hr = {ex('an * sdl[cj * CPG + pc]')} * hr + v;",
        "    }",
        *(["    if (pl) hlast[((size_t)b * DIM + pd) * NST + n] = hr;"] if stateful else []),
        "  }",
        "  " + d.barrier(),
        "  " + unroll,
        "  for (int j = 0; j < NSL; ++j) h[s0 + j] = stg[(c * NSL + j) * CPG + dc];",
        "  " + d.barrier(),
        "}",
    ]
    lines = [
        f"constexpr int CPG = {k['channels_per_group']};          // channels per threadgroup",
        f"constexpr int SCH = {k['seq_chunks']};          // sequence chunks per threadgroup",
        f"constexpr int TS = {k['stage_steps']};           // time steps staged per block",
        "constexpr int TPG = CPG * SCH;",
        "constexpr int WCH = 32 / CPG;                    // chunks per warp",
        "constexpr int LC = TS * ((SEQ + SCH * TS - 1) / (SCH * TS));   // steps per chunk",
        "constexpr int NB = LC / TS;                      // blocks per chunk",
        "constexpr int RW = 2 * NST;                      // a staged step: B then C",
        "constexpr int CST = TS * RW + 4;                 // a chunk's staging rows (+4: a warp's chunks on other banks)",
        "constexpr int EW = WCH * TS * NST;               // floats of one array a warp stages per block",
        "constexpr int NSL = (2 * TS >= CPG) ? NST : ((4 * TS >= CPG) ? NST / 2 : NST / 4);  // states per carry slice",
        "static_assert(NSL * CPG <= CST && NST % 4 == 0, \"carry slice must fit the staging buffer\");",
        d.shared("float stg[SCH * CST]") if d.metal else "__shared__ __align__(16) float stg[SCH * CST];",
        d.shared("float sdl[TPG]"),
        f"const int tid = {d.tid()};",
        "const int lane = tid & 31;",
        "const int warp = tid >> 5;",
        "const int dc = tid % CPG;",
        "const int c = tid / CPG;",
        "constexpr int GPB = (DIM + CPG - 1) / CPG;       // threadgroups per batch row",
        f"const int grp = {d.bid()};",
        "const int b = grp / GPB;",
        "const int d0 = (grp % GPB) * CPG;",
        "const int d = d0 + dc;",
        "const bool live = d < DIM;",
        "const int dA = live ? d : 0;",
        "const size_t xb = ((size_t)b * SEQ + (size_t)c * LC) * DIM + dA;   // x, delta, y of this chunk's first step",
        f"{d.device_ptr('float')} xp = x + xb;",
        f"{d.device_ptr('float')} vp = delta + xb;",
        f"{'device float*' if d.metal else 'float*'} yp = y + xb;",
        "float a[NST];",
        "float h[NST];",
        unroll,
        "for (int n = 0; n < NST; ++n) {",
        f"  a[n] = A[dA * NST + n]{' * ' + LOG2E if fast else ''};",
        "  h[n] = 0.0f;",
        "}",
        "const float dd = D[dA];",
        "float sd = 0.0f;",
        "// pass 1: each chunk from a zero state",
        *one_pass(False),
        "// carry the states across the chunks",
        *carry,
        "// pass 2: each chunk from its true start state, writing y",
        *one_pass(True),
    ]
    return "\n".join(ln for ln in lines if ln != "")


def _wrapper_lines(tid: str) -> str:
    return f"""    Bt, L, Dm = x.shape
    N = A.shape[1]
    if N % 4 or N > {N_MAX}:
        raise ValueError(f"{tid} keeps a channel's N states in one thread: N must be a multiple of 4 and at most {N_MAX}, got {{N}}")
    if L * Dm >= 2 ** 31:
        raise ValueError("{tid} indexes a sequence's x, delta and y with 32-bit offsets: L * D must stay below 2**31")
    groups = Bt * ((Dm + CPG - 1) // CPG)"""


def _checked_header(k: dict, kind: str) -> str:
    """The kernel header for these knobs and this kind; a kind or knob set the kernel cannot take raises, with why."""
    if kind not in ("metal", "cuda"):
        raise ValueError("scan.chunked_fused renders metal or cuda candidates")
    why = chunked_fused_problem(k)
    if why:
        raise ValueError(f"scan.chunked_fused: {why}")
    return EX2_CUDA if kind == "cuda" and k["fast_exp"] else ""


def render_chunked_fused(k: dict, kind: str) -> str:
    hdr = _checked_header(k, kind)
    name = tag("scan.chunked_fused", k, kind)
    return f'''{header("scan", "scan.chunked_fused", k, kind)}
_SOURCE = r"""
{_source(kind, k)}
"""
_HEADER = r"""{hdr}"""
_K = {kernel_ctor(kind, name, INPUTS, ["y"])}
CPG = {k["channels_per_group"]}
TPG = CPG * {k["seq_chunks"]}


def kernel(x, delta, A, B, C, D):
{_wrapper_lines("scan.chunked_fused")}
    return _K(inputs=[x, delta, A, B, C, D],
              template=[("BATCH", Bt), ("SEQ", L), ("DIM", Dm), ("NST", N)],
              grid=(groups * TPG, 1, 1), threadgroup=(TPG, 1, 1),
              output_shapes=[x.shape], output_dtypes=[mx.float32])[0]
'''


def render_chunked_fused_stateful(k: dict, kind: str = "cuda") -> str:
    """A module defining `scan_with_state(x, delta, A, B, C, D, h0) -> (y, h_last)`: the one-kernel chunked scan
    starting from the state h0 (B, D, N) and writing the final state, for a model's cache (bench/mamba_prefill.py)."""
    hdr = _checked_header(k, kind)
    name = tag("scan.chunked_fused_state", k, kind)
    return f'''{header("scan", "scan.chunked_fused (with state)", k, kind)}
_SOURCE = r"""
{_source(kind, k, stateful=True)}
"""
_HEADER = r"""{hdr}"""
_K = {kernel_ctor(kind, name, INPUTS + ["h0"], ["y", "hlast"])}
CPG = {k["channels_per_group"]}
TPG = CPG * {k["seq_chunks"]}


def scan_with_state(x, delta, A, B, C, D, h0):
{_wrapper_lines("scan.chunked_fused")}
    y, h = _K(inputs=[x, delta, A, B, C, D, h0],
              template=[("BATCH", Bt), ("SEQ", L), ("DIM", Dm), ("NST", N)],
              grid=(groups * TPG, 1, 1), threadgroup=(TPG, 1, 1),
              output_shapes=[x.shape, (Bt, Dm, N)], output_dtypes=[mx.float32, mx.float32])
    return y, h
'''
