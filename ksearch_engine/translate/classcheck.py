"""What the Metal port cannot carry in a struct or class (template) the kernel uses: member functions that read the
thread's position or the grid's shape (`threadIdx`, `blockIdx`, `blockDim`, `gridDim`), and `__shared__` variables
declared in a member function. Metal gives thread positions to the kernel
function only (as its parameters) and declares threadgroup memory in the kernel only; a member function sees
neither, and the class's members would have to take them as parameters at every call. Each problem names the class,
the file and line where it is defined, and the first such use, instead of a compile error of the generated port.
"""
from __future__ import annotations

import os
import re

from .analysis import _entry_name, unwrap_namespaces

_CLASS = re.compile(r"\s*(?:template\s*<(?:[^<>;{}]|<[^<>;{}]*>)*>\s*)?(struct|class|union)\b")
_THREAD_WORDS = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b")
_SHARED_DECL = re.compile(r"\b__shared__\b")


def _code(text: str) -> str:
    from ..sim.preprocess import mask_comments
    return mask_comments(text)


def _where(entry: str, source: str, src_path: str | None, headers: list[tuple[str, str]]) -> tuple[str, int]:
    """(file name, 1-based line) where the class `entry` is defined: the kernel's file or one of its headers."""
    head = next((ln.strip() for ln in entry.splitlines() if ln.strip()), "")
    for path, text in [(src_path or "this file", source)] + headers:
        at = text.find(head) if head else -1
        if at >= 0:
            return os.path.basename(path), text.count("\n", 0, at) + 1
    return "", 0   # in a header not found next to the file


def metal_class_problems(preamble: list[str], source: str, src_path: str | None,
                         headers: list[tuple[str, str]] = ()) -> list[tuple[str, str, int, str]]:
    """(construct, file, 1-based line, message) per class of `preamble` (the entries the kernel needs) whose member
    functions the Metal port cannot carry; `headers` are the (path, text) of the local headers the file includes."""
    out = []
    for entry in preamble:
        inner = unwrap_namespaces(entry)
        m = _CLASS.match(inner)
        if not m:
            continue
        code = _code(inner)
        brace = code.find("{")
        if brace < 0 or "(" not in code[brace:]:
            continue   # plain data
        body = code[brace:]
        name = _entry_name(inner) or m.group(1)
        fname, line = _where(inner, source, src_path, list(headers))
        where = f"{fname} line {line}" if line else "in a header the file includes"
        use = _THREAD_WORDS.search(body)
        hit = use or _SHARED_DECL.search(body)
        if hit is None:
            continue
        what, advice = (f"uses {use.group(1)}", "the Metal port cannot carry it (Metal gives thread positions and grid "
                        "sizes to the kernel function only, as its parameters; a member function would need them "
                        "passed in at every call): make it a __device__ function taking them as parameters, or port "
                        "by hand") if use else \
            ("declares a __shared__ variable", "the Metal port cannot carry it (Metal declares threadgroup memory in "
             "the kernel only): declare it in the kernel and pass it in, or port by hand")
        at = line + code.count("\n", 0, brace + hit.start()) if line else 0
        out.append((f"{m.group(1)} {name}", fname, at or line,
                    f"a member function of {m.group(1)} {name} ({where}) {what}"
                    + (f" at line {at}" if at else "") + f": {advice}"))
    return out


_SHARED_OBJECT = re.compile(r"\b__shared__\s+(?:(?:volatile|const|static)\s+)*((?:::)?[A-Za-z_][\w:]*)\s*(?:<[^;{}]*?>)?"
                            r"\s+([A-Za-z_]\w*)")


def shared_object_calls(preamble: list[str], texts: list[tuple[str, int]]) -> list[tuple[str, int, str]]:
    """(construct, 0-based line, message) per `__shared__` object of a class with member functions on which the code
    calls one (`__shared__ Acc a; ... a.get(i)`): MSL calls a member function on a threadgroup object only if it is
    declared for that address space, which the port's classes are not. `texts`: (code, its first line) of the
    kernel and its helpers."""
    classes = set()
    for entry in preamble:
        inner = unwrap_namespaces(entry)
        if _CLASS.match(inner) and "(" in _code(inner)[max(0, _code(inner).find("{")):]:
            name = _entry_name(inner)
            if name:
                classes.add(name)
    if not classes:
        return []
    out = []
    for text, first in texts:
        code = _code(text)
        for m in _SHARED_OBJECT.finditer(code):
            typ, name = m.group(1).split("::")[-1], m.group(2)
            if typ not in classes:
                continue
            call = re.search(rf"(?<![\w.]){re.escape(name)}\s*(?:\[[^\]]*\]\s*)*(?:\.|->)\s*([A-Za-z_]\w*)\s*\(",
                             code[m.end():])
            if call is None:
                continue
            line = first + code.count("\n", 0, m.start())
            out.append((f"__shared__ {typ} {name}", line,
                        f"member function {call.group(1)} of {typ} is called on a __shared__ object: Metal calls a "
                        f"member function on threadgroup memory only where it is declared for that address space, "
                        f"which the port's {typ} is not: keep the shared data in a plain __shared__ array (and call "
                        f"free functions on it), or port by hand"))
    return out
