"""What the Metal port cannot carry of the member functions of a struct or class (template) the kernel uses
(classmembers.py decides; most are carried: member functions that read the thread's position or declare `__shared__`
variables take them as parameters, like helpers), each named by class, the file and line where it is, instead of a
compile error of the generated port.
"""
from __future__ import annotations

import os
import re

from .analysis import _entry_name, unwrap_namespaces

_CLASS = re.compile(r"\s*(?:template\s*<(?:[^<>;{}]|<[^<>;{}]*>)*>\s*)?(struct|class|union)\b")


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


def metal_class_problems(cm, found: list[tuple[str, int, str, str]], source: str, src_path: str | None,
                         headers: list[tuple[str, str]] = ()) -> list[tuple[str, str, int, str]]:
    """(construct, file, 1-based line, message) per problem of `found` (classmembers.member_problems: class, offset
    of the member in the class's entry, construct, what); `headers` are the (path, text) of the local headers the
    file includes."""
    out = []
    for cls, offset, construct, what in found:
        info = cm.classes[cls]
        m = _CLASS.match(info.entry[info.offset:])
        kind = m.group(1) if m else "class"
        fname, line = _where(info.entry, source, src_path, list(headers))
        at = line + info.entry.count("\n", 0, offset) if line else 0
        where = f"{fname} line {at}" if at else "in a header the file includes"
        out.append((f"{kind} {cls}", fname, at or line, f"{kind} {cls} ({where}): {what}"))
    return out


_SHARED_OBJECT = re.compile(r"\b__shared__\s+(?:(?:volatile|const|static)\s+)*((?:::)?[A-Za-z_][\w:]*)\s*(?:<[^;{}]*?>)?"
                            r"\s+([A-Za-z_]\w*)")


def shared_object_calls(preamble: list[str], texts: list[tuple[str, int]], only: set[str] | None = None
                        ) -> list[tuple[str, int, str]]:
    """(construct, 0-based line, message) per `__shared__` object of a class with member functions on which the code
    calls one (`__shared__ Acc a; ... a.get(i)`), among the classes `only` names (None: all): MSL calls a member
    function on a threadgroup object only if it is declared for that address space, and the port declares a class's
    member functions so only where all its objects live there (classmembers.py). `texts`: (code, its first line) of
    the kernel and its helpers."""
    classes = set()
    for entry in preamble:
        inner = unwrap_namespaces(entry)
        if _CLASS.match(inner) and "(" in _code(inner)[max(0, _code(inner).find("{")):]:
            name = _entry_name(inner)
            if name and (only is None or name in only):
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
                        f"member function {call.group(1)} of {typ} is called on a __shared__ object, and other "
                        f"objects of {typ} live in thread memory: Metal calls a member function on threadgroup memory "
                        f"only where it is declared for that address space, which would take a second, threadgroup "
                        f"copy of each member function: keep the shared data in a plain __shared__ array (and call "
                        f"free functions on it), or port by hand"))
    return out
