"""Tiled split-KV GQA decode (contiguous or paged), in CUDA and Metal.

Grid: (batch * kv_heads, splits). A threadgroup of NT threads owns one KV head (so all G = Hq/Hkv query heads
of its group share every K/V byte: each KV head is read once) and one slice of the keys, walked in tiles of TK
keys. Per tile, every thread issues all of its K and V loads at once, before any arithmetic (TK * Dh * 4 bytes
in flight per threadgroup), into registers, in two layouts:
  - scores: thread t holds key t / LPK (LPK = NT / TK lanes per key), 8-element chunks sub, sub + LPK, ... of it,
    and computes its partial dot products with the G queries (held in threadgroup memory, broadcast reads);
  - values: thread t holds 8 columns (chunk t % (Dh/8)) of keys kg, kg + KG, ... (kg = t / (Dh/8)).
Scores go to threadgroup memory, one warp per query head does the tile's max / exp2 / sum (online softmax in
the log2 domain), every thread rescales and accumulates its P.V slice, and the next tile's K (then V) is
loaded as soon as the current one is consumed. At the end the key groups merge (shuffles, then threadgroup
memory) and the threadgroup writes its normalised output (one split) or its fp32 partial (o, m, l), which a
second small kernel merges by log-sum-exp weights. The host side picks the split count so that about
target_blocks threadgroups run (batch 1 fills the GPU), tile-aligned.

Knobs: warps (NT = 32 * warps), block_keys (TK), target_blocks.
"""
from __future__ import annotations

from ._src import Dialect, header, kernel_ctor, kv_signature, tag


def tiles_valid(k: dict) -> bool:
    nt, tk = 32 * k["warps"], k["block_keys"]
    if nt % tk:
        return False
    lpk = nt // tk
    # lanes per key a power of two <= 16; K chunks per thread at Dh=128 (16 chunks / LPK) <= 8 (registers)
    return lpk in (1, 2, 4, 8, 16) and 16 // lpk <= 8 and k["target_blocks"] > 0


def _pass1(kind: str, k: dict, paged: bool) -> str:
    d = Dialect(kind)
    nt, tk = 32 * k["warps"], k["block_keys"]
    ni = d.neg_inf
    rowaddr = ("((size_t)(table[b * NBLK + (j) / PAGE] * HKV + hk) * PAGE + ((j) % PAGE)) * DH" if paged
               else "((size_t)(b * HKV + hk) * SEQ + (j)) * DH")
    exp2 = "metal::exp2" if d.metal else "exp2f"

    def load8(dst: str, src: str, ok: str) -> list[str]:
        # 8 consecutive elements (16 bytes in fp16) from src into the register chunk dst (or zeros)
        if d.metal:
            return [f"for (int x = 0; x < 8; ++x) {dst}.v[x] = ({ok}) ? {src}[x] : static_cast<T>(0.0f);"]
        return [f"if ({ok}) {dst} = *reinterpret_cast<const Pk8*>({src});",
                f"else {{ for (int x = 0; x < 8; ++x) {dst}.v[x] = static_cast<T>(0.0f); }}"]

    dev = "device const T*" if d.metal else "const T*"
    L = [
        f"constexpr int NT = {nt};", f"constexpr int TK = {tk};", "constexpr int W = NT / 32;",
        "constexpr int G = HQ / HKV;", "constexpr int LPK = NT / TK;",          # lanes per key (scores)
        "constexpr int NCH = DH / 8;",                                          # 8-element chunks per row
        "constexpr int KCH = NCH / LPK;",                                       # K chunks per thread
        "constexpr int KG = NT / NCH;",                                         # key groups (values)
        "constexpr int VR = TK / KG;",                                          # V rows per thread
        "constexpr float LOG2E = 1.4426950408889634f;",
    ]
    L.append("struct Pk8 { T v[8]; };" if d.metal else "struct alignas(sizeof(T) * 8) Pk8 { T v[8]; };")
    L += [
        f"const int t = {d.tid()};", "const int lane = t & 31;", "const int warp = t >> 5;",
        f"const int bh = {d.bid('x')};", f"const int split = {d.bid('y')};",
        "const int b = bh / HKV;", "const int hk = bh % HKV;",
        "const int s0 = split * CHUNK;", "const int s1 = (s0 + CHUNK < SEQ) ? s0 + CHUNK : SEQ;",
        d.shared("float q_s[G * DH]"), d.shared("float p_s[G * TK]"),
        d.shared("float m_s[G]"), d.shared("float l_s[G]"), d.shared("float c_s[G]"),
        d.shared("float r_s[W * G * DH]"),
        f"const float qscale = {d.rsqrt('(float)DH')} * LOG2E;                 // scores in the log2 domain",
        "for (int i = t; i < G * DH; i += NT)",
        "  q_s[i] = static_cast<float>(Q[(size_t)(b * HQ + hk * G) * DH + i]) * qscale;",
        f"for (int g = t; g < G; g += NT) {{ m_s[g] = {ni}; l_s[g] = 0.0f; c_s[g] = 1.0f; }}",
        "const int kj = t / LPK;            // this thread's key in a tile (scores)",
        "const int ksub = t % LPK;          // its chunks: ksub, ksub + LPK, ...",
        "const int vc = t % NCH;            // its value columns: chunk vc",
        "const int vkg = t / NCH;           // its value keys: vkg, vkg + KG, ...",
        "Pk8 kr[KCH]; Pk8 vr[VR];",
        "float acc[G * 8];",
        "for (int i = 0; i < G * 8; ++i) acc[i] = 0.0f;",
        # first tile's loads
        "{",
        "  const int j = s0 + kj; const bool ok = j < s1;",
        f"  {dev} kp = K + (ok ? {rowaddr} : 0);",
        "  for (int c = 0; c < KCH; ++c) {",
        *["    " + s for s in load8("kr[c]", "(kp + (c * LPK + ksub) * 8)", "ok")],
        "  }",
        "  for (int r = 0; r < VR; ++r) {",
        "    const int jv = s0 + r * KG + vkg; const bool okv = jv < s1;",
        f"    {dev} vp = V + (okv ? {rowaddr.replace('(j)', '(jv)')} : 0) + vc * 8;",
        *["    " + s for s in load8("vr[r]", "vp", "okv")],
        "  }",
        "}",
        d.barrier(),
        "for (int j0 = s0; j0 < s1; j0 += TK) {",
        "  const int jn = j0 + TK;            // the next tile",
        "  // scores: partial dot products over this thread's chunks, then the LPK lanes of a key merge",
        "  float sc[G];",
        "  for (int g = 0; g < G; ++g) sc[g] = 0.0f;",
        "  for (int c = 0; c < KCH; ++c) {",
        "    const int e0 = (c * LPK + ksub) * 8;",
        "    for (int x = 0; x < 8; ++x) {",
        "      const float kv = static_cast<float>(kr[c].v[x]);",
        "      for (int g = 0; g < G; ++g) sc[g] += q_s[g * DH + e0 + x] * kv;",
        "    }",
        "  }",
        "  for (int g = 0; g < G; ++g) {",
        *[f"    {ln}" for ln in ["for (int o = LPK / 2; o > 0; o /= 2) sc[g] += " + d.shfl_xor("sc[g]", "o") + ";"]],
        "  }",
        "  if (ksub == 0) {",
        "    const bool ok = j0 + kj < s1;",
        f"    for (int g = 0; g < G; ++g) p_s[g * TK + kj] = ok ? sc[g] : {ni};",
        "  }",
        "  {  // K registers are free: start the next tile's K loads now",
        "    const int j = jn + kj; const bool ok = jn < s1 && j < s1;",
        f"    {dev} kp = K + (ok ? {rowaddr} : 0);",
        "    for (int c = 0; c < KCH; ++c) {",
        *["      " + s for s in load8("kr[c]", "(kp + (c * LPK + ksub) * 8)", "ok")],
        "    }",
        "  }",
        f"  {d.barrier()}",
        "  // online softmax of the tile: one warp per query head",
        "  for (int g = warp; g < G; g += W) {",
        f"    float mx = {ni};",
        f"    for (int i = lane; i < TK; i += 32) mx = {d.fmax('mx', 'p_s[g * TK + i]')};",
        *[f"    {ln}" for ln in d.warp_reduce("mx", "max", 32)],
        f"    const float mo = m_s[g]; const float mn = {d.fmax('mo', 'mx')};",
        "    float sm = 0.0f;",
        "    for (int i = lane; i < TK; i += 32) {",
        f"      const float p = {exp2}(p_s[g * TK + i] - mn); p_s[g * TK + i] = p; sm += p;",
        "    }",
        *[f"    {ln}" for ln in d.warp_reduce("sm", "sum", 32)],
        "    if (lane == 0) {",
        f"      const float cr = {exp2}(mo - mn);",
        "      c_s[g] = cr; l_s[g] = l_s[g] * cr + sm; m_s[g] = mn;",
        "    }",
        "  }",
        f"  {d.barrier()}",
        "  // P.V: this thread's columns over its keys",
        "  for (int g = 0; g < G; ++g) {",
        "    const float cr = c_s[g];",
        "    for (int x = 0; x < 8; ++x) acc[g * 8 + x] *= cr;",
        "  }",
        "  for (int r = 0; r < VR; ++r) {",
        "    const int jj = r * KG + vkg;",
        "    for (int g = 0; g < G; ++g) {",
        "      const float p = p_s[g * TK + jj];",
        "      for (int x = 0; x < 8; ++x) acc[g * 8 + x] += p * static_cast<float>(vr[r].v[x]);",
        "    }",
        "  }",
        "  for (int r = 0; r < VR; ++r) {   // V registers are free: the next tile's V loads",
        "    const int jv = jn + r * KG + vkg; const bool okv = jn < s1 && jv < s1;",
        f"    {dev} vp = V + (okv ? {rowaddr.replace('(j)', '(jv)')} : 0) + vc * 8;",
        *["    " + s for s in load8("vr[r]", "vp", "okv")],
        "  }",
        f"  {d.barrier()}",
        "}",
        "// merge the key groups: lanes of one warp by shuffles, warps through threadgroup memory",
        "for (int g = 0; g < G; ++g) {",
        "  for (int x = 0; x < 8; ++x) {",
        "    float a = acc[g * 8 + x];",
        f"    for (int o = NCH; o < 32; o *= 2) a += {d.shfl_xor('a', 'o')};",
        "    acc[g * 8 + x] = a;",
        "  }",
        "}",
        "if (lane < NCH) {",
        "  for (int g = 0; g < G; ++g)",
        "    for (int x = 0; x < 8; ++x) r_s[(warp * G + g) * DH + vc * 8 + x] = acc[g * 8 + x];",
        "}",
        d.barrier(),
        "for (int i = t; i < G * DH; i += NT) {",
        "  float a = 0.0f;",
        "  for (int w = 0; w < W; ++w) a += r_s[w * G * DH + i];",
        "  const int g = i / DH; const int e = i % DH;",
        "  const int row = b * HQ + hk * G + g;",
        "  if (SPLITS == 1) {",
        "    out[(size_t)row * DH + e] = static_cast<T>(a / l_s[g]);",
        "  } else {",
        "    const size_t pi = (size_t)row * SPLITS + split;",
        "    opart[pi * DH + e] = a;",
        "    if (e == 0) { mpart[pi] = m_s[g]; lpart[pi] = l_s[g]; }",
        "  }",
        "}",
    ]
    return "\n".join(L)


def _combine(kind: str) -> str:
    """Merge the splits' partials: o = sum_i o_i 2^(m_i - M) / sum_i l_i 2^(m_i - M) (m in the log2 domain)."""
    d = Dialect(kind)
    exp2 = "metal::exp2" if d.metal else "exp2f"
    gid = "(int)thread_position_in_grid.x" if d.metal else "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
    return "\n".join([
        f"const int i = {gid};", "if (i >= ROWS * DH) return;", "const int r = i / DH;", "const int e = i % DH;",
        f"float M = {d.neg_inf};",
        f"for (int s = 0; s < SPLITS; ++s) M = {d.fmax('M', 'mpart[r * SPLITS + s]')};",
        "float num = 0.0f; float den = 0.0f;",
        "for (int s = 0; s < SPLITS; ++s) {",
        f"  const float c = {exp2}(mpart[r * SPLITS + s] - M);",
        "  num += c * opart[((size_t)r * SPLITS + s) * DH + e]; den += c * lpart[r * SPLITS + s];", "}",
        "out[i] = static_cast<T>(num / den);",
    ])


def render_tiles(family: str, tid: str, k: dict, kind: str, paged: bool) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError(f"template {tid} renders metal or cuda candidates")
    name = tag(tid, k, kind)
    ins = ["Q", "K", "V"] + (["table"] if paged else [])
    nt, tk, target = 32 * k["warps"], k["block_keys"], k["target_blocks"]
    sig, dims, call_in, extra_t = kv_signature(paged)
    return f'''{header(family, tid, k, kind)}
_SOURCE = r"""
{_pass1(kind, k, paged)}
"""
_COMBINE = r"""
{_combine(kind)}
"""
_HEADER = ""
NT, TK, TARGET_BLOCKS = {nt}, {tk}, {target}
_K1 = {kernel_ctor(kind, name, ins, ["out", "opart", "mpart", "lpart"])}
_K2 = {kernel_ctor(kind, name + "_combine", ["opart", "mpart", "lpart"], ["out"], src_var="_COMBINE")}


def plan(Bt, Hkv, S):
    """(splits, keys per split): about TARGET_BLOCKS threadgroups, splits a whole number of tiles."""
    tiles = -(-S // TK)
    want = max(1, min(tiles, -(-TARGET_BLOCKS // (Bt * Hkv))))
    chunk = -(-tiles // want) * TK
    return -(-S // chunk), chunk


def kernel({sig}):
{dims}    nch = Dh // 8
    if Dh % 8 or 32 % nch or nch % (NT // TK) or TK % (NT // nch) or Hq % Hkv:
        raise ValueError(f"{tid}: head dim {{Dh}} does not fit tiles of {{TK}} keys over {{NT}} threads, or Hq % Hkv != 0")
    G = Hq // Hkv
    smem = 4 * (G * Dh + G * TK + 3 * G + (NT // 32) * G * Dh)
    if smem > {32768 if kind == "metal" else 49152}:
        raise ValueError(f"{tid}: {{smem}} bytes of threadgroup memory for G={{G}}, Dh={{Dh}}")
    splits, chunk = plan(Bt, Hkv, S)
    rows = Bt * Hq
    one = splits == 1
    tmpl = [("T", q.dtype), ("HQ", Hq), ("HKV", Hkv), ("DH", Dh), ("SEQ", S), {extra_t}("SPLITS", splits), ("CHUNK", chunk)]
    outs = _K1(inputs={call_in}, template=tmpl,
               grid=(Bt * Hkv * NT, splits, 1), threadgroup=(NT, 1, 1),
               output_shapes=[q.shape, (1,) if one else (rows, splits, Dh), (1,) if one else (rows, splits),
                              (1,) if one else (rows, splits)],
               output_dtypes=[q.dtype, mx.float32, mx.float32, mx.float32])
    if one:
        return outs[0]
    return _K2(inputs=outs[1:], template=[("T", q.dtype), ("ROWS", rows), ("DH", Dh), ("SPLITS", splits)],
               grid=(((rows * Dh + 127) // 128) * 128, 1, 1), threadgroup=(128, 1, 1),
               output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''
