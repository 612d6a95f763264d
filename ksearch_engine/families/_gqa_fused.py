"""Split-KV GQA decode (contiguous or paged) with one barrier per key tile and the split merge fused into the
split pass (CUDA), in CUDA and Metal from one source.

Same work split as _gqa_decode.py (grid (batch * kv_heads, splits); a threadgroup owns one KV head, so the G
query heads of its group share every K/V byte, and one slice of the keys, walked in tiles of TK keys with every
K and V load of a tile issued before use and the next tile's loads issued as soon as registers free up), with
these changes to the fixed costs that dominate at batch 1:

* the first tile's K/V loads (and, paged, the block-table reads) are issued before Q is staged into threadgroup
  memory, so the two DRAM round trips of the prologue overlap instead of following each other;
* one barrier per tile instead of three: each warp reduces the max of its own keys' scores with shuffles and
  writes it next to the scores (both double-buffered, so the next tile never waits for this one's readers);
  after the barrier every thread derives the tile max of each query head from the W warp maxima, rescales its
  accumulators and takes exp2 of the scores of its own value keys itself, keeping a private running sum l
  that is merged with the outputs at the end (no softmax phase, no idle warps when G < warps);
* paged: the page ids of the next tile are read one tile ahead, so no K/V load waits for a table read after
  the first tile;
* merge='fused' (CUDA): the threadgroups of a KV head count themselves in a persistent int32 workspace
  (`sem_inout`, one counter per (batch, KV head), zero between calls): each writes its partial (o, m, l), then
  fences and increments; the one that sees SPLITS - 1 arrivals merges the head's splits by log-sum-exp weights
  (reading the partials through L2) and sets the counter back to 0. No second kernel launch, no second kernel's
  fixed cost. Metal renders merge='fused' with the two-kernel merge (MSL before 3.2 gives no cross-threadgroup
  ordering of device memory to rely on); merge='kernel' is the two-kernel merge everywhere.

* stages=2: two register sets of K/V, used by alternate tiles, so two tiles' loads are in flight while one is
  consumed (at the cost of twice the data registers: meant for the smaller tiles and for MHA, G = 1).

Knobs: warps (NT = 32 * warps), block_keys (TK), target_blocks (threadgroups to aim for), merge, stages.
"""
from __future__ import annotations

from ._gqa_decode import _combine
from ._src import Dialect, header, kernel_ctor, kv_signature, tag


FUSED_DESCRIPTION = ("gqa_tiles with one barrier per tile (per-warp score maxima, private running sums), the prologue's "
                     "Q and K/V loads overlapped, page ids read a tile ahead, and (CUDA) the split merge fused into "
                     "the split pass by its last threadgroup per KV head")


def fused_valid(k: dict) -> bool:
    nt, tk = 32 * k["warps"], k["block_keys"]
    if nt % tk:
        return False
    lpk = nt // tk
    return lpk in (1, 2, 4, 8, 16) and 16 // lpk <= 8 and k["target_blocks"] > 0 and k["merge"] in ("fused", "kernel") \
        and k.get("stages", 1) in (1, 2)


def _pass(kind: str, k: dict, paged: bool, fused: bool) -> str:
    d = Dialect(kind)
    nt, tk = 32 * k["warps"], k["block_keys"]
    ni = d.neg_inf
    exp2 = "metal::exp2" if d.metal else "exp2f"
    dev = "device const T*" if d.metal else "const T*"

    def addr(j: str, page: str) -> str:
        # element offset of key row j of this (b, hk): paged through the page id `page`
        if paged:
            return f"((size_t)({page} * HKV + hk) * PAGE + (({j}) % PAGE)) * DH"
        return f"((size_t)(b * HKV + hk) * SEQ + ({j})) * DH"

    def page_of(j: str) -> str:
        return f"(({j}) < s1 ? (int)table[b * NBLK + ({j}) / PAGE] : 0)"

    def load8(dst: str, src: str, ok: str) -> list[str]:
        if d.metal:
            return [f"for (int x = 0; x < 8; ++x) {dst}.v[x] = ({ok}) ? {src}[x] : static_cast<T>(0.0f);"]
        return [f"if ({ok}) {dst} = *reinterpret_cast<const Pk8*>({src});",
                f"else {{ for (int x = 0; x < 8; ++x) {dst}.v[x] = static_cast<T>(0.0f); }}"]

    st = k.get("stages", 1)
    step = "TK" if st == 1 else f"{st} * TK"     # a register set's next tile is this far on

    def issue_k(j0: str, n: int) -> list[str]:
        return [f"{{  // K rows of the tile at {j0}",
                f"  const int j = {j0} + kj; const bool ok = j < s1;",
                f"  {dev} kp = K + (ok ? {addr('j', f'pk{n}')} : 0);",
                "  for (int c = 0; c < KCH; ++c) {",
                *["    " + s for s in load8(f"kr{n}[c]", "(kp + (c * LPK + ksub) * 8)", "ok")],
                "  }",
                *([f"  pk{n} = {page_of(f'{j0} + {step} + kj')};  // the page of this set's next tile"] if paged else []),
                "}"]

    def issue_v(j0: str, n: int) -> list[str]:
        return [f"for (int r = 0; r < VR; ++r) {{  // V rows of the tile at {j0}",
                f"  const int jv = {j0} + r * KG + vkg; const bool okv = jv < s1;",
                f"  {dev} vp = V + (okv ? {addr('jv', f'pv{n}[r]')} : 0) + vc * 8;",
                *["  " + s for s in load8(f"vr{n}[r]", "vp", "okv")],
                *([f"  pv{n}[r] = {page_of(f'{j0} + {step} + r * KG + vkg')};"] if paged else []),
                "}"]

    def tile(j0: str, n: int, buf: str) -> list[str]:
        """One tile at key j0 from register set n (its loads in flight since `step` keys ago); refills the set
        with the tile `step` keys on."""
        tg = "threadgroup " if d.metal else ""
        return [
            f"{{  // the tile at {j0}",
            f"  const int jt = {j0}; const int jn = jt + {step};",
            f"  {tg}float* ps = p_s + ({buf}) * (G * TK);",
            f"  {tg}float* ws = w_s + ({buf}) * (W * G);",
            "  float sc[G];",
            "  for (int g = 0; g < G; ++g) sc[g] = 0.0f;",
            "  for (int c = 0; c < KCH; ++c) {",
            "    const int e0 = (c * LPK + ksub) * 8;",
            "    for (int x = 0; x < 8; ++x) {",
            f"      const float kv = static_cast<float>(kr{n}[c].v[x]);",
            "      for (int g = 0; g < G; ++g) sc[g] += q_s[g * DH + e0 + x] * kv;",
            "    }",
            "  }",
            "  const bool okj = jt + kj < s1;",
            "  for (int g = 0; g < G; ++g) {",
            f"    for (int o = LPK / 2; o > 0; o /= 2) sc[g] += {d.shfl_xor('sc[g]', 'o')};",
            f"    sc[g] = okj ? sc[g] : {ni};",
            "    if (ksub == 0) ps[g * TK + kj] = sc[g];",
            f"    for (int o = LPK; o < 32; o *= 2) sc[g] = {d.fmax('sc[g]', d.shfl_xor('sc[g]', 'o'))};",
            "    if (lane == 0) ws[warp * G + g] = sc[g];   // the max of this warp's keys",
            "  }",
            *["  " + s for s in issue_k("jn", n)],
            f"  {d.barrier()}   // the only barrier of the tile (scores and maxima are double-buffered)",
            "  for (int g = 0; g < G; ++g) {",
            "    float mx = ws[g];",
            f"    for (int w = 1; w < W; ++w) mx = {d.fmax('mx', 'ws[w * G + g]')};",
            f"    const float mn = {d.fmax('m_run[g]', 'mx')};",
            f"    const float cr = {exp2}(m_run[g] - mn);",
            "    m_run[g] = mn; lacc[g] *= cr;",
            "    for (int x = 0; x < 8; ++x) acc[g * 8 + x] *= cr;",
            "  }",
            "  for (int r = 0; r < VR; ++r) {",
            "    const int jj = r * KG + vkg;",
            "    for (int g = 0; g < G; ++g) {",
            f"      const float p = {exp2}(ps[g * TK + jj] - m_run[g]);",
            "      lacc[g] += p;",
            f"      for (int x = 0; x < 8; ++x) acc[g * 8 + x] += p * static_cast<float>(vr{n}[r].v[x]);",
            "    }",
            "  }",
            *["  " + s for s in issue_v("jn", n)],
            "}",
        ]

    L = [
        f"constexpr int NT = {nt};", f"constexpr int TK = {tk};", "constexpr int W = NT / 32;",
        "constexpr int G = HQ / HKV;", "constexpr int LPK = NT / TK;", "constexpr int NCH = DH / 8;",
        "constexpr int KCH = NCH / LPK;", "constexpr int KG = NT / NCH;", "constexpr int VR = TK / KG;",
        "constexpr int QPT = (G * DH + NT - 1) / NT;",
        "constexpr float LOG2E = 1.4426950408889634f;",
        "struct Pk8 { T v[8]; };" if d.metal else "struct alignas(sizeof(T) * 8) Pk8 { T v[8]; };",
        f"const int t = {d.tid()};", "const int lane = t & 31;", "const int warp = t >> 5;",
        f"const int bh = {d.bid('x')};", f"const int split = {d.bid('y')};",
        "const int b = bh / HKV;", "const int hk = bh % HKV;",
        "const int s0 = split * CHUNK;", "const int s1 = (s0 + CHUNK < SEQ) ? s0 + CHUNK : SEQ;",
        d.shared("float q_s[G * DH]"), d.shared("float p_s[2 * G * TK]"), d.shared("float w_s[2 * W * G]"),
        d.shared("float r_s[W * G * DH]"), d.shared("float rl_s[W * G]"), d.shared("float m_s[G]"),
        "const int kj = t / LPK;            // scores: this thread's key in a tile",
        "const int ksub = t % LPK;          // and its chunks ksub, ksub + LPK, ...",
        "const int vc = t % NCH;            // values: this thread's columns (chunk vc)",
        "const int vkg = t / NCH;           // and its keys vkg, vkg + KG, ...",
        "// Q into registers first: its load is in flight while the first tiles' K/V loads are issued",
        "float qv[QPT];",
        "for (int u = 0; u < QPT; ++u) {",
        "  const int i = t + u * NT;",
        "  qv[u] = i < G * DH ? static_cast<float>(Q[(size_t)(b * HQ + hk * G) * DH + i]) : 0.0f;",
        "}",
    ]
    for n in range(st):
        L.append(f"Pk8 kr{n}[KCH]; Pk8 vr{n}[VR];")
        if paged:
            L += [f"int pk{n} = {page_of(f's0 + {n} * TK + kj')};", f"int pv{n}[VR];",
                  f"for (int r = 0; r < VR; ++r) pv{n}[r] = {page_of(f's0 + {n} * TK + r * KG + vkg')};"]
    for n in range(st):
        L += issue_k(f"s0 + {n} * TK", n) + issue_v(f"s0 + {n} * TK", n)
    L += [
        f"const float qscale = {d.rsqrt('(float)DH')} * LOG2E;   // scores in the log2 domain",
        "for (int u = 0; u < QPT; ++u) { const int i = t + u * NT; if (i < G * DH) q_s[i] = qv[u] * qscale; }",
        "float m_run[G]; float lacc[G]; float acc[G * 8];",
        f"for (int g = 0; g < G; ++g) {{ m_run[g] = {ni}; lacc[g] = 0.0f; }}",
        "for (int i = 0; i < G * 8; ++i) acc[i] = 0.0f;",
        d.barrier(),
    ]
    if st == 1:
        L += ["int buf = 0;", "for (int j0 = s0; j0 < s1; j0 += TK) {",
              *["  " + s for s in tile("j0", 0, "buf")], "  buf ^= 1;", "}"]
    else:
        L += ["for (int j0 = s0; j0 < s1; j0 += 2 * TK) {   // two register sets, two tiles in flight",
              *["  " + s for s in tile("j0", 0, "0")],
              "  if (j0 + TK < s1) {",
              *["    " + s for s in tile("j0 + TK", 1, "1")],
              "  }",
              "}"]
    L += [
        "// merge the key groups: lanes of a warp by shuffles, warps through threadgroup memory",
        "for (int g = 0; g < G; ++g) {",
        "  for (int x = 0; x < 8; ++x) {",
        "    float a = acc[g * 8 + x];",
        f"    for (int o = NCH; o < 32; o *= 2) a += {d.shfl_xor('a', 'o')};",
        "    acc[g * 8 + x] = a;",
        "  }",
        "  float l = lacc[g];",
        f"  for (int o = NCH; o < 32; o *= 2) l += {d.shfl_xor('l', 'o')};",
        "  lacc[g] = l;",
        "}",
        "if (lane < NCH) {",
        "  for (int g = 0; g < G; ++g)",
        "    for (int x = 0; x < 8; ++x) r_s[(warp * G + g) * DH + vc * 8 + x] = acc[g * 8 + x];",
        "}",
        "if (lane == 0) { for (int g = 0; g < G; ++g) rl_s[warp * G + g] = lacc[g]; }",
        "if (t == 0) { for (int g = 0; g < G; ++g) m_s[g] = m_run[g]; }",
        d.barrier(),
        "for (int i = t; i < G * DH; i += NT) {",
        "  const int g = i / DH; const int e = i % DH;",
        "  float a = 0.0f; float l = 0.0f;",
        "  for (int w = 0; w < W; ++w) { a += r_s[w * G * DH + i]; l += rl_s[w * G + g]; }",
        "  const int row = b * HQ + hk * G + g;",
        "  if (SPLITS == 1) {",
        "    out[(size_t)row * DH + e] = static_cast<T>(a / l);",
        "  } else {",
        "    const size_t pi = (size_t)row * SPLITS + split;",
        "    opart[pi * DH + e] = a;",
        "    if (e == 0) { mpart[pi] = m_s[g]; lpart[pi] = l; }",
        "  }",
        "}",
    ]
    if fused:
        # CUDA only: the last threadgroup of this (b, hk) to finish merges its SPLITS partials
        L += [
            "if (SPLITS > 1) {",
            "  int* sem = const_cast<int*>(reinterpret_cast<const int*>(sem_inout));",
            "  __shared__ int last_s;",
            "  __threadfence();                 // this thread's partials are visible GPU-wide before the count",
            "  __syncthreads();",
            "  if (t == 0) last_s = (atomicAdd(sem + bh, 1) == SPLITS - 1);",
            "  __syncthreads();",
            "  if (last_s) {",
            "    __threadfence();               // the others' partials are read after their counts",
            "    // m and l of the head's G x SPLITS partials into threadgroup memory (r_s is free now)",
            "    float* mm = r_s; float* ll = r_s + G * SPLITS;",
            "    for (int i = t; i < G * SPLITS; i += NT) {",
            "      const size_t pi = (size_t)(b * HQ + hk * G) * SPLITS + i;",
            "      mm[i] = __ldcg(mpart + pi); ll[i] = __ldcg(lpart + pi);",
            "    }",
            "    __syncthreads();",
            "    for (int i = t; i < G * DH; i += NT) {",
            "      const int g = i / DH; const int e = i % DH;",
            "      const int row = b * HQ + hk * G + g;",
            f"      float M = {ni};",
            "      for (int s = 0; s < SPLITS; ++s) M = fmaxf(M, mm[g * SPLITS + s]);",
            "      float num = 0.0f; float den = 0.0f;",
            "      for (int s = 0; s < SPLITS; ++s) {",
            "        const float c = exp2f(mm[g * SPLITS + s] - M);",
            "        num += c * __ldcg(opart + ((size_t)row * SPLITS + s) * DH + e); den += c * ll[g * SPLITS + s];",
            "      }",
            "      out[(size_t)row * DH + e] = static_cast<T>(num / den);",
            "    }",
            "    if (t == 0) sem[bh] = 0;        // zero again for the next call",
            "  }",
            "}",
        ]
    return "\n".join(L)


def render_fused(family: str, tid: str, k: dict, kind: str, paged: bool) -> str:
    if kind not in ("metal", "cuda"):
        raise ValueError(f"template {tid} renders metal or cuda candidates")
    name = tag(tid, k, kind)
    fused = k["merge"] == "fused" and kind == "cuda"
    ins = ["Q", "K", "V"] + (["table"] if paged else [])
    nt, tk, target = 32 * k["warps"], k["block_keys"], k["target_blocks"]
    sig, dims, call_in, extra_t = kv_signature(paged)
    fused_ctor = (kernel_ctor(kind, name + "_fused", ins + ["sem_inout"], ["out", "opart", "mpart", "lpart"],
                              src_var="_SOURCE_FUSED") if fused else "None")
    fused_src = _pass(kind, k, paged, True) if fused else ""
    return f'''{header(family, tid, k, kind)}
_SOURCE = r"""
{_pass(kind, k, paged, False)}
"""
_SOURCE_FUSED = r"""
{fused_src}
"""
_COMBINE = r"""
{_combine(kind)}
"""
_HEADER = ""
NT, TK, TARGET_BLOCKS, FUSED = {nt}, {tk}, {target}, {fused}
_K1 = {kernel_ctor(kind, name, ins, ["out", "opart", "mpart", "lpart"])}
_KF = {fused_ctor}
_K2 = {kernel_ctor(kind, name + "_combine", ["opart", "mpart", "lpart"], ["out"], src_var="_COMBINE")}
_SEM = {{}}


def _sem(n):
    """The persistent arrival counters of the fused merge: zero between calls (the merging threadgroup resets its
    own), one per (batch, KV head); allocated and zeroed once per size."""
    s = _SEM.get(n)
    if s is None:
        s = mx.zeros((n,), dtype=mx.int32)
        mx.eval(s)
        _SEM[n] = s
    return s


def plan(Bt, Hkv, S, cap):
    """(splits, keys per split): about TARGET_BLOCKS threadgroups, a whole number of tiles each, at most cap."""
    tiles = -(-S // TK)
    want = max(1, min(tiles, cap, -(-TARGET_BLOCKS // (Bt * Hkv))))
    chunk = -(-tiles // want) * TK
    return -(-S // chunk), chunk


def kernel({sig}):
{dims}    nch = Dh // 8
    if Dh % 8 or 32 % nch or nch % (NT // TK) or TK % (NT // nch) or Hq % Hkv:
        raise ValueError(f"{tid}: head dim {{Dh}} does not fit tiles of {{TK}} keys over {{NT}} threads, or Hq % Hkv != 0")
    G = Hq // Hkv
    W = NT // 32
    smem = 4 * (G * Dh + 2 * G * TK + 2 * W * G + W * G * Dh + W * G + G)
    if smem > {32768 if kind == "metal" else 49152}:
        raise ValueError(f"{tid}: {{smem}} bytes of threadgroup memory for G={{G}}, Dh={{Dh}}")
    # the fused merge stages G x splits (m, l) pairs in the W x G x Dh floats of r_s
    splits, chunk = plan(Bt, Hkv, S, (W * Dh) // 2)
    rows = Bt * Hq
    one = splits == 1
    tmpl = [("T", q.dtype), ("HQ", Hq), ("HKV", Hkv), ("DH", Dh), ("SEQ", S), {extra_t}("SPLITS", splits), ("CHUNK", chunk)]
    shapes = [q.shape, (1,) if one else (rows, splits, Dh), (1,) if one else (rows, splits), (1,) if one else (rows, splits)]
    dtypes = [q.dtype, mx.float32, mx.float32, mx.float32]
    grid, tg = (Bt * Hkv * NT, splits, 1), (NT, 1, 1)
    if FUSED and not one:
        return _KF(inputs={call_in} + [_sem(Bt * Hkv)], template=tmpl, grid=grid, threadgroup=tg,
                   output_shapes=shapes, output_dtypes=dtypes)[0]
    outs = _K1(inputs={call_in}, template=tmpl, grid=grid, threadgroup=tg, output_shapes=shapes, output_dtypes=dtypes)
    if one:
        return outs[0]
    return _K2(inputs=outs[1:], template=[("T", q.dtype), ("ROWS", rows), ("DH", Dh), ("SPLITS", splits)],
               grid=(((rows * Dh + 127) // 128) * 128, 1, 1), threadgroup=(128, 1, 1),
               output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''
