"""Finds MLX custom kernels in Python: `mx.fast.metal_kernel(...)` and `mx.fast.cuda_kernel(...)` calls.

`source=` is resolved when it is a string literal or a module-level variable bound to one; the
kernel's name is the `name=` argument and its range is the source string's range. The body text is
scanned with tree-sitter for threadgroup / shared arrays.
"""
from __future__ import annotations

import ast
import re

from .cfamily import blank_metal, language, shared_from_declaration
from .models import Diagnostic, KernelInfo, Param, ParseResult
from .textpos import TextIndex

import tree_sitter as ts

_KINDS = {"metal_kernel": ("mlx-metal", "metal"), "cuda_kernel": ("mlx-cuda", "cuda")}


def _call_kind(call: ast.Call) -> str | None:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return name if name in _KINDS else None


def _str_list(node) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _parse(text: str, diagnostics: list[Diagnostic]) -> ast.Module | None:
    try:
        return ast.parse(text)
    except SyntaxError as e:
        line = (e.lineno or 1) - 1
        diagnostics.append(Diagnostic(message=f"Python syntax error: {e.msg}", line=line, severity="error"))
        # Keep what precedes the error: kernels defined above it are still found.
        lines = text.splitlines(keepends=True)
        for cut in (line, line - 1):
            try:
                return ast.parse("".join(lines[:max(cut, 0)]))
            except SyntaxError:
                continue
    return None


def scan_python(data: bytes, path: str | None) -> ParseResult:
    text = data.decode("utf-8", errors="replace")
    diagnostics: list[Diagnostic] = []
    tree = _parse(text, diagnostics)
    kernels: list[KernelInfo] = []
    if tree is None:
        return ParseResult(language="python", diagnostics=diagnostics, path=path, source=text)
    index = TextIndex(data)
    line_starts = [0]
    for m in re.finditer(b"\n", data):
        line_starts.append(m.end())

    def offset(lineno: int, col: int) -> int:
        return line_starts[lineno - 1] + col

    strings: dict[str, ast.Constant] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    strings[t.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            strings[stmt.target.id] = stmt.value

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kind = _call_kind(node)
        if kind is None:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        positional = ["name", "input_names", "output_names", "source", "header"]
        for i, a in enumerate(node.args[:len(positional)]):
            kw.setdefault(positional[i], a)
        lang, dialect = _KINDS[kind]
        src = kw.get("source")
        if isinstance(src, ast.Name) and src.id in strings:
            src = strings[src.id]
        name_node = kw.get("name")
        if not (isinstance(src, ast.Constant) and isinstance(src.value, str)):
            diagnostics.append(Diagnostic(
                message=f"{kind} call: its source= is not a string literal or a module-level string; "
                        "cannot show this kernel", line=node.lineno - 1, severity="warning"))
            continue
        name = name_node.value if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str) else ""
        if not name:
            diagnostics.append(Diagnostic(message=f"{kind} call without a literal name=", line=node.lineno - 1,
                                          severity="warning"))
            name = f"{kind}_{node.lineno}"
        s0, e0 = offset(src.lineno, src.col_offset), offset(src.end_lineno, src.end_col_offset)
        nr = name_node if isinstance(name_node, ast.Constant) else src
        ns, ne = offset(nr.lineno, nr.col_offset), offset(nr.end_lineno, nr.end_col_offset)
        inputs, outputs = _str_list(kw.get("input_names")), _str_list(kw.get("output_names"))
        params = [Param(name=n, type="T", qualifiers=["const", "device"] if dialect == "metal" else ["const"],
                        pointer=True, text=n) for n in inputs]
        params += [Param(name=n, type="T", qualifiers=["device"] if dialect == "metal" else [], pointer=True,
                         text=n) for n in outputs]
        info = KernelInfo(name=name, language=lang, qualifier=kind, params=params, byte_range=(s0, e0),
                          range=index.range(s0, e0), name_range=index.range(ns, ne), body=src.value,
                          body_byte_range=(s0, e0), text=data[s0:e0].decode("utf-8", "replace"),
                          input_names=inputs, output_names=outputs)
        info.shared = _body_shared(src.value, dialect, src.lineno - 1)
        kernels.append(info)
    if not kernels and not diagnostics:
        diagnostics.append(Diagnostic(message="no mx.fast.metal_kernel / cuda_kernel call in this file", line=0,
                                      severity="info"))
    kernels.sort(key=lambda k: k.byte_range)
    return ParseResult(language="python", kernels=kernels, diagnostics=diagnostics, path=path, source=text)


def _body_shared(body: str, dialect: str, line0: int):
    wrapped = ("void __body() {\n" + body + "\n}").encode()
    data = blank_metal(wrapped) if dialect == "metal" else wrapped
    root = ts.Parser(language(dialect)).parse(data).root_node
    word = rb"__shared__" if dialect == "cuda" else rb"\bthreadgroup\b"
    out, seen = [], set()
    for m in re.finditer(word, wrapped):
        off = m.end()
        while off < len(data) and data[off:off + 1].isspace():
            off += 1
        node = root.descendant_for_byte_range(off, off + 1)
        while node is not None and node.type != "declaration":
            node = node.parent
        if node is None or node.id in seen:
            continue
        seen.add(node.id)
        for sd in shared_from_declaration(node, data, wrapped, dialect):
            sd.line = line0 + node.start_point[0] - 1
            out.append(sd)
    return out
