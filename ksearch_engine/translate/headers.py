"""What a kernel file gets from its local headers, for the port's own headers: the macros, types and constants of
every `#include "x.h"` found in the include folders (as nvcc -I finds them), and the scalar type names those
define (`#define fp float`, `typedef float real;`, `using T2 = float2;`) resolved to C types."""
from __future__ import annotations

import os
import re

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)


def library_stand_in(path: str) -> str | None:
    """The file that stands in for a library header the ports carry as code (`cub/...`: CUB's block- and warp-level
    collectives, sim/ksim_cub.h, read like a local header, so both ports carry its class templates translated as a
    user's own; the simulator's original includes the same file), or None."""
    from ..sim import cub
    from ..sim.build import HEADER
    return str(HEADER.with_name(cub.STAND_IN)) if cub.stands_in(path) else None


# an include guard after leading comments; possessive, so a header without one fails in linear time (a lazy
# `/\*.*?\*/` under re.S let a header of many comments and no guard backtrack for minutes)
_GUARD = re.compile(r"(?:\s++|//[^\n]*+|/\*(?:[^*]|\*(?!/))*+\*/)*+#[ \t]*ifndef[ \t]+(\w+)[ \t]*\n[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]*\n")


def header_preamble(text: str, include_dirs, _seen: set | None = None, _depth: int = 0,
                    _macros: dict | None = None) -> list[str]:
    """File-scope entries (as ParseResult.preamble) of the local headers `text` includes, nested ones first.
    A header's conditionals (`#if defined(ENABLE_BF16) typedef __nv_bfloat16 floatX; #else typedef float floatX;
    #endif`) are decided as nvcc would decide them where the macros they test are known (source/conditionals.py:
    the including text's #defines before the #include, the headers' before it); undecided ones stay as written."""
    from ..sim.preprocess import _GPU_HEADER
    from ..source import find_kernels
    from ..source.conditionals import PREDEFINED, resolve_conditionals

    seen = set() if _seen is None else _seen
    out: list[str] = []
    if _depth > 8:
        return out
    macros = dict(PREDEFINED) if _macros is None else _macros   # the caller reads the headers' macros from it
    entry = dict(macros)
    from_headers: dict = {}   # macros the headers included so far define
    for m in _INCLUDE.finditer(text):
        try:   # the macros at this #include: `text`'s own before it, read with the headers' ones before it
            here = resolve_conditionals(text[:m.start()], {**entry, **from_headers})[1]
        except Exception:
            here = {**entry, **from_headers}
        path = m.group(1).strip()
        found = library_stand_in(path)
        if found is None and _GPU_HEADER.match(path):
            continue
        found = found or next((os.path.join(d, path) for d in include_dirs if os.path.isfile(os.path.join(d, path))),
                              None)
        if found is None:
            continue
        real = os.path.realpath(found)
        if real in seen:
            continue
        seen.add(real)
        try:
            inner = open(real, errors="replace").read()
        except OSError:
            continue
        nested = dict(here)   # gains the macros of the headers `inner` includes
        guard = _GUARD.match(inner)
        if guard and guard.group(1) == guard.group(2):
            # read as at its first inclusion: a program that included it before the kernel's file (its guard is
            # defined at this #include) still gives the ports its entries
            nested.pop(guard.group(1), None)
        out += header_preamble(inner, [os.path.dirname(real)] + list(include_dirs), seen, _depth + 1, nested)
        try:
            decided, after = resolve_conditionals(inner, nested)
        except Exception:   # a header this cannot read: as written
            decided, after = inner, nested
        from_headers.update({k: v for k, v in after.items() if here.get(k, ...) is not v})
        macros.update(from_headers)
        entries = with_aggregates(find_kernels(decided, "header.cuh").preamble, decided)
        if guard and guard.group(1) == guard.group(2):   # the include guard's #define is no entry of the header
            entries = [e for e in entries if not re.fullmatch(rf"#[ \t]*define[ \t]+{guard.group(1)}\s*", e)]
        out += entries
    unique: list[str] = []
    for e in out:
        if e not in unique:
            unique.append(e)
    return unique


# `template <class T> struct alignas(16) Packed128 {...};` (llm.c's common.h): a class template, an alignment in the
# head; its member functions, constructors and operators come along in the braces
_AGGREGATE = re.compile(r"^[ \t]*(?:template[ \t]*<[^;{}()]*>[ \t]*\n?[ \t]*)?(?:typedef\s+)?"
                        r"(?:struct|union|class|enum(?:\s+class)?)\b"
                        r"(?:[^;{}()=]|(?:alignas|__align__)[ \t]*\([ \t]*\w+[ \t]*\))*\{", re.M)


# CUDA's vector types (and Metal's, with the same names): both ports' runtimes define them. A file's own definition
# of one is for toolkits that lacked it (`#if CUDART_VERSION < 3000 struct double3 {...}`) and is never carried.
_BUILTIN_VECTOR = re.compile(r"^(?:u?(?:char|short|int|long|longlong)|float|double|half|bfloat)[1-4]$")


def _aggregate_names(entry: str) -> set[str]:
    from .analysis import _entry_name
    out = {_entry_name(entry)} - {None}
    m = re.search(r"\}\s*([A-Za-z_]\w*)\s*;?\s*$", entry)
    if m:
        out.add(m.group(1))
    return out


def file_aggregates(text: str) -> list[tuple[int, str]]:
    """(offset, text) of every file-scope struct/union/enum definition of `text` (`union P { struct __align__(8)
    {...}; unsigned h; };`, `typedef struct {...} T;`): found by braces, whatever the C++ parser made of them."""
    from ..launchsites import balanced
    from ..sim.preprocess import mask_comments

    code = mask_comments(text)
    out: list[tuple[int, str]] = []
    depth, last = 0, 0
    for m in _AGGREGATE.finditer(code):
        if m.start() < last:
            continue
        depth += code.count("{", last, m.start()) - code.count("}", last, m.start())
        last = m.start()
        if depth != 0:
            continue
        close = balanced(code, m.end() - 1, "{", "}")
        tail = re.compile(r"[ \t]*(?:[A-Za-z_]\w*[ \t]*)?;").match(code, close) if close > 0 else None
        if tail is None:
            continue
        out.append((m.start(), text[m.start():tail.end()].strip()))
        last = tail.end()
    return out


def with_aggregates(preamble: list[str], text: str) -> list[str]:
    """`preamble` (the parser's file-scope entries of `text`) with the struct/union/enum definitions of `text` it
    missed (a union holding an `__align__` struct parses as an error), each at its place in the file: a kernel
    declaring `PackedShorts sh0;` gets `union PackedShorts {...};` in both ports' headers."""
    have: set[str] = set()
    for e in preamble:
        have |= _aggregate_names(e)
    missing = [(pos, e) for pos, e in file_aggregates(text) if not (_aggregate_names(e) & have) and e not in preamble
               and not any(_BUILTIN_VECTOR.match(n) for n in _aggregate_names(e))]
    if not missing:
        return preamble
    placed: list[tuple[int, int, str]] = []
    cursor = 0
    for n, e in enumerate(preamble):   # entries found in `text` keep their offsets; others stay in front
        at = text.find(e.strip(), cursor)
        if at >= 0:
            cursor = at
        placed.append((at if at >= 0 else -1, n, e))
    placed += [(pos, len(preamble) + n, e) for n, (pos, e) in enumerate(missing)]
    return [e for _, _, e in sorted(placed, key=lambda t: (t[0], t[1]))]


_WRAPPED_QUALIFIERS = re.compile(
    r"^[ \t]*#[ \t]*(?:ifdef[ \t]+__CUDACC__|if[ \t]+defined[ \t]*\(?[ \t]*__CUDACC__[ \t]*\)?)[ \t]*\n"
    r"((?:[ \t]*(?:__host__|__device__|__forceinline__|inline|static)[ \t]*)+\n)"
    r"[ \t]*#[ \t]*endif[^\n]*$", re.M)


def _unwrap_qualifiers(text: str) -> str:
    """`#ifdef __CUDACC__ / __host__ __device__ / #endif` before a function (headers shared with host code):
    the qualifiers as nvcc sees them, same line count."""
    return _WRAPPED_QUALIFIERS.sub(lambda m: "\n" + m.group(1).rstrip("\n") + "\n", text)


def header_helpers(text: str, include_dirs, _seen: set | None = None, _depth: int = 0) -> list:
    """The `__device__` helpers (KernelInfo, as ParseResult.helpers) of the local headers `text` includes, nested
    ones first: a kernel that calls `Comparator()` from `common.cuh` gets it in both ports' headers."""
    from ..sim.preprocess import _GPU_HEADER
    from ..source import find_kernels

    seen = set() if _seen is None else _seen
    out: list = []
    if _depth > 8:
        return out
    for m in _INCLUDE.finditer(text):
        path = m.group(1).strip()
        found = library_stand_in(path)
        if found is None and _GPU_HEADER.match(path):
            continue
        found = found or next((os.path.join(d, path) for d in include_dirs if os.path.isfile(os.path.join(d, path))),
                              None)
        if found is None:
            continue
        real = os.path.realpath(found)
        if real in seen:
            continue
        seen.add(real)
        try:
            inner = open(real, errors="replace").read()
        except OSError:
            continue
        out += header_helpers(inner, [os.path.dirname(real)] + list(include_dirs), seen, _depth + 1)
        name = os.path.basename(real)   # parsed as CUDA whatever its extension (util.h, bisect_util.cu)
        name = name if name.endswith((".cu", ".cuh")) else name + ".cuh"
        out += [h for h in find_kernels(_unwrap_qualifiers(_device_view(inner, text[:m.start()])), name).helpers
                if h.language == "cuda"]
    return out


def _device_view(header: str, before: str) -> str:
    """The header as the device pass of nvcc reads it: conditionals decided with the macros the including text
    defines before its #include and the device compiler's own (`__CUDA_ARCH__`, a CUDA 12 toolkit), where those
    decide them; lines keep their numbers. A helper the device pass never sees (an `__ldcs` overload for old
    toolkits and pre-sm_80 GPUs) is no helper of the ports."""
    from ..source.conditionals import PREDEFINED, has_conditionals, resolve_conditionals

    if not has_conditionals(header):
        return header
    try:
        _, macros = resolve_conditionals(before, {**PREDEFINED, "__CUDA_ARCH__": "900", "__CUDACC_VER_MAJOR__": "12"})
        return resolve_conditionals(header, macros)[0]
    except Exception:   # a reading this cannot follow: the header as it is
        return header


def included_texts(text: str, include_dirs) -> list[str]:
    """The texts of the local headers `text` includes (found in `include_dirs` as nvcc -I finds them), nested ones
    first."""
    return [t for _, t in included_files(text, include_dirs)]


def included_files(text: str, include_dirs, _seen: set | None = None, _depth: int = 0) -> list[tuple[str, str]]:
    """(path, text) of the local headers `text` includes, nested ones first (as included_texts)."""
    from ..sim.preprocess import _GPU_HEADER

    seen = set() if _seen is None else _seen
    out: list[tuple[str, str]] = []
    if _depth > 8:
        return out
    for m in _INCLUDE.finditer(text):
        path = m.group(1).strip()
        found = library_stand_in(path)
        if found is None and _GPU_HEADER.match(path):
            continue
        found = found or next((os.path.join(d, path) for d in include_dirs if os.path.isfile(os.path.join(d, path))),
                              None)
        if found is None or os.path.realpath(found) in seen:
            continue
        real = os.path.realpath(found)
        seen.add(real)
        try:
            inner = open(real, errors="replace").read()
        except OSError:
            continue
        out += included_files(inner, [os.path.dirname(real)] + list(include_dirs), seen, _depth + 1)
        out.append((found, inner))
    return out


def prefix_helpers(prefix: str, include_dirs, helpers: list) -> list:
    """`helpers` (a file's own) after the `__device__` helpers its program defines or includes before including
    the file (`prefix`): those the file does not define itself, in the program's order."""
    from ..source import find_kernels

    try:
        extra = header_helpers(prefix, list(include_dirs))
        extra += [h for h in find_kernels(_unwrap_qualifiers(prefix), "prefix.cu").helpers if h.language == "cuda"]
    except Exception:   # a program text that cannot be parsed gives no helpers
        return list(helpers)
    names = {h.name for h in helpers}
    out = []
    for h in extra:
        if h.name not in names and not any(h.text == o.text for o in out):
            out.append(h)
    return out + list(helpers)


# Typedefs that CUDA's headers and libraries declare (a kernel names them with no definition in its file): {name:
# the built-in scalar or vector type it stands for}. The one table of them: type_aliases starts from both dicts,
# and a kernel naming one of LIBRARY_TYPEDEFS gets its typedef in both ports' headers (with_library_typedefs:
# neither MLX's Metal nor its CUDA JIT includes cuComplex.h or cufft.h); C_TYPEDEFS' names both ports know.
C_TYPEDEFS: dict[str, str] = {"clock_t": "long", "ptrdiff_t": "long", "ssize_t": "long"}   # as on 64-bit Linux
LIBRARY_TYPEDEFS: dict[str, str] = {
    # cuComplex.h
    "cuFloatComplex": "float2", "cuComplex": "float2", "cuDoubleComplex": "double2",
    # cufft.h
    "cufftReal": "float", "cufftDoubleReal": "double", "cufftComplex": "float2", "cufftDoubleComplex": "double2",
}


def with_library_typedefs(preamble: list[str], text: str) -> list[str]:
    """`preamble` with `typedef float2 cufftComplex;` in front for each name of LIBRARY_TYPEDEFS that `text` or
    `preamble` uses and no entry of `preamble` defines (a kernel file that includes cufft.h)."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", "\n".join([text] + preamble), flags=re.S)
    extra = []
    for name, t in LIBRARY_TYPEDEFS.items():
        n = re.escape(name)
        if re.search(rf"\b{n}\b", code) and not any(
                re.search(rf"^\s*(?:typedef\b[^;]*\b{n}\s*;|using\s+{n}\s*=|#\s*define\s+{n}\b|"
                          rf"(?:struct|class|union)\s+{n}\b)", e, re.M) for e in preamble):
            extra.append(f"typedef {t} {name};")
    return extra + preamble if extra else preamble


def type_aliases(preamble: list[str]) -> dict[str, str]:
    """{alias: C type} for file-scope names of scalar or vector types."""
    from .launch import POINTEE, norm_type

    raw: dict[str, str] = {**C_TYPEDEFS, **LIBRARY_TYPEDEFS}
    for e in preamble:
        m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)\s+([A-Za-z_][\w ]*?)\s*$", e) \
            or re.match(r"\s*typedef\s+([^;{}()\[\]*]+?)\s+([A-Za-z_]\w*)\s*;\s*$", e, re.S) \
            or re.match(r"\s*using\s+([A-Za-z_]\w*)\s*=\s*([^;{}()\[\]*]+?)\s*;\s*$", e)
        if not m:
            continue
        if e.lstrip().startswith("typedef"):
            name, target = m.group(2), m.group(1)
        else:
            name, target = m.group(1), m.group(2)
        raw[name] = norm_type(target)
    out: dict[str, str] = {}
    for name in raw:
        t, hops = raw[name], 0
        while t in raw and hops < 8:
            t, hops = raw[t], hops + 1
        if t in POINTEE and name not in POINTEE:
            out[name] = t
    return out


def resolve_param_types(k, aliases: dict[str, str]) -> None:
    """Rewrites `k`'s parameter types that name an alias (`fp*` -> `float*`) in place."""
    from .launch import norm_type

    if not aliases:
        return
    for p in k.params:
        base = norm_type(p.type)
        if base in aliases:
            p.type = re.sub(r"\b" + re.escape(base) + r"\b", aliases[base], p.type)
