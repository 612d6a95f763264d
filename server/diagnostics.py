"""Diagnostics: what stands in the way of a port or an optimization, with ranges and quick fixes.

- constructs the CUDA → Metal translator cannot port (the `unsupported` rules of specs/translation.yaml),
- threadgroup memory over Apple's 32 KB (an error in Metal kernels; a warning on CUDA kernels to be ported),
- a `*.task.toml` that does not validate (`KernelTask.load` raises TaskError naming the file),
- a kernel with no benchmark task (a hint; its quick fix is "Create benchmark task"),
- the parser's own findings (syntax it could not read): an Error only where the file really does not parse
  (brackets that do not balance once comments, strings and the other branches of `#if` are set aside, a file
  with no function at all); tree-sitter's error nodes on valid code (macros, preprocessor branches, CUDA
  extensions it does not know) are Information, so that valid code never gets an error.
"""
from __future__ import annotations

import ast
import operator
import re
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types

from ksearch_engine.task import KernelTask, TaskError

from .index import FileEntry, KernelEntry

if TYPE_CHECKING:
    from .state import KsearchServer

SOURCE = "ksearch"
APPLE_THREADGROUP_BYTES = 32 * 1024
NO_TASK = "no-task"
_SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning,
             "info": types.DiagnosticSeverity.Information}
_TYPE_BYTES = {"float": 4, "int": 4, "uint": 4, "unsigned": 4, "int32_t": 4, "uint32_t": 4, "half": 2,
               "__half": 2, "bfloat": 2, "__nv_bfloat16": 2, "bfloat16_t": 2, "double": 8, "int64_t": 8,
               "long": 8, "char": 1, "bool": 1, "short": 2, "uint8_t": 1, "int8_t": 1, "size_t": 8}


def _type_bytes(t: str) -> int:
    t = t.strip()
    m = re.fullmatch(r"(\w+?)([234])", t)         # float4, half2, int4 ...
    if m and m.group(1) in _TYPE_BYTES:
        return _TYPE_BYTES[m.group(1)] * int(m.group(2))
    return _TYPE_BYTES.get(t, 4)


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.LShift: operator.lshift, ast.RShift: operator.rshift}


def _eval_size(expr: str, consts: dict[str, int]) -> int | None:
    """An array dimension as an int, using #define and template-default constants; None if not constant."""
    expr = re.sub(r"(\d+)[uUlL]+\b", r"\1", expr.strip())
    if not expr:
        return None
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None

    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name) and n.id in consts:
            return consts[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            a, b = ev(n.left), ev(n.right)
            return None if a is None or b is None else _OPS[type(n.op)](a, b)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            v = ev(n.operand)
            return None if v is None else -v
        return None
    return ev(tree)


def _constants(entry: FileEntry, k: KernelEntry) -> dict[str, int]:
    consts: dict[str, int] = {}
    for line in (entry.parse.preamble if entry.parse else []):
        m = re.match(r"\s*#\s*define\s+(\w+)\s+\(?\s*([0-9xXa-fA-F]+)[uUlL]*\s*\)?\s*$", line)
        if m:
            try:
                consts[m.group(1)] = int(m.group(2), 0)
            except ValueError:
                pass
    for m in re.finditer(r"(?:constexpr|const)\s+(?:int|unsigned|uint|size_t|short)\s+(\w+)\s*=\s*(\d+)", entry.text):
        consts.setdefault(m.group(1), int(m.group(2)))
    for tp in k.info.template_params:
        if tp.default and tp.default.strip().isdigit():
            consts[tp.name] = int(tp.default.strip())
    return consts


def threadgroup_bytes(entry: FileEntry, k: KernelEntry) -> tuple[int, list[str]]:
    """Static threadgroup/shared bytes of a kernel, and the arrays whose size could not be read."""
    consts = _constants(entry, k)
    total, unknown = 0, []
    for s in k.info.shared:
        if s.dynamic:
            continue
        n = 1
        for dim in s.sizes or [""]:
            v = _eval_size(dim, consts)
            if v is None:
                n = None
                break
            n *= v
        if n is None:
            unknown.append(s.name)
        else:
            total += n * _type_bytes(s.type)
    return total, unknown


_REPORTS: dict[tuple[str, str, str], list] = {}


def translation_report(entry: FileEntry, k: KernelEntry) -> list:
    """The translator's issues for a CUDA kernel (cached per file hash): what a Metal port cannot carry over."""
    key = (entry.path, k.name, entry.hash)
    if key not in _REPORTS:
        try:
            from ksearch_engine.translate import translate_kernel
            _REPORTS[key] = list(translate_kernel(entry.parse, k.name, entry.path).report)
        except Exception:  # noqa: BLE001 - an untranslatable kernel is reported when the port runs
            _REPORTS[key] = []
        if len(_REPORTS) > 512:
            _REPORTS.pop(next(iter(_REPORTS)))
    return _REPORTS[key]


def _issue_range(entry: FileEntry, k: KernelEntry, issue) -> types.Range:
    line = int(getattr(issue, "line", k.name_range.start.line))
    text = entry.positions.line(line) if entry.positions else ""
    stem = str(getattr(issue, "construct", "")).split("(")[0].strip()
    col = text.find(stem) if stem else -1
    if line == k.name_range.start.line and stem == k.name:
        return k.name_range
    if col >= 0:
        s16 = len(text[:col].encode("utf-16-le")) // 2
        e16 = s16 + len(stem.encode("utf-16-le")) // 2
        return types.Range(start=entry.positions.position(line, s16), end=entry.positions.position(line, e16))
    indent = len(text) - len(text.lstrip())
    return types.Range(start=types.Position(line=line, character=indent),
                       end=entry.positions.end_of_line(line) if entry.positions else types.Position(line=line, character=0))


def kernel_diagnostics(entry: FileEntry, k: KernelEntry, has_task: bool) -> list[types.Diagnostic]:
    out: list[types.Diagnostic] = []
    info = k.info
    # --- threadgroup memory (Metal kernels; CUDA kernels get it from the translator's report) ------
    if info.language in ("metal", "mlx-metal"):
        used, _ = threadgroup_bytes(entry, k)
        if used > APPLE_THREADGROUP_BYTES:
            out.append(types.Diagnostic(
                range=k.name_range, source=SOURCE, code="threadgroup-memory", severity=types.DiagnosticSeverity.Error,
                message=(f"{info.name} uses {used / 1024:.1f} KB of threadgroup memory; Apple GPUs allow 32 KB per "
                         f"threadgroup. Shrink the tiles or split the work across threadgroups.")))
    # --- what a port to Metal cannot carry over (the translator's report) ---------------------------
    if info.language == "cuda" and entry.parse is not None:
        for issue in translation_report(entry, k):
            sev = {"error": types.DiagnosticSeverity.Warning}.get(issue.severity, types.DiagnosticSeverity.Information)
            out.append(types.Diagnostic(range=_issue_range(entry, k, issue), source=SOURCE, severity=sev,
                                        code="port", message=f"Port to Metal: {issue.message}"))
    # --- no task ----------------------------------------------------------------------------------
    if not has_task:
        out.append(types.Diagnostic(
            range=k.name_range, source=SOURCE, code=NO_TASK, severity=types.DiagnosticSeverity.Hint,
            message=(f"{info.name} has no benchmark task, so it cannot be optimized yet: use the quick fix "
                     f"'Create benchmark task' and fill in its shapes and reference.")))
    return out


_OPEN, _CLOSE = "([{", ")]}"


def _code_only(text: str) -> list[tuple[int, str]]:
    """The file's code as (line, text) pairs, without comments, string and character literals, preprocessor
    lines, or the `#elif`/`#else` branches of a conditional (only its first branch is kept: the branches
    often open the same bracket each)."""
    out: list[tuple[int, str]] = []
    lines = text.split("\n")
    depth_skip: list[bool] = []      # per open #if: whether we are past its first branch
    in_block = False
    i = 0
    while i < len(lines):
        raw = lines[i]
        n = i
        stripped = raw.lstrip()
        if not in_block and stripped.startswith("#"):
            directive = stripped[1:].lstrip().split(None, 1)[0] if stripped[1:].strip() else ""
            while raw.endswith("\\") and i + 1 < len(lines):      # continued directive
                i += 1
                raw = lines[i]
            if directive in ("if", "ifdef", "ifndef"):
                depth_skip.append(False)
            elif directive in ("elif", "else", "elifdef", "elifndef") and depth_skip:
                depth_skip[-1] = True
            elif directive == "endif" and depth_skip:
                depth_skip.pop()
            i += 1
            continue
        i += 1
        while raw.endswith("\\") and i < len(lines):      # a line continued (a string literal spanning lines)
            raw = raw[:-1] + lines[i]
            i += 1
        if any(depth_skip):
            continue
        buf, j = [], 0
        while j < len(raw):
            ch = raw[j]
            if in_block:
                if raw.startswith("*/", j):
                    in_block, j = False, j + 2
                else:
                    j += 1
                continue
            if raw.startswith("//", j):
                break
            if raw.startswith("/*", j):
                in_block, j = True, j + 2
                continue
            if ch in "\"'":
                k = j + 1
                while k < len(raw) and raw[k] != ch:
                    k += 2 if raw[k] == "\\" else 1
                j = k + 1
                buf.append(" ")
                continue
            buf.append(ch)
            j += 1
        out.append((n, "".join(buf)))
    return out


def bracket_problems(text: str) -> list[tuple[int, str]]:
    """Brackets that do not balance, as (line, message): the sure sign that a C/C++/CUDA file does not parse."""
    stack: list[tuple[str, int]] = []
    for line, code in _code_only(text):
        for ch in code:
            if ch in _OPEN:
                stack.append((ch, line))
            elif ch in _CLOSE:
                want = _OPEN[_CLOSE.index(ch)]
                if not stack:
                    return [(line, f"'{ch}' closes nothing (an opening '{want}' is missing before it)")]
                got, at = stack.pop()
                if got != want:
                    closer = _CLOSE[_OPEN.index(got)]
                    return [(at, f"'{got}' opened here is closed by '{ch}' at line {line + 1}: missing '{closer}'")]
    if stack:
        got, at = stack[-1]
        return [(at, f"'{got}' opened here is never closed: missing '{_CLOSE[_OPEN.index(got)]}'")]
    return []


_SYNTAX: dict[tuple[str, str], list] = {}


def syntax_problems(entry: FileEntry) -> list[tuple[int, str, str]]:
    """The parser's findings with the severity they deserve, as (line, message, severity): errors only where
    the file really does not parse; tree-sitter's error nodes in a file whose brackets balance are 'info'."""
    key = (entry.path, entry.hash)
    if key in _SYNTAX:
        return _SYNTAX[key]
    out: list[tuple[int, str, str]] = []
    parse = entry.parse
    if parse is not None:
        c_family = parse.language in ("cuda", "metal", "cpp", "c")
        sure = bracket_problems(entry.text) if c_family else []
        for line, msg in sure:
            out.append((line, f"syntax error: {msg}", "error"))
        for d in parse.diagnostics:
            sev = d.severity
            if sev == "error" and c_family and (d.message.startswith("syntax error") or "is incomplete" in d.message):
                if sure:
                    continue          # the bracket finding above says it better, at the right line
                sev = "info"
                msg = (f"ksearch's parser could not read this line ({d.message}); the file's brackets balance, so "
                       f"it is probably a macro or a preprocessor branch it does not follow. Port and Optimize "
                       f"still run (the compiler has the last word).")
            else:
                msg = d.message
            out.append((max(0, d.line), msg, sev))
    _SYNTAX[key] = out
    if len(_SYNTAX) > 512:
        _SYNTAX.pop(next(iter(_SYNTAX)))
    return out


def file_diagnostics(ls: "KsearchServer", entry: FileEntry) -> list[types.Diagnostic]:
    out: list[types.Diagnostic] = []
    if entry.parse is None:
        return out
    for line, message, severity in syntax_problems(entry):
        out.append(types.Diagnostic(
            range=types.Range(start=types.Position(line=line, character=0),
                              end=entry.positions.end_of_line(line) if entry.positions else types.Position(line=line, character=0)),
            source=SOURCE, code="syntax" if severity == "error" else None,
            severity=_SEVERITY.get(severity, types.DiagnosticSeverity.Warning), message=message))
    for k in entry.kernels:
        has_task = ls.tasks.find(entry.path, k.name, entry.hash).has_task
        out.extend(kernel_diagnostics(entry, k, has_task))
    return out


def task_file_diagnostics(path: str, text: str) -> list[types.Diagnostic]:
    """Validate a `*.task.toml` (as saved on disk, since `*_file` keys are read relative to it)."""
    try:
        import tomllib
        data = tomllib.loads(text or Path(path).read_text())
        if "inputs" not in data and "family" in data:
            return []          # the `family = "..."` shortcut: the CLI and the server resolve it
    except Exception:  # noqa: BLE001 - KernelTask.load reports bad TOML with its line below
        pass
    try:
        KernelTask.load(path)
    except TaskError as e:
        msg = str(e)
        line = _error_line(msg, text)
        return [types.Diagnostic(
            range=types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=200)),
            source=SOURCE, code="invalid-task", severity=types.DiagnosticSeverity.Error,
            message=msg.replace(str(path) + ": ", "") + f" (fix {Path(path).name})")]
    return []


def _error_line(msg: str, text: str) -> int:
    m = re.search(r"line (\d+)", msg)
    if m:
        return max(0, int(m.group(1)) - 1)
    m = re.search(r"invalid task: ([\w.]+)", msg)
    if m:
        for part in reversed(m.group(1).split(".")):
            if part.isdigit():
                continue
            for i, line in enumerate(text.splitlines()):
                if re.match(rf"\s*{re.escape(part)}\s*=", line) or line.strip() == f"[[{part}]]":
                    return i
    return 0


def publish(ls: "KsearchServer", uri: str, diagnostics: list[types.Diagnostic], version: int | None = None) -> None:
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics,
                                                                        version=version))


def refresh_file(ls: "KsearchServer", uri: str) -> None:
    """Recompute and publish the diagnostics of one open document."""
    path = ls.path_of(uri)
    doc = ls.document(uri)
    if path.endswith(".task.toml"):
        publish(ls, uri, task_file_diagnostics(path, doc.source if doc else ""))
        return
    entry = ls.index.get(path)
    if entry is not None:
        publish(ls, uri, file_diagnostics(ls, entry), doc.version if doc else None)
