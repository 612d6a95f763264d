"""Preprocessor conditionals (`#if`, `#ifdef`, `#ifndef`, `#elif`, `#else`, `#endif`) decided as nvcc would decide
them, where the macros they test are known: from `#define`s seen before (the program's, its local headers', the
file's own, in order) and nvcc's own (`__CUDACC__`, `__NVCC__`).

    text, macros = resolve_conditionals(source, known_macros(preamble_directives))

The branches not taken become empty lines and the directives of decided conditionals too, so every line keeps its
number. A conditional whose condition names a macro not known here (one a `-D` flag or a system header could set,
`__CUDA_ARCH__`, which host and device passes see differently) is kept as written, with both branches: the
compiler of each port decides it. Used where a kernel's own text holds conditionals that a parser cannot read past
(parameters inside `#if`).
"""
from __future__ import annotations

import re

_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif|define|undef)\b(.*)$", re.S)
_CONDITIONAL = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|else|endif)\b", re.M)
UNKNOWN = object()   # a macro defined where it is not known whether (inside an undecided conditional)
PREDEFINED = {"__CUDACC__": "1", "__NVCC__": "1"}
# names a compiler, a system header or the toolkit may define: never taken as undefined for not being seen here
_SYSTEM_NAME = re.compile(r"^_|CUDA|CUDART|NV|WIN|APPLE|MACH|linux|unix|GNUC|clang|MSC|cplusplus", re.I)


def _seen(name: str, macros: dict):
    """A macro's entry: its value, None (undefined), UNKNOWN; a name never defined here counts as undefined (as
    the preprocessor takes it), unless a compiler or system header could define it (then UNKNOWN)."""
    if name in macros:
        return macros[name]
    return UNKNOWN if _SYSTEM_NAME.search(name) else None


def has_conditionals(text: str) -> bool:
    return bool(_CONDITIONAL.search(text))


def _strip_comments(s: str) -> str:
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", s, flags=re.S)


def _value(expr: str, macros: dict, depth: int = 0):
    """The integer value of a `#if` expression, or None when it names something not known here."""
    from ..translate.hostexpr import HostExprError, expr_to_py

    e = _strip_comments(expr).strip()
    if not e or depth > 12:
        return None

    def defined(m):
        v = _seen(m.group(1) or m.group(2), macros)
        if v is UNKNOWN:
            raise KeyError
        return "1" if v is not None else "0"

    try:
        e = re.sub(r"\bdefined\s*\(\s*([A-Za-z_]\w*)\s*\)|\bdefined\s+([A-Za-z_]\w*)", defined, e)
    except KeyError:
        return None
    for _ in range(12):   # object-like macros, expanded until only numbers remain
        names = [n for n in re.findall(r"\b[A-Za-z_]\w*\b", e) if n not in ("true", "false")]
        if not names:
            break
        for n in set(names):
            v = _seen(n, macros)
            if v is None:   # an identifier that is no macro is 0 in a #if
                v = "0"
            if not isinstance(v, str) or not v.strip():   # unknown, function-like or empty
                return None
            e = re.sub(r"\b" + re.escape(n) + r"\b", "(" + v.strip() + ")", e)
    else:
        return None
    e = e.replace("true", "1").replace("false", "0")
    if re.search(r"[A-Za-z_]\w*\s*\(", re.sub(r"\b0[xX][0-9a-fA-F]+[uUlL]*", "0", e)):   # a function-like macro
        return None
    try:
        py = expr_to_py(e)
        v = eval(py, {"__builtins__": {}, "_cdiv": lambda a, b: int(a / b), "_cmod": lambda a, b: a % b}, {})
    except (HostExprError, Exception):
        return None
    if isinstance(v, bool):
        return int(v)
    return int(v) if isinstance(v, (int, float)) else None


def _define(rest: str, macros: dict, certain: bool) -> None:
    m = re.match(r"\s*([A-Za-z_]\w*)(\()?(.*)$", rest, re.S)
    if not m:
        return
    name, fn, body = m.group(1), m.group(2), m.group(3)
    if not certain:
        macros[name] = UNKNOWN
    elif fn:
        macros[name] = ("function", body)   # defined, with no value a condition could use
    else:
        macros[name] = _strip_comments(body.replace("\\\n", " ")).strip()


def known_macros(texts: list[str], macros: dict | None = None) -> dict:
    """Macros after the directives of `texts` (preamble entries: `#define`s, conditional blocks of them)."""
    out = dict(PREDEFINED) if macros is None else macros
    for t in texts:
        if t.lstrip().startswith("#"):
            _, out = resolve_conditionals(t, out)
    return out


def _guard(lines: list[str], start: int, name: str) -> bool:
    """Whether the first line with text from `start` on is `#define <name>` (an include guard's)."""
    for line in lines[start:start + 20]:
        if line.strip():
            return re.match(rf"\s*#\s*define\s+{re.escape(name)}\s*(?://.*|/\*.*)?$", line) is not None
    return False


def resolve_conditionals(text: str, macros: dict | None = None) -> tuple[str, dict]:
    """(`text` with the conditionals it can decide resolved, the macros after it); see the module docstring."""
    macros = dict(PREDEFINED) if macros is None else dict(macros)
    lines = text.split("\n")
    out: list[str] = []
    # frames: ["known", taking, done] | ["unknown"] | ["skip"]
    stack: list[list] = []

    def active() -> bool:
        return all(f[0] == "unknown" or (f[0] == "known" and f[1]) for f in stack)

    def certain() -> bool:
        return all(f[0] == "known" for f in stack)

    i = 0
    while i < len(lines):
        # a directive continues over lines ending in a backslash
        j = i
        logical = lines[i]
        while logical.endswith("\\") and j + 1 < len(lines):
            j += 1
            logical = logical[:-1] + "\n" + lines[j]
        group = lines[i:j + 1]
        m = _DIRECTIVE.match(logical)
        keep, blank = group, [""] * len(group)
        if not m:
            out += keep if active() else blank
            i = j + 1
            continue
        kind, rest = m.group(1), m.group(2)
        if kind in ("if", "ifdef", "ifndef"):
            if not active():
                stack.append(["skip"])
                out += blank
            else:
                name = re.match(r"\s*([A-Za-z_]\w*)", rest)
                if kind == "if":
                    v = _value(rest, macros)
                elif name is None:
                    v = None
                else:
                    d = _seen(name.group(1), macros)
                    v = None if d is UNKNOWN else (1 if d is not None else 0)
                    if v is not None and kind == "ifndef":
                        v = 1 - v
                    if v is None and kind == "ifndef" and _guard(lines, j + 1, name.group(1)):
                        v = 1   # an include guard (`#ifndef __JACOBI_H__` / `#define __JACOBI_H__`): first inclusion
                if v is None:
                    stack.append(["unknown"])
                    out += keep
                else:
                    stack.append(["known", bool(v), bool(v)])
                    out += blank
        elif kind in ("elif", "else"):
            f = stack[-1] if stack else ["unknown"]
            if f[0] == "skip":
                out += blank
            elif f[0] == "unknown":
                out += keep
            elif f[2]:   # a branch was taken: the rest are not
                f[1] = False
                out += blank
            elif kind == "else":
                f[1] = f[2] = True
                out += blank
            else:
                v = _value(rest, macros)
                if v is None:   # undecided from here on: the compiler decides the rest of the chain
                    stack[-1] = ["unknown"]
                    out += [re.sub(r"#[ \t]*elif", "#if", group[0], count=1)] + group[1:]
                    # the closing #endif of this chain stays as written, closing the #if written here
                else:
                    f[1] = f[2] = bool(v)
                    out += blank
        elif kind == "endif":
            f = stack.pop() if stack else ["unknown"]
            out += keep if f[0] == "unknown" else blank
        else:   # define / undef
            if active():
                if kind == "define":
                    _define(rest, macros, certain())
                else:
                    n = re.match(r"\s*([A-Za-z_]\w*)", rest)
                    if n:
                        macros[n.group(1)] = None if certain() else UNKNOWN
                out += keep
            else:
                out += blank
        i = j + 1
    return "\n".join(out), macros
