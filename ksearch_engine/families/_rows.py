"""Row-wise kernels shared by softmax, rmsnorm and layernorm: one generator, three ops, two dialects.

Knobs (all change the generated code):
  threads_per_row  lanes that cooperate on one row (<= 32: warp/SIMD-group shuffles only; > 32: a
                   two-level reduction through threadgroup memory)
  rows_per_group   rows per threadgroup when threads_per_row <= 32
  vec              contiguous elements per lane per step (CUDA: one vector load when the row is aligned)
  strategy         'registers' (read the row once, keep it in registers), 'reread' (read it again for each
                   pass), 'online' (softmax: running max and sum in one pass; layernorm: sum and sum of squares)
  fast_math        fast exp (__expf / fast::exp) instead of the precise one
"""
from __future__ import annotations

from ._src import Dialect, header, kernel_ctor, tag
from .base import Template

EPS = 1e-5
OPS = {"softmax": ["x"], "rmsnorm": ["x", "w"], "layernorm": ["x", "w", "b"]}


def row_valid(op: str, k: dict) -> bool:
    tpr, rpb = k["threads_per_row"], k.get("rows_per_group", 1)
    tg = tpr * rpb
    if tg % 32 or tg > 1024 or (tpr > 32 and rpb != 1):
        return False
    if k["strategy"] == "online" and op == "rmsnorm":
        return False
    if k.get("fast_math") and op != "softmax":
        return False
    return True


def _reduce(d: Dialect, var: str, op: str, tpr: int) -> list[str]:
    neutral = d.neg_inf if op == "max" else "0.0f"
    if tpr <= 32:
        return d.warp_reduce(var, op, tpr)
    return d.warp_reduce(var, op, 32) + [
        f"if ((t & 31) == 0) red[t >> 5] = {var};",
        d.barrier(),
        f"{var} = ((t & 31) < {tpr // 32}) ? red[t & 31] : {neutral};  // every warp finishes the reduction",
        *d.warp_reduce(var, op, 32),
        d.barrier(),
    ]


def _load(d: Dialect, ptr: str, dst: str, neutral: str) -> list[str]:
    """Load VEC elements of row pointer `ptr` starting at `base` into float `dst[VEC]`."""
    scalar = [f"for (int e = 0; e < VEC; ++e) {dst}[e] = (base + e < COLS) ? {d.to_f(ptr + '[base + e]')} : {neutral};"]
    if d.metal:
        return scalar
    return [f"if (ALIGNED && base < COLS) {{",
            f"  const VecT pk = *reinterpret_cast<const VecT*>({ptr} + base);",
            f"  for (int e = 0; e < VEC; ++e) {dst}[e] = {d.to_f('pk.v[e]')};",
            "} else {",
            "  " + scalar[0],
            "}"]


def _loop(d: Dialect, body: list[str], strategy: str, first: bool, neutral: str = "0.0f") -> list[str]:
    """A pass over this lane's part of the row; the body sees `xv` (float), `col` and `ok`."""
    out = ["for (int c = 0; c < NV; ++c) {", "  const int base = (c * TPR + lane) * VEC;", "  float r[VEC];"]
    if strategy == "registers" and not first:
        out.append("  for (int e = 0; e < VEC; ++e) r[e] = cache[c * VEC + e];")
    else:
        out += ["  " + ln for ln in _load(d, "xr", "r", neutral)]
        if strategy == "registers":
            out.append("  for (int e = 0; e < VEC; ++e) cache[c * VEC + e] = r[e];")
    out += ["  for (int e = 0; e < VEC; ++e) {", "    const int col = base + e;", "    const bool ok = col < COLS;",
            "    const float xv = r[e];"]
    out += ["    " + ln for ln in body]
    out += ["  }", "}"]
    return out


def _write(d: Dialect, op: str, strategy: str) -> list[str]:
    """The final pass: compute `o[VEC]` from the row (and weights) and store it."""
    out = ["for (int c = 0; c < NV; ++c) {", "  const int base = (c * TPR + lane) * VEC;", "  float r[VEC];"]
    if strategy == "registers":
        out.append("  for (int e = 0; e < VEC; ++e) r[e] = cache[c * VEC + e];")
    else:
        out += ["  " + ln for ln in _load(d, "xr", "r", "0.0f")]
    if op in ("rmsnorm", "layernorm"):
        out += ["  float wv[VEC];"] + ["  " + ln for ln in _load(d, "w", "wv", "0.0f")]
    if op == "layernorm":
        out += ["  float bv[VEC];"] + ["  " + ln for ln in _load(d, "b", "bv", "0.0f")]
    expr = {"softmax": f"{d.exp('r[e] - m')} * inv",
            "rmsnorm": "r[e] * rs * wv[e]",
            "layernorm": "(r[e] - mean) * rs * wv[e] + bv[e]"}[op]
    out.append("  if (!active) continue;")
    store_scalar = f"for (int e = 0; e < VEC; ++e) if (base + e < COLS) yr[base + e] = {d.to_t('(' + expr + ')')};"
    if d.metal:
        out.append("  " + store_scalar)
    else:
        out += ["  if (ALIGNED && base < COLS) {", "    VecT pk;",
                f"    for (int e = 0; e < VEC; ++e) pk.v[e] = {d.to_t('(' + expr + ')')};",
                "    *reinterpret_cast<VecT*>(yr + base) = pk;", "  } else {", "    " + store_scalar, "  }"]
    out.append("}")
    return out


def row_source(op: str, kind: str, k: dict) -> str:
    d = Dialect(kind, fast_math=bool(k.get("fast_math")))
    tpr, rpb, vec, strat = k["threads_per_row"], k.get("rows_per_group", 1), k["vec"], k["strategy"]
    ptr = "device const T*" if d.metal else "const T*"
    optr = "device T*" if d.metal else "T*"
    L = [f"constexpr int TPR = {tpr};", f"constexpr int RPB = {rpb};", f"constexpr int VEC = {vec};",
         "constexpr int NV = (COLS + TPR * VEC - 1) / (TPR * VEC);", f"constexpr float EPS = {EPS}f;"]
    if not d.metal:
        L.append("struct alignas(sizeof(T) * VEC) VecT { T v[VEC]; };")
    L += [f"const int t = {d.tid()};", "const int lane = t % TPR;", f"const int row = {d.bid()} * RPB + t / TPR;",
          "const bool active = row < ROWS;", "const size_t off = (size_t)(active ? row : 0) * COLS;",
          f"{ptr} xr = x + off;", f"{optr} yr = y + off;"]
    if tpr > 32:
        L.append(d.shared("float red[32]"))
    if strat == "registers":
        L.append("float cache[NV * VEC];")
    if op == "softmax":
        if strat == "online":
            L += ["float m = " + d.neg_inf + ";", "float s = 0.0f;"]
            L += _loop(d, ["if (ok) {", f"  if (xv > m) {{ s = s * {d.exp('m - xv')} + 1.0f; m = xv; }}",
                           f"  else {{ s += {d.exp('xv - m')}; }}", "}"], strat, True, d.neg_inf)
            L += ["float mloc = m;"] + _reduce(d, "m", "max", tpr)
            L += [f"s = s * {d.exp('mloc - m')};"] + _reduce(d, "s", "sum", tpr)
        else:
            L += ["float m = " + d.neg_inf + ";"]
            L += _loop(d, [f"if (ok) m = {d.fmax('m', 'xv')};"], strat, True, d.neg_inf)
            L += _reduce(d, "m", "max", tpr)
            L += ["float s = 0.0f;"] + _loop(d, [f"if (ok) s += {d.exp('xv - m')};"], strat, False)
            L += _reduce(d, "s", "sum", tpr)
        L += ["const float inv = 1.0f / s;"]
    elif op == "rmsnorm":
        L += ["float ss = 0.0f;"] + _loop(d, ["if (ok) ss += xv * xv;"], strat, True)
        L += _reduce(d, "ss", "sum", tpr) + [f"const float rs = {d.rsqrt('ss / (float)COLS + EPS')};"]
    elif op == "layernorm":
        if strat == "online":
            L += ["float s1 = 0.0f;", "float s2 = 0.0f;"]
            L += _loop(d, ["if (ok) { s1 += xv; s2 += xv * xv; }"], strat, True)
            L += _reduce(d, "s1", "sum", tpr) + _reduce(d, "s2", "sum", tpr)
            L += ["const float mean = s1 / (float)COLS;",
                  f"const float var = {d.fmax('s2 / (float)COLS - mean * mean', '0.0f')};"]
        else:
            L += ["float s1 = 0.0f;"] + _loop(d, ["if (ok) s1 += xv;"], strat, True)
            L += _reduce(d, "s1", "sum", tpr) + ["const float mean = s1 / (float)COLS;", "float s2 = 0.0f;"]
            L += _loop(d, ["if (ok) s2 += (xv - mean) * (xv - mean);"], strat, False)
            L += _reduce(d, "s2", "sum", tpr) + ["const float var = s2 / (float)COLS;"]
        L += [f"const float rs = {d.rsqrt('var + EPS')};"]
    L += _write(d, op, strat)
    return "\n".join(L)


def render_row_kernel(family: str, tid: str, op: str, k: dict, kind: str) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError(f"template {tid} renders metal or cuda, not {kind!r}")
    names = OPS[op]
    tpr, rpb = k["threads_per_row"], k.get("rows_per_group", 1)
    tg = tpr * rpb
    name = tag(tid, k, kind)
    args = ", ".join(names)
    return f'''{header(family, tid, k, kind)}
_SOURCE = r"""
{row_source(op, kind, k)}
"""
_HEADER = ""
_K = {kernel_ctor(kind, name, names, ["y"])}


def kernel({args}):
    cols = x.shape[-1]
    rows = x.size // cols
    groups = (rows + {rpb} - 1) // {rpb}
    return _K(inputs=[{args}],
              template=[("T", x.dtype), ("ROWS", rows), ("COLS", cols), ("ALIGNED", cols % {k["vec"]} == 0)],
              grid=(groups * {tg}, 1, 1), threadgroup=({tg}, 1, 1),
              output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''


def row_templates(family: str, op: str, predicted: float) -> list[Template]:
    strategies = ["registers", "reread"] + (["online"] if op != "rmsnorm" else [])
    fast = {"fast_math": [False, True]} if op == "softmax" else {}
    simd = Template(
        id=f"{family}.simd_row", pattern="reduction.simd_per_row", kinds=("metal", "cuda"),
        knobs={"threads_per_row": [32, 8, 16], "rows_per_group": [4, 1, 2, 8, 16], "vec": [4, 1, 2, 8],
               "strategy": strategies, **fast},
        render=lambda k, kind: render_row_kernel(family, f"{family}.simd_row", op, k, kind),
        description="one warp / SIMD-group (or a segment of one) per row, shuffles only",
        difficulty=2, predicted_speedup=predicted, valid=lambda k: row_valid(op, k))
    group = Template(
        id=f"{family}.group_row", pattern="reduction.group_per_row", kinds=("metal", "cuda"),
        knobs={"threads_per_row": [256, 64, 128, 512, 1024], "rows_per_group": [1], "vec": [8, 1, 2, 4],
               "strategy": strategies, **fast},
        render=lambda k, kind: render_row_kernel(family, f"{family}.group_row", op, k, kind),
        description="one threadgroup per row, two-level reduction through threadgroup memory",
        difficulty=3, predicted_speedup=predicted, valid=lambda k: row_valid(op, k))
    return [simd, group]


def naive_row(family: str, op: str, kind: str) -> str:
    """One thread per row, three serial passes: the port a CUDA programmer writes first."""
    if kind == "ops":
        raise ValueError("the naive row kernel is a metal or cuda candidate")
    k = {"threads_per_row": 32, "rows_per_group": 1, "vec": 1, "strategy": "reread"}
    d = Dialect(kind)
    ptr = "device const T*" if d.metal else "const T*"
    optr = "device T*" if d.metal else "T*"
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    body = [f"const int row = {gid};", "if (row >= ROWS) return;", "const size_t off = (size_t)row * COLS;",
            f"{ptr} xr = x + off;", f"{optr} yr = y + off;", f"constexpr float EPS = {EPS}f;"]
    if op == "softmax":
        body += [f"float m = {d.neg_inf};", f"for (int i = 0; i < COLS; ++i) m = {d.fmax('m', d.to_f('xr[i]'))};",
                 "float s = 0.0f;", f"for (int i = 0; i < COLS; ++i) s += {d.exp(d.to_f('xr[i]') + ' - m')};",
                 f"for (int i = 0; i < COLS; ++i) yr[i] = {d.to_t(d.exp(d.to_f('xr[i]') + ' - m') + ' / s')};"]
    elif op == "rmsnorm":
        body += ["float ss = 0.0f;", f"for (int i = 0; i < COLS; ++i) {{ float v = {d.to_f('xr[i]')}; ss += v * v; }}",
                 f"const float rs = {d.rsqrt('ss / (float)COLS + EPS')};",
                 f"for (int i = 0; i < COLS; ++i) yr[i] = {d.to_t(d.to_f('xr[i]') + ' * rs * ' + d.to_f('w[i]'))};"]
    else:
        body += ["float s = 0.0f;", f"for (int i = 0; i < COLS; ++i) s += {d.to_f('xr[i]')};",
                 "const float mean = s / (float)COLS;", "float q = 0.0f;",
                 f"for (int i = 0; i < COLS; ++i) {{ float v = {d.to_f('xr[i]')} - mean; q += v * v; }}",
                 f"const float rs = {d.rsqrt('q / (float)COLS + EPS')};",
                 f"for (int i = 0; i < COLS; ++i) yr[i] = {d.to_t('(' + d.to_f('xr[i]') + ' - mean) * rs * ' + d.to_f('w[i]') + ' + ' + d.to_f('b[i]'))};"]
    names = OPS[op]
    args = ", ".join(names)
    tid = f"{family}.naive"
    return f'''{header(family, tid, k, kind)}
_SOURCE = r"""
{chr(10).join(body)}
"""
_HEADER = ""
_K = {kernel_ctor(kind, tag(tid, {}, kind), names, ["y"])}


def kernel({args}):
    cols = x.shape[-1]
    rows = x.size // cols
    return _K(inputs=[{args}], template=[("T", x.dtype), ("ROWS", rows), ("COLS", cols)],
              grid=(((rows + 63) // 64) * 64, 1, 1), threadgroup=(64, 1, 1),
              output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''
