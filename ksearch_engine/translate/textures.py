"""Texture reads in a port: a texture becomes an ordinary input buffer plus its geometry and addressing.

A kernel that reads a texture reference (``texture<T, dim, mode> tex;`` at file scope) or a texture object (a
``cudaTextureObject_t`` parameter) is rewritten, before translation, into a kernel without textures:

* the texture object parameter ``tex`` becomes ``const R* tex, int tex__w, int tex__h, int tex__d, int tex__m``
  (R: the type the fetch returns); a texture reference ``tex`` adds the same parameters after the kernel's own;
* ``tex2D<R>(tex, x, y)`` (and tex1Dfetch / tex1D / tex3D / tex1DLayered / tex2DLayered / texCubemap) becomes a
  call of a plain ``__device__`` helper doing the index arithmetic of the texture unit: normalized coordinates,
  point or linear filtering (8-bit fractional weights), wrap / clamp / mirror / border addressing.

``tex`` holds every texel already converted to R (a normalized-float read of 8-bit data holds the floats), x
fastest, then y, then z (depth, layer or cube face); ``tex__m`` packs the addressing:
bits 0-1 / 2-3 / 4-5 the address mode of x / y / z (0 wrap, 1 clamp, 2 mirror, 3 border), bit 6 linear
filtering, bit 7 normalized coordinates. The capture runtime (sim/ksim_tex.h) records exactly that per launch
(``textures.jsonl``); :func:`texture_args` turns it into the port's arguments. The helpers here and ksim_tex.h's
``sample`` must do the same arithmetic in the same order.

Surfaces (a ``cudaSurfaceObject_t`` parameter, or a ``surface<void, dim>`` reference) become a buffer of the
array's elements, ``T* s, int s__w, int s__h, int s__d`` (``const`` where the kernel only reads it), T the type the
kernel reads / writes (surf2Dread<T>, the written value's type); ``surf2Dwrite(v, s, xb, y)`` stores
``s[(z * h + y) * w + xb / sizeof(T)]`` (x is in bytes, as in CUDA) after the boundary mode (zero: dropped / read as
zero; clamp; trap: the original faults, the port drops the access). The capture records each surface's array
before and after a launch (textures.jsonl, "surface": 1): :func:`surface_args` makes the port's input and the
expected output of it. Cubemap surfaces are refused.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ..sim.preprocess import split_top

OBJECT_TYPES = ("cudaTextureObject_t", "CUtexObject")
SURFACE_TYPES = ("cudaSurfaceObject_t", "CUsurfObject")
FETCHES = ("tex1Dfetch", "tex1DLayered", "tex2DLayered", "texCubemap", "tex1D", "tex2D", "tex3D")
SURFACE_CALLS = re.compile(r"\b(surf[123]D(?:Layered)?(?:read|write)|surfCubemap\w*)\s*(?:<[^<>()]*>)?\s*\(")
_DECL = re.compile(r"^[ \t]*(?:static\s+)?texture\s*<\s*([\w\s]+?)\s*(?:,\s*([^,<>]+?)\s*(?:,\s*([\w:]+)\s*)?)?>\s*"
                   r"([A-Za-z_]\w*)\s*;", re.M)
_NORM_FLOAT = {"unsigned char": "float", "uchar": "float", "char": "float", "signed char": "float",
               "short": "float", "unsigned short": "float", "ushort": "float"}
_VEC = re.compile(r"^(u?char|u?short|u?int|float)([1-4])$")
SCALARS = {"float", "int", "unsigned int", "unsigned", "uint", "short", "unsigned short", "ushort",
           "char", "signed char", "unsigned char", "uchar"}


class TextureError(Exception):
    """A texture construct the port cannot take: message names the construct; line is 0-based."""

    def __init__(self, construct: str, line: int, message: str):
        super().__init__(message)
        self.construct, self.line, self.message = construct, line, message


def references(source: str) -> dict[str, tuple[str, int, bool]]:
    """File-scope texture references: {name: (element type, dimensions, normalized-float read)}."""
    out = {}
    for m in _DECL.finditer(source):
        t = " ".join(m.group(1).split())
        dim = int(m.group(2)) if m.group(2) and m.group(2).strip().isdigit() else 1
        out[m.group(4)] = (t, dim, bool(m.group(3) and "NormalizedFloat" in m.group(3)))
    return out


def read_type(t: str, norm: bool) -> str:
    """The type a fetch of a texture of element type `t` returns."""
    if not norm:
        return t
    if t in _NORM_FLOAT:
        return "float"
    v = _VEC.match(t)
    return f"float{v.group(2)}" if v else t


def _comps(r: str) -> tuple[str, int]:
    v = _VEC.match(r)
    if v:
        base = {"uchar": "unsigned char", "ushort": "unsigned short", "uint": "unsigned int"}.get(v.group(1), v.group(1))
        return base, int(v.group(2))
    return r, 1


def _match_paren(text: str, i: int) -> int:
    """Index of the parenthesis closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _split_args(s: str) -> list[str]:
    """Call arguments at top-level commas; no arguments for an empty list."""
    return split_top(s, "([{", ")]}") if s.strip() else []


def _ident(r: str) -> str:
    return re.sub(r"\W+", "_", r.strip())


# ---- the helpers (the same arithmetic as ksim_tex.h's sample) ---------------------------------------------
_COMMON = """
__device__ int ks_tex_addr(int i, int n, int mode) {
    if (mode == 0) { int r = i % n; return r < 0 ? r + n : r; }
    if (mode == 2) { int p = 2 * n; int k = i % p; if (k < 0) k += p; return k < n ? k : p - 1 - k; }
    if (mode == 3) return (i < 0 || i >= n) ? -1 : i;
    return i < 0 ? 0 : (i >= n ? n - 1 : i);
}
__device__ float ks_tex_frac8(float a) { return floorf(a * 256.0f + 0.5f) * (1.0f / 256.0f); }
__device__ int ks_cube_face(float x, float y, float z) {
    float ax = fabsf(x), ay = fabsf(y), az = fabsf(z);
    if (ax >= ay && ax >= az) return x >= 0.0f ? 0 : 1;
    if (ay >= az) return y >= 0.0f ? 2 : 3;
    return z >= 0.0f ? 4 : 5;
}
__device__ float ks_cube_u(float x, float y, float z) {
    int f = ks_cube_face(x, y, z);
    float m = f < 2 ? fabsf(x) : (f < 4 ? fabsf(y) : fabsf(z));
    float s = f == 0 ? -z : (f == 1 ? z : (f == 5 ? -x : x));
    return (s / m + 1.0f) * 0.5f;
}
__device__ float ks_cube_v(float x, float y, float z) {
    int f = ks_cube_face(x, y, z);
    float m = f < 2 ? fabsf(x) : (f < 4 ? fabsf(y) : fabsf(z));
    float t = f == 2 ? z : (f == 3 ? -z : -y);
    return (t / m + 1.0f) * 0.5f;
}
"""


def _helpers(r: str, kinds: set[str]) -> str:
    """__device__ helpers reading a texture of texels of type `r` (CUDA text the translator ports as it ports any
    helper)."""
    base, n = _comps(r)
    rid = _ident(r)
    vec = n > 1
    comps = "xyzw"[:n]
    zero = f"make_{r}({', '.join(['0'] * n)})" if vec else f"({r})0"
    out = [f"""
__device__ {r} ks_texel_{rid}(const {r}* t, int w, int h, int x, int y, int z) {{
    if (x < 0 || y < 0 || z < 0) return {zero};
    return t[(z * h + y) * w + x];
}}"""]
    if "fetch" in kinds:
        out.append(f"""
__device__ {r} ks_tex1Dfetch_{rid}(const {r}* t, int w, int i) {{
    return ks_texel_{rid}(t, w, 1, ks_tex_addr(i, w, 3), 0, 0);
}}""")
    for nd in sorted({int(k[-1]) for k in kinds if k.startswith("dim")}):
        coords = ["x", "y", "z"][:nd]
        sizes = ["w", "h", "d"]
        lines = [f"__device__ {r} ks_tex{nd}D_{rid}(const {r}* t, int w, int h, int d, int m, "
                 + ", ".join(f"float {c}" for c in coords) + ", int layer) {"]
        for k, c in enumerate(coords):
            lines.append(f"    float {c.upper()} = (m & 128) ? {c} * (float){sizes[k]} : {c};")
        lz = "layer >= d ? -1 : layer"
        # point filtering
        lines.append("    if ((m & 64) == 0) {")
        idx = [f"ks_tex_addr((int)floorf({c.upper()}), {sizes[k]}, (m >> {2 * k}) & 3)" for k, c in enumerate(coords)]
        idx += ["0", "__LZ__"] if nd == 1 else (["__LZ__"] if nd == 2 else [])
        lines.append(f"        return ks_texel_{rid}(t, w, h, {', '.join(idx)});")
        lines.append("    }")
        for k, c in enumerate(coords):
            C = c.upper()
            lines.append(f"    float {c}b = {C} - 0.5f; float f{c} = floorf({c}b); float a{c} = ks_tex_frac8({c}b - f{c});")
            lines.append(f"    int {c}0 = ks_tex_addr((int)f{c}, {sizes[k]}, (m >> {2 * k}) & 3);"
                         f" int {c}1 = ks_tex_addr((int)f{c} + 1, {sizes[k]}, (m >> {2 * k}) & 3);")
        acc = [f"    {r} acc = {zero};" if vec else "    float acc = 0.0f;"]
        for q in range(1 << nd):
            wgt = "1.0f"
            ix = []
            for k, c in enumerate(coords):
                hi = (q >> k) & 1
                wgt = f"({wgt} * {'a' + c if hi else '(1.0f - a' + c + ')'})"
                ix.append(f"{c}{1 if hi else 0}")
            ix += ["0", "__LZ__"] if nd == 1 else (["__LZ__"] if nd == 2 else [])
            acc.append(f"    {{ float q = {wgt}; {r} v = ks_texel_{rid}(t, w, h, {', '.join(ix)});")
            if vec:
                acc.append("      " + " ".join(f"acc.{c} = acc.{c} + q * (float)v.{c};" for c in comps) + " }")
            else:
                acc.append("      acc = acc + q * (float)v; }")
        lines += acc
        lines.append("    return acc;" if vec or base == "float" else f"    return ({r})acc;")
        lines.append("}")
        text = "\n".join(lines)
        # the layer (or cube face) is z: layered arrays are width x height x layers
        text = text.replace("__LZ__", f"(layer >= 0 ? ({lz}) : 0)")
        out.append("\n" + text)
    return "".join(out) + "\n"


# ---- the rewrite ---------------------------------------------------------------------------------------
def rewrite(source: str, kernel) -> tuple[str, list[str]] | None:
    """The source with `kernel` (a KernelInfo) reading its textures from buffers, and the texture names, in the
    port's parameter order; None when the kernel reads no texture. Lines keep their numbers (helpers go at the
    end). Raises TextureError for what cannot be ported."""
    data = source.encode()
    b0, b1 = kernel.byte_range
    ktext = data[b0:b1].decode(errors="replace")
    head_len = ktext.find("{")
    if head_len < 0:
        return None
    refs = references(source)
    used_refs = [n for n in refs if re.search(r"\b" + re.escape(n) + r"\b", ktext[head_len:])]
    objs = [p.name for p in kernel.params if p.type in OBJECT_TYPES and not p.pointer]
    line0 = source[:len(data[:b0].decode(errors="replace"))].count("\n")
    srefs = surface_references(source)
    used_srefs = [n for n in srefs if re.search(r"\b" + re.escape(n) + r"\b", ktext[head_len:])]
    sobjs = [p.name for p in kernel.params if " ".join(p.type.replace("const", " ").split()) in SURFACE_TYPES
             and not p.pointer]
    if used_srefs or sobjs or SURFACE_CALLS.search(ktext):
        # surfaces first (their calls become buffer accesses), then the textures of what is left
        from ..source import find_kernels
        text, snames = _rewrite_surfaces(source, kernel, ktext, head_len, line0, sobjs, used_srefs)
        k2 = find_kernels(text, "surfaces.cu").kernel(kernel.name)
        more = rewrite(text, k2) if k2 is not None else None
        return (more[0], snames + more[1]) if more else (text, snames)
    if not used_refs and not objs:
        return None
    texr: dict[str, str] = {}          # texture name -> the texel type R
    kinds: dict[str, set[str]] = {}    # R -> helpers needed
    body = ktext[head_len:]
    out, pos = [], 0
    call = re.compile(r"\b(" + "|".join(FETCHES) + r")\s*(<\s*([^<>()]+?)\s*>)?\s*\(")
    for m in call.finditer(body):
        fn, targ = m.group(1), m.group(3)
        p = m.end() - 1
        q = _match_paren(body, p)
        args = _split_args(body[p + 1:q])
        line = line0 + ktext[:head_len].count("\n") + body[:m.start()].count("\n")
        if not args:
            continue
        name = args[0].strip()
        if name in refs and name in used_refs:
            t, _dim, norm = refs[name]
            r = read_type(t, norm)
        elif name in objs:
            if not targ:
                raise TextureError(f"{fn}(...)", line, f"{fn} of texture object '{name}' without a return type "
                                                       f"(write {fn}<float>(...))")
            r = " ".join(targ.split())
        else:
            raise TextureError(f"{fn}({name}, ...)", line, f"{fn} reads '{name}', which is neither a texture "
                                                           "reference of this file nor a texture object parameter "
                                                           "of the kernel: port by hand")
        if _comps(r)[0] not in SCALARS:
            raise TextureError(f"{fn}<{r}>", line, f"texels of type {r}: the port reads float, integer and "
                                                   "their 2- and 4-vectors")
        if texr.setdefault(name, r) != r:
            raise TextureError(f"{fn}<{r}>", line, f"texture '{name}' is read as {texr[name]} and as {r}")
        rest = [a.strip() for a in args[1:]]
        rid = _ident(r)
        geo = f"{name}, {name}__w, {name}__h, {name}__d, {name}__m"
        need = {"tex1Dfetch": 1, "tex1D": 1, "tex2D": 2, "tex3D": 3, "tex1DLayered": 2, "tex2DLayered": 3,
                "texCubemap": 3}[fn]
        if len(rest) != need:
            raise TextureError(f"{fn}(...)", line, f"{fn} with {len(rest)} coordinates (a level-of-detail or "
                                                   "gradient read?): port by hand")
        k = kinds.setdefault(r, set())
        if fn == "tex1Dfetch":
            k.add("fetch")
            rep = f"ks_tex1Dfetch_{rid}({name}, {name}__w, (int)({rest[0]}))"
        elif fn == "texCubemap":
            k.add("dim2")
            c = ", ".join(f"(float)({a})" for a in rest)
            rep = f"ks_tex2D_{rid}({geo}, ks_cube_u({c}), ks_cube_v({c}), ks_cube_face({c}))"
        elif fn.endswith("Layered"):
            nd = need - 1
            k.add(f"dim{nd}")
            rep = f"ks_tex{nd}D_{rid}({geo}, " + ", ".join(f"(float)({a})" for a in rest[:-1]) \
                + f", (int)({rest[-1]}))"
        else:
            k.add(f"dim{need}")
            rep = f"ks_tex{need}D_{rid}({geo}, " + ", ".join(f"(float)({a})" for a in rest) + ", -1)"
        out.append(body[pos:m.start()])
        out.append(rep)
        pos = q + 1
    out.append(body[pos:])
    new_body = "".join(out)
    # every other use of a texture (passed on to a function, copied) is beyond the rewrite
    for name in list(objs) + used_refs:
        plain = re.sub(r"\(" + re.escape(name) + r", " + re.escape(name) + r"__w", "(", new_body)
        hit = re.search(r"\b" + re.escape(name) + r"\b(?!__)", plain)
        if hit:
            line = line0 + ktext[:head_len].count("\n") + plain[:hit.start()].count("\n")
            raise TextureError(name, line, f"texture '{name}' is used other than in a fetch (passed to a function "
                                           "or copied): port by hand")
        texr.setdefault(name, "float")   # never fetched: any type will do
    # the signature: objects in place, references after the kernel's own parameters
    head = ktext[:head_len]
    for name in objs:
        r = texr[name]
        head = re.sub(r"\b(?:const\s+)?(?:cudaTextureObject_t|CUtexObject)\s+" + re.escape(name) + r"\b",
                      f"const {r}* {name}, int {name}__w, int {name}__h, int {name}__d, int {name}__m", head, count=1)
    if used_refs:
        close = head.rfind(")")
        inner = head[:close].rstrip()
        sep = "" if inner.endswith("(") else ", "
        extra = ", ".join(f"const {texr[n]}* {n}, int {n}__w, int {n}__h, int {n}__d, int {n}__m" for n in used_refs)
        head = head[:close] + sep + extra + head[close:]
    new_kernel = head + new_body
    # the texture references' declarations go (their names are the kernel's parameters now)
    before = data[:b0].decode(errors="replace")
    after = data[b1:].decode(errors="replace")

    def blank(text: str) -> str:
        return _DECL.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    helpers = _COMMON + "".join(_helpers(r, k) for r, k in kinds.items())
    return blank(before) + new_kernel + blank(after) + "\n" + helpers, list(objs) + used_refs


# ---- surfaces: a surface becomes a buffer of its array's elements -------------------------------------------
_SDECL = re.compile(r"^[ \t]*(?:static\s+)?surface\s*<\s*[\w\s]+?\s*(?:,\s*([^,<>]+?)\s*)?>\s*([A-Za-z_]\w*)\s*;", re.M)
_SURF = re.compile(r"\b(surf(?:[123]D|[12]DLayered)(?:read|write)|surfCubemap\w*)\s*(?:<\s*([^<>()]+?)\s*>)?\s*\(")
_NCOORD = {"1D": 1, "2D": 2, "3D": 3, "1DLayered": 2, "2DLayered": 3}
_MODES = {"cudaBoundaryModeZero": 0, "cudaBoundaryModeClamp": 1, "cudaBoundaryModeTrap": 2}
_SIZES = {"float": 4, "int": 4, "unsigned int": 4, "unsigned": 4, "uint": 4, "short": 2, "unsigned short": 2,
          "ushort": 2, "char": 1, "signed char": 1, "unsigned char": 1, "uchar": 1}
_TYPE_WORDS = (r"(?:unsigned\s+(?:int|short|char)|signed\s+char|(?:u?char|u?short|u?int|float)[1-4]|float|int|short|char"
               r"|uint|uchar|ushort|unsigned)")


def surface_references(source: str) -> dict[str, int]:
    """File-scope surface references (`surface<void, 2> name;`): {name: declared dimensions (1 when not given)}."""
    out = {}
    for m in _SDECL.finditer(source):
        d = (m.group(1) or "1").strip()
        out[m.group(2)] = int(d) if d.isdigit() else 1
    return out


def _size_of(t: str) -> int | None:
    base, n = _comps(t)
    return _SIZES.get(base, 0) * n or None


def _value_type(expr: str, body: str, params) -> str | None:
    """The C type of a value written to a surface, where the source tells it: a cast, make_<vector>(...), a float
    literal, a variable declared in the kernel, a parameter, or an element of a pointer parameter / local array."""
    e = expr.strip()
    while e.startswith("(") and _match_paren(e, 0) == len(e) - 1:
        e = e[1:-1].strip()
    m = re.match(r"^\(\s*(?:const\s+)?(" + _TYPE_WORDS + r")\s*\)", e) or \
        re.match(r"^static_cast\s*<\s*(?:const\s+)?(" + _TYPE_WORDS + r")\s*>", e) or \
        re.match(r"^make_((?:u?char|u?short|u?int|float)[1-4])\s*\(", e)
    if m:
        return " ".join(m.group(1).split())
    if re.fullmatch(r"[-+]?\d*\.\d*(?:e[-+]?\d+)?f|[-+]?\d+\.\d*f?", e, re.I):
        return "float"
    m = re.fullmatch(r"([A-Za-z_]\w*)\s*(\[.*\])?", e, re.S)
    if not m:
        return None
    name, sub = m.group(1), m.group(2)
    for p in params:
        if p.name == name and (bool(p.pointer) == bool(sub)):
            return " ".join(p.type.replace("const", " ").replace("*", " ").split())
    d = re.search(r"\b(" + _TYPE_WORDS + r")\s+(?:[^;{}()]*?[,\s*])?" + re.escape(name)
                  + r"\s*(\[[^\]]*\]\s*)?[=;,)\[]", body)
    if d and bool(d.group(2)) == bool(sub):
        return " ".join(d.group(1).split())
    return None


def _surf_helpers(r: str, size: int, reads: bool, writes: bool) -> str:
    base, n = _comps(r)
    rid = _ident(r)
    zero = f"make_{r}({', '.join(['0'] * n)})" if n > 1 else f"({r})0"
    out = []
    if reads:
        out.append(f"""
__device__ {r} ks_surf_ld_{rid}(const {r}* s, int w, int h, int d, int xb, int y, int z, int mode) {{
    int i = ks_surf_index(w, h, d, xb, y, z, mode, {size});
    if (i < 0) return {zero};
    return s[i];
}}""")
    if writes:
        out.append(f"""
__device__ void ks_surf_st_{rid}({r}* s, int w, int h, int d, int xb, int y, int z, int mode, {r} v) {{
    int i = ks_surf_index(w, h, d, xb, y, z, mode, {size});
    if (i >= 0) s[i] = v;
}}""")
    return "".join(out) + "\n"


# x is in bytes (CUDA's surface addressing); out of range: zero mode drops a write and reads zero, clamp mode
# clamps each coordinate; trap mode faults in the original (the port drops the access)
_SURF_COMMON = """
__device__ int ks_surf_index(int w, int h, int d, int xb, int y, int z, int mode, int n) {
    int wb = w * n;
    if (xb < 0 || xb + n > wb || y < 0 || y >= h || z < 0 || z >= d) {
        if (mode != 1) return -1;
        xb = xb < 0 ? 0 : (xb + n > wb ? wb - n : xb);
        y = y < 0 ? 0 : (y >= h ? h - 1 : y);
        z = z < 0 ? 0 : (z >= d ? d - 1 : z);
    }
    return (z * h + y) * w + xb / n;
}
"""


def _rewrite_surfaces(source: str, kernel, ktext: str, head_len: int, line0: int, sobjs: list[str],
                      srefs: list[str]) -> tuple[str, list[str]]:
    """The source with the kernel's surface accesses as buffer accesses (see rewrite) and the surface names."""
    data = source.encode()
    b0, b1 = kernel.byte_range
    body = ktext[head_len:]
    body_line0 = line0 + ktext[:head_len].count("\n")
    styp: dict[str, str] = {}          # surface -> element type
    pending: list[tuple[int, int, str, str, str, int]] = []   # (start, end, surface, kind, template, line)
    reads: set[str] = set()
    writes: set[str] = set()
    calls = []
    for m in _SURF.finditer(body):
        fn, targ = m.group(1), m.group(2)
        line = body_line0 + body[:m.start()].count("\n")
        if fn.startswith("surfCubemap"):
            raise TextureError(fn, line, f"{fn}: cubemap surfaces are not ported (1-D, 2-D, 3-D and layered "
                                         "surfaces are): port by hand")
        p = m.end() - 1
        q = _match_paren(body, p)
        args = [a.strip() for a in _split_args(body[p + 1:q])]
        dims = re.match(r"surf(\w+?)(read|write)$", fn)
        nd, kind = _NCOORD[dims.group(1)], dims.group(2)
        ptr_read = kind == "read" and not targ
        lead = 1 if kind == "write" or ptr_read else 0
        if len(args) < lead + 1 + nd:
            raise TextureError(f"{fn}(...)", line, f"{fn} with {len(args)} arguments: port by hand")
        name = args[lead]
        if name not in sobjs and name not in srefs:
            raise TextureError(f"{fn}({name}, ...)", line, f"{fn} accesses '{name}', which is neither a surface "
                                                           "object parameter of the kernel nor a surface reference "
                                                           "of this file: port by hand")
        mode_txt = args[lead + 1 + nd] if len(args) > lead + 1 + nd else "cudaBoundaryModeTrap"
        mode_txt = re.sub(r"^(?:::)?(?:cudaSurfaceBoundaryMode::)?", "", mode_txt.strip())
        if mode_txt not in _MODES and not mode_txt.isdigit():
            raise TextureError(f"{fn}(...)", line, f"{fn} with boundary mode '{mode_txt}': the port takes "
                                                   "cudaBoundaryModeZero / Clamp / Trap written out")
        mode = _MODES.get(mode_txt, int(mode_txt) if mode_txt.isdigit() else 2)
        t = " ".join(targ.split()) if targ else None
        if t is None and kind == "write":
            t = _value_type(args[0], ktext, kernel.params)
        elif t is None:
            dest = args[0].strip()
            t = _value_type(dest[1:], ktext, kernel.params) if dest.startswith("&") else None
        if t is not None:
            if _size_of(t) is None:
                raise TextureError(f"{fn}<{t}>", line, f"surface elements of type {t}: the port takes float, "
                                                       "integer and their 2- and 4-vectors")
            if styp.setdefault(name, t) != t:
                raise TextureError(f"{fn}<{t}>", line, f"surface '{name}' is accessed as {styp[name]} and as {t}: "
                                                       "port by hand")
        (writes if kind == "write" else reads).add(name)
        calls.append((m.start(), q + 1, fn, kind, nd, dims.group(1).endswith("Layered"), args, lead, mode, name, line))
    for (_s, _e, fn, kind, _nd, _l, args, _lead, _m, name, line) in calls:
        if name not in styp:
            raise TextureError(f"{fn}(...)", line, f"the type of the elements of surface '{name}' cannot be told "
                                                   f"from the source ({fn}({', '.join(args)})): write "
                                                   f"{fn}<T>(...) or pass a typed variable")
    out, pos = [], 0
    for (st, en, fn, kind, nd, layered, args, lead, mode, name, line) in calls:
        r = styp[name]
        rid = _ident(r)
        c = [f"(int)({a})" for a in args[lead + 1:lead + 1 + nd]]
        if layered:
            xyz = [c[0], "0", c[1]] if nd == 2 else [c[0], c[1], c[2]]
        else:
            xyz = (c + ["0", "0"])[:3]
        geo = f"{name}, {name}__w, {name}__h, {name}__d, {', '.join(xyz)}, {mode}"
        if kind == "write":
            rep = f"ks_surf_st_{rid}({geo}, ({r})({args[0]}))"
        elif lead:
            dest = args[0].strip()
            lhs = dest[1:].strip() if dest.startswith("&") else f"*({dest})"
            rep = f"({lhs} = ks_surf_ld_{rid}({geo}))"
        else:
            rep = f"ks_surf_ld_{rid}({geo})"
        out.append(body[pos:st])
        out.append(rep)
        pos = en
    out.append(body[pos:])
    new_body = "".join(out)
    for name in sobjs + srefs:
        plain = re.sub(r"\(" + re.escape(name) + r", " + re.escape(name) + r"__w", "(", new_body)
        hit = re.search(r"\b" + re.escape(name) + r"\b(?!__)", plain)
        if hit:
            line = body_line0 + plain[:hit.start()].count("\n")
            raise TextureError(name, line, f"surface '{name}' is used other than in a surface read or write "
                                           "(passed to a function or copied): port by hand")
        styp.setdefault(name, "float")
    def decl(n: str) -> str:
        const = "" if n in writes else "const "
        return f"{const}{styp[n]}* {n}, int {n}__w, int {n}__h, int {n}__d"
    head = ktext[:head_len]
    for name in sobjs:
        head = re.sub(r"\b(?:const\s+)?(?:cudaSurfaceObject_t|CUsurfObject)\s+" + re.escape(name) + r"\b",
                      decl(name), head, count=1)
    if srefs:
        close = head.rfind(")")
        inner = head[:close].rstrip()
        sep = "" if inner.endswith("(") else ", "
        head = head[:close] + sep + ", ".join(decl(n) for n in srefs) + head[close:]
    before = data[:b0].decode(errors="replace")
    after = data[b1:].decode(errors="replace")

    def blank(text: str) -> str:
        return _SDECL.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    helpers = _SURF_COMMON
    for r in dict.fromkeys(styp[n] for n in sobjs + srefs):
        users = [n for n in sobjs + srefs if styp[n] == r]
        helpers += _surf_helpers(r, _size_of(r), any(n in reads for n in users), any(n in writes for n in users))
    return blank(before) + head + new_body + blank(after) + "\n" + helpers, sobjs + srefs


def port_textures(parse_result, kernel_name: str):
    """(parse_result with the kernel reading its textures from buffers, texture names) — the same parse_result
    and [] when the kernel reads none. Raises TextureError."""
    from ..source import find_kernels

    k = parse_result.kernel(kernel_name)
    if k is None:
        return parse_result, []
    res = rewrite(parse_result.source, k)
    if res is None:
        return parse_result, []
    text, names = res
    new = find_kernels(text, parse_result.path)
    own = set(find_kernels(parse_result.source, parse_result.path).preamble)
    extra = [e for e in parse_result.preamble if e not in own]   # the program's and headers' preamble
    new.preamble = [e for e in extra + new.preamble if not _DECL.search(e) and not _SDECL.search(e)]
    return new, names


# ---- the capture's textures as the port's arguments ----------------------------------------------------
def recorded(capture_dir: str | Path) -> dict[int, dict[str, dict]]:
    """{launch index: {key: record}} from a capture's textures.jsonl ({} when there is none)."""
    p = Path(capture_dir) / "textures.jsonl"
    out: dict[int, dict[str, dict]] = {}
    try:
        lines = p.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for ln in lines:
        try:
            d = json.loads(ln)
        except json.JSONDecodeError:
            continue
        out.setdefault(int(d["launch"]), {})[d["key"]] = d
    return out


def mode_bits(rec: dict) -> int:
    a = rec.get("addr", [1, 1, 1])
    return (a[0] & 3) | (a[1] & 3) << 2 | (a[2] & 3) << 4 | (64 if rec.get("linear") else 0) \
        | (128 if rec.get("normalized") else 0)


def _put(args: dict, name: str, rec: dict | None, capture_dir: str | Path) -> None:
    if rec is None:   # the launch never fetched from it: an empty texture
        args[name] = np.zeros(4, np.float32)
        args.update({f"{name}__w": 0, f"{name}__h": 1, f"{name}__d": 1, f"{name}__m": 0})
        return
    args[name] = np.load(Path(capture_dir) / rec["file"], allow_pickle=False).reshape(-1)
    args.update({f"{name}__w": int(rec["w"]), f"{name}__h": int(rec["h"]), f"{name}__d": int(rec["d"]),
                 f"{name}__m": mode_bits(rec)})


def texture_args(capture, rec, args: dict) -> bool:
    """Adds to `args` (a captured launch's {param: value}) what the port takes for the textures the launch read:
    each texture object parameter becomes its texels, and each texture reference its texels under its name,
    with <name>__w/__h/__d/__m. True when the launch read a texture."""
    if not Path(capture.dir, "textures.jsonl").is_file():
        return False
    recs = {k: r for k, r in recorded(capture.dir).get(rec.index, {}).items() if not r.get("surface")}
    if not recs:
        return False
    for a in rec.args:
        base = " ".join(a.ctype.replace("const", " ").split())
        if base in OBJECT_TYPES and a.kind == "scalar":
            _put(args, a.name, recs.get(f"obj:{a.value}"), capture.dir)
    for key, r in recs.items():
        if key.startswith("ref:"):
            _put(args, key[4:], r, capture.dir)
    return True


def surface_args(capture, rec, args: dict, expected: dict) -> bool:
    """Adds to `args` the contents each surface the launch accessed had before it (a surface object parameter under
    its name, a reference under the reference's name), with <name>__w/__h/__d, and to `expected` its contents
    after the launch. True when the launch accessed a surface."""
    recs = {k: r for k, r in recorded(capture.dir).get(rec.index, {}).items() if r.get("surface")}
    if not recs:
        return False

    def put(name: str, r: dict) -> None:
        d = Path(capture.dir)
        args[name] = np.load(d / r["file"], allow_pickle=False).reshape(-1)
        expected[name] = np.load(d / r["after"], allow_pickle=False).reshape(-1)
        args.update({f"{name}__w": int(r["w"]), f"{name}__h": int(r["h"]), f"{name}__d": int(r["d"])})
    for a in rec.args:
        base = " ".join(a.ctype.replace("const", " ").split())
        if base in SURFACE_TYPES and a.kind == "scalar" and f"surf:{a.value}" in recs:
            put(a.name, recs[f"surf:{a.value}"])
    for key, r in recs.items():
        if key.startswith("sref:"):
            put(key[5:], r)
    return True


__all__ = ["surface_args", "surface_references", "TextureError", "port_textures", "rewrite", "texture_args",
           "references", "recorded", "mode_bits"]
