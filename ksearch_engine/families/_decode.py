"""Split-KV decode attention kernels (flash-decoding), contiguous or paged, in Metal and CUDA.

One query token per (batch, query head); K/V (batch, kv_heads, S, Dh) contiguous, or pages
(num_pages, kv_heads, P, Dh) reached through a block table (batch, S/P). A threadgroup owns one KV head
(so the G = Hq/Hkv query heads of a GQA group share every K/V load) and one of SPLITS slices of the keys.
LPK lanes cooperate on a key (each holds Dh/LPK elements), 32/LPK keys per warp per step, online softmax
per lane group; groups merge by shuffles, warps through threadgroup memory. With SPLITS > 1 a second kernel
merges the slices (log-sum-exp weights).

Knobs: lanes_per_key, warps, splits, fast_exp.
"""
from __future__ import annotations

from ._src import Dialect, header, kernel_ctor, kv_signature, tag


def decode_valid(k: dict) -> bool:
    # registers: U keys x (K and V) x Dh/LPK elements per lane, for Dh up to 128
    return (k["lanes_per_key"] in (4, 8, 16, 32) and k["warps"] * 32 <= 1024
            and k.get("unroll", 1) * 128 // k["lanes_per_key"] <= 32)


def _pass1(kind: str, k: dict, paged: bool, prefill: bool = False) -> str:
    """The split-KV kernel; with `prefill`, a threadgroup owns QB consecutive query rows of one head instead of
    the GQA group of one KV head (flash-style prefill without tensor cores), causal when CAUSAL."""
    d = Dialect(kind, fast_math=k.get("fast_exp", False))
    ni = d.neg_inf
    kaddr = ("((size_t)(table[b * NBLK + j / PAGE] * HKV + hk) * PAGE + (j % PAGE)) * DH" if paged
             else "((size_t)(b * HKV + hk) * SEQ + j) * DH")
    if d.metal:
        loadk = ["for (int e = 0; e < EPL; ++e) kv[e] = ok ? static_cast<float>(K[kb + e]) : 0.0f;"]
        loadv = ["for (int e = 0; e < EPL; ++e) vv[e] = ok ? static_cast<float>(V[kb + e]) : 0.0f;"]
    else:
        loadk = ["if (ok) { const Pk pk = *reinterpret_cast<const Pk*>(K + kb);",
                 "  for (int e = 0; e < EPL; ++e) kv[e] = static_cast<float>(pk.v[e]); }",
                 "else { for (int e = 0; e < EPL; ++e) kv[e] = 0.0f; }"]
        loadv = ["if (ok) { const Pk pv = *reinterpret_cast<const Pk*>(V + kb);",
                 "  for (int e = 0; e < EPL; ++e) vv[e] = static_cast<float>(pv.v[e]); }",
                 "else { for (int e = 0; e < EPL; ++e) vv[e] = 0.0f; }"]
    if prefill:
        write_final = "if (q0 + g < SEQ) out[((size_t)(b * HQ + h) * SEQ + q0 + g) * DH + e] = static_cast<T>(A / Ls);"
        qaddr = "((size_t)(b * HQ + h) * SEQ + ((q0 + g < SEQ) ? q0 + g : SEQ - 1)) * DH"
        mapping = ["const bool CAUSAL = causal[0] > 0.5f;     // the task's flag, read on the device",
                   "const int bh = " + d.bid("x") + ";", "const int b = bh / HQ;", "const int h = bh % HQ;",
                   "const int hk = h / (HQ / HKV);", "const int q0 = " + d.bid("y") + " * G;", "const int split = 0;",
                   "const int s0 = 0;", "const int s1 = CAUSAL ? ((q0 + G < SEQ) ? q0 + G : SEQ) : SEQ;"]
        keep = "ok && (!CAUSAL || j <= q0 + g)"
        gdef = f"constexpr int G = {k['q_per_group']};"
    else:
        write_final = ("if (SPLITS == 1) { out[(size_t)(b * HQ + hq) * DH + e] = static_cast<T>(A / Ls); }\n"
                       "  else { const size_t pi = (size_t)(b * HQ + hq) * SPLITS + split;\n"
                       "    opart[pi * DH + e] = A;\n"
                       "    if (e == 0) { mpart[pi] = M; lpart[pi] = Ls; } }")
        qaddr = "(size_t)(b * HQ + hk * G + g) * DH"
        mapping = [f"const int bh = {d.bid('x')};", f"const int split = {d.bid('y')};",
                   "const int b = bh / HKV;", "const int hk = bh % HKV;",
                   "const int chunk = (SEQ + SPLITS - 1) / SPLITS;",
                   "const int s0 = split * chunk;", "const int s1 = (s0 + chunk < SEQ) ? s0 + chunk : SEQ;"]
        keep = "ok"
        gdef = "constexpr int G = HQ / HKV;"
    L = [
        f"constexpr int LPK = {k['lanes_per_key']};", f"constexpr int W = {k['warps']};",
        f"constexpr int U = {k.get('unroll', 1)};",
        "constexpr int EPL = DH / LPK;", "constexpr int KPW = 32 / LPK;", gdef,
    ]
    if not d.metal:
        L.append("struct alignas(sizeof(T) * EPL) Pk { T v[EPL]; };")
    L += [
        f"const int t = {d.tid()};", "const int lane = t & 31;", "const int warp = t >> 5;",
        "const int grp = lane / LPK;", "const int sub = lane % LPK;",
        *mapping,
        f"const float scale = {d.rsqrt('(float)DH')};",
        "float q[G * EPL]; float m[G]; float l[G]; float acc[G * EPL];",
        "for (int g = 0; g < G; ++g) {",
        f"  m[g] = {ni}; l[g] = 0.0f;",
        "  for (int e = 0; e < EPL; ++e) {",
        f"    q[g * EPL + e] = static_cast<float>(Q[{qaddr} + sub * EPL + e]) * scale;",
        "    acc[g * EPL + e] = 0.0f;", "  }", "}",
        "for (int j0 = s0 + warp * KPW * U; j0 < s1; j0 += W * KPW * U) {",
        "  float kv[U][EPL]; float vv[U][EPL];",
        "  for (int u = 0; u < U; ++u) {             // U keys per lane group in flight at once",
        "    const int j = j0 + u * KPW + grp;", "    const bool ok = j < s1;",
        f"    const size_t kb = (ok ? {kaddr} : 0) + sub * EPL;",
        *["    " + ln.replace("kv[e]", "kv[u][e]").replace("vv[e]", "vv[u][e]") for ln in loadk + loadv],
        "  }",
        "  for (int u = 0; u < U; ++u) {",
        "    const int j = j0 + u * KPW + grp;", "    const bool ok = j < s1;",
        "    float sc[G];",
        "    for (int g = 0; g < G; ++g) {", "      float s = 0.0f;",
        "      for (int e = 0; e < EPL; ++e) s += q[g * EPL + e] * kv[u][e];",
        f"      for (int o = LPK / 2; o > 0; o /= 2) s += {d.shfl_xor('s', 'o')};",
        "      sc[g] = s;", "    }",
        "    if (ok) {",
        "      for (int g = 0; g < G; ++g) {",
        f"        if (!({keep})) continue;",
        f"        const float mn = {d.fmax('m[g]', 'sc[g]')};",
        f"        const float corr = {d.exp('m[g] - mn')};", f"        const float p = {d.exp('sc[g] - mn')};",
        "        l[g] = l[g] * corr + p;",
        "        for (int e = 0; e < EPL; ++e) acc[g * EPL + e] = acc[g * EPL + e] * corr + p * vv[u][e];",
        "        m[g] = mn;", "      }", "    }", "  }", "}",
        "for (int o = LPK; o < 32; o *= 2) {           // merge the key groups of this warp",
        "  for (int g = 0; g < G; ++g) {",
        f"    const float om = {d.shfl_xor('m[g]', 'o')};", f"    const float ol = {d.shfl_xor('l[g]', 'o')};",
        f"    const float mn = {d.fmax('m[g]', 'om')};",
        f"    const float c1 = {d.exp('m[g] - mn')};", f"    const float c2 = {d.exp('om - mn')};",
        "    l[g] = l[g] * c1 + ol * c2;",
        "    for (int e = 0; e < EPL; ++e) {",
        f"      const float oa = {d.shfl_xor('acc[g * EPL + e]', 'o')};",
        "      acc[g * EPL + e] = acc[g * EPL + e] * c1 + oa * c2;", "    }",
        "    m[g] = mn;", "  }", "}",
        "constexpr int WG = W * G;", "constexpr int WGD = W * G * DH;",
        d.shared("float sm_m[WG]"), d.shared("float sm_l[WG]"), d.shared("float sm_a[WGD]"),
        "if (grp == 0) {", "  for (int g = 0; g < G; ++g) {",
        "    for (int e = 0; e < EPL; ++e) sm_a[(warp * G + g) * DH + sub * EPL + e] = acc[g * EPL + e];",
        "    if (sub == 0) { sm_m[warp * G + g] = m[g]; sm_l[warp * G + g] = l[g]; }", "  }", "}",
        d.barrier(),
        "for (int i = t; i < G * DH; i += W * 32) {",
        "  const int g = i / DH;", "  const int e = i % DH;",
        *([] if prefill else ["  const int hq = hk * G + g;"]),
        f"  float M = {ni};",
        f"  for (int w = 0; w < W; ++w) M = {d.fmax('M', 'sm_m[w * G + g]')};",
        "  float Ls = 0.0f; float A = 0.0f;",
        "  for (int w = 0; w < W; ++w) {",
        f"    const float c = {d.exp('sm_m[w * G + g] - M')};",
        "    Ls += c * sm_l[w * G + g]; A += c * sm_a[(w * G + g) * DH + e];", "  }",
        "  " + write_final, "}",
    ]
    return "\n".join(L)


def _combine(kind: str) -> str:
    d = Dialect(kind)
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    return "\n".join([
        f"const int i = {gid};", "if (i >= ROWS * DH) return;", "const int r = i / DH;", "const int e = i % DH;",
        f"float M = {d.neg_inf};",
        f"for (int s = 0; s < SPLITS; ++s) M = {d.fmax('M', 'mpart[r * SPLITS + s]')};",
        "float num = 0.0f; float den = 0.0f;",
        "for (int s = 0; s < SPLITS; ++s) {",
        f"  const float c = {d.exp('mpart[r * SPLITS + s] - M')};",
        "  num += c * opart[((size_t)r * SPLITS + s) * DH + e]; den += c * lpart[r * SPLITS + s];", "}",
        "out[i] = static_cast<T>(num / den);",
    ])




def render_decode(family: str, tid: str, k: dict, kind: str, paged: bool) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError(f"template {tid} renders metal or cuda candidates")
    name = tag(tid, k, kind)
    ins = ["Q", "K", "V"] + (["table"] if paged else [])
    splits, threads = k["splits"], k["warps"] * 32
    sig, dims, call_in, extra_t = kv_signature(paged)
    return f'''{header(family, tid, k, kind)}
_SOURCE = r"""
{_pass1(kind, k, paged)}
"""
_COMBINE = r"""
{_combine(kind)}
"""
_HEADER = ""
SPLITS = {splits}
_K1 = {kernel_ctor(kind, name, ins, ["out", "opart", "mpart", "lpart"])}
_K2 = {kernel_ctor(kind, name + "_combine", ["opart", "mpart", "lpart"], ["out"], src_var="_COMBINE")}


def kernel({sig}):
{dims}    if Dh % {k["lanes_per_key"]} or (Dh // {k["lanes_per_key"]}) & (Dh // {k["lanes_per_key"]} - 1) or Hq % Hkv:
        raise ValueError(f"{tid}: head dim {{Dh}} must be a power-of-two multiple of lanes_per_key and Hq % Hkv == 0")
    rows = Bt * Hq
    one = SPLITS == 1
    tmpl = [("T", q.dtype), ("HQ", Hq), ("HKV", Hkv), ("DH", Dh), ("SEQ", S), {extra_t}("SPLITS", SPLITS)]
    outs = _K1(inputs={call_in}, template=tmpl,
               grid=(Bt * Hkv * {threads}, SPLITS, 1), threadgroup=({threads}, 1, 1),
               output_shapes=[q.shape, (1,) if one else (rows, SPLITS, Dh), (1,) if one else (rows, SPLITS),
                              (1,) if one else (rows, SPLITS)],
               output_dtypes=[q.dtype, mx.float32, mx.float32, mx.float32])
    if one:
        return outs[0]
    return _K2(inputs=outs[1:], template=[("T", q.dtype), ("ROWS", rows), ("DH", Dh), ("SPLITS", SPLITS)],
               grid=(((rows * Dh + 127) // 128) * 128, 1, 1), threadgroup=(128, 1, 1),
               output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''


def naive_decode(family: str, kind: str, paged: bool) -> str:
    """One thread per (batch, query head, output element): loops over every key twice; no sharing."""
    d = Dialect(kind)
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    kaddr = ("((size_t)(table[b * NBLK + j / PAGE] * HKV + hk) * PAGE + (j % PAGE)) * DH" if paged
             else "((size_t)(b * HKV + hk) * SEQ + j) * DH")
    src = "\n".join([
        f"const int i = {gid};", "if (i >= BQ * HQ * DH) return;",
        "const int e = i % DH;", "const int bq = i / DH;", "const int b = bq / HQ;", "const int hk = (bq % HQ) / (HQ / HKV);",
        f"const float scale = {d.rsqrt('(float)DH')};",
        f"float M = {d.neg_inf};",
        "for (int j = 0; j < SEQ; ++j) {", f"  const size_t kb = {kaddr};", "  float s = 0.0f;",
        "  for (int c = 0; c < DH; ++c) s += static_cast<float>(Q[(size_t)bq * DH + c]) * static_cast<float>(K[kb + c]);",
        f"  M = {d.fmax('M', 's * scale')};", "}",
        "float num = 0.0f; float den = 0.0f;",
        "for (int j = 0; j < SEQ; ++j) {", f"  const size_t kb = {kaddr};", "  float s = 0.0f;",
        "  for (int c = 0; c < DH; ++c) s += static_cast<float>(Q[(size_t)bq * DH + c]) * static_cast<float>(K[kb + c]);",
        f"  const float p = {d.exp('s * scale - M')};", "  den += p; num += p * static_cast<float>(V[kb + e]);", "}",
        "out[i] = static_cast<T>(num / den);",
    ])
    tid = f"{family}.naive"
    ins = ["Q", "K", "V"] + (["table"] if paged else [])
    if paged:
        sig, dims = "q, k_pages, v_pages, block_table", ("    Bt, Hq, _, Dh = q.shape\n    Hkv, P = k_pages.shape[1], k_pages.shape[2]\n"
                                                          "    nblk = block_table.shape[1]\n    S = nblk * P\n")
        call_in, extra_t = "[q, k_pages, v_pages, block_table]", '("NBLK", nblk), ("PAGE", P), '
    else:
        sig, dims = "q, k, v", "    Bt, Hq, _, Dh = q.shape\n    Hkv, S = k.shape[1], k.shape[2]\n"
        call_in, extra_t = "[q, k, v]", ""
    return f'''{header(family, tid, {}, kind)}
_SOURCE = r"""
{src}
"""
_HEADER = ""
_K = {kernel_ctor(kind, tag(tid, {}, kind), ins, ["out"])}


def kernel({sig}):
{dims}    n = Bt * Hq * Dh
    return _K(inputs={call_in}, template=[("T", q.dtype), ("BQ", Bt), ("HQ", Hq), ("HKV", Hkv), ("DH", Dh), ("SEQ", S), {extra_t}],
              grid=(((n + 127) // 128) * 128, 1, 1), threadgroup=(128, 1, 1),
              output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''


def render_prefill(family: str, tid: str, k: dict, kind: str) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError(f"template {tid} renders metal or cuda candidates")
    name = tag(tid, k, kind)
    threads, qb = k["warps"] * 32, k["q_per_group"]
    return f'''{header(family, tid, k, kind)}
_SOURCE = r"""
{_pass1(kind, k, paged=False, prefill=True)}
"""
_HEADER = ""
_K = {kernel_ctor(kind, name, ["Q", "K", "V", "causal"], ["out"])}


def kernel(q, k, v, causal):
    Bt, Hq, L, Dh = q.shape
    Hkv = k.shape[1]
    if Dh % {k["lanes_per_key"]} or (Dh // {k["lanes_per_key"]}) & (Dh // {k["lanes_per_key"]} - 1) or Hq % Hkv or k.shape[2] != L:
        raise ValueError(f"{tid}: needs self-attention (as many keys as queries), Hq % Hkv == 0 and a power-of-two head dim split over lanes_per_key, got q {{q.shape}} k {{k.shape}}")
    return _K(inputs=[q, k, v, causal],
              template=[("T", q.dtype), ("HQ", Hq), ("HKV", Hkv), ("DH", Dh), ("SEQ", L)],
              grid=(Bt * Hq * {threads}, (L + {qb} - 1) // {qb}, 1), threadgroup=({threads}, 1, 1),
              output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''
