"""The launch geometry a kernel was written for, read from the source when no program runs it.

A kernel that assumes `blockDim == TILE`, a `__shared__ float s[BLOCK][BLOCK]` tile, `__launch_bounds__(N)` or
`dim3 threads(BLOCK_SIZE, BLOCK_SIZE)` at its launch site races or faults on a made-up geometry. This module
evaluates what the source says, statically:

- launch sites `kernel<targs><<<grid, block, smem>>>(args)`, `cudaLaunchKernel(kernel, grid, block, args, smem)`
  and the driver API's `cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, ...)` (`f` from `cuModuleGetFunction(&f,
  module, "name")`), in the kernel's file, its program and the sources next to it; a launch through a function
  pointer (`kernel<<<...>>>` where `kernel` is a variable) counts for every kernel taking as many arguments;
- the expressions there, with the `#define`s in force (`#if`/`#ifdef`/`#else` followed), file-scope `const` /
  `constexpr` ints and enums, the host function's own `dim3`/int variables and loop starts, `sizeof` of scalar
  types, casts, `min`/`max`, round-up divisions and simple function-like macros; template arguments of a host
  template (`launch<64, 8>(...)` calling `kernel<W, H><<<...>>>`) are followed to its calls;
- `__launch_bounds__(N)` and the sizes of the kernel's `__shared__` arrays, where no launch site says more.

A launch the file's own constants make too big for the CPU (`#define ROWS (TILE * ROW_TILES)` with a grid of
thousands of blocks) is read again with those host-side constants divided by a power of two, never one that the
kernel's device code reads, so that its grid and the sizes passed with it agree; the origin names the sizes taken.

A value known only when the program runs (an image width, a command-line size) stands for one made-up size `n`
that is the same everywhere in one launch, so a grid `n / TILE` and the scalar argument `n` passed with it agree.
Nothing here runs code; `portinfer` tries the geometries in order.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_BLOCKS_PER_DIM = 64
MAX_BLOCKS = 256
MAX_FILES = 40
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hxx", ".inl")

SIZEOF = {"char": 1, "unsigned char": 1, "signed char": 1, "bool": 1, "short": 2, "unsigned short": 2,
          "int": 4, "unsigned int": 4, "unsigned": 4, "uint": 4, "float": 4, "int32_t": 4, "uint32_t": 4,
          "long": 8, "unsigned long": 8, "long long": 8, "unsigned long long": 8, "size_t": 8, "double": 8,
          "int64_t": 8, "uint64_t": 8, "half": 2, "__half": 2, "int8_t": 1, "uint8_t": 1, "int16_t": 2,
          "uint16_t": 2, "float2": 8, "float4": 16, "int2": 8, "int4": 16, "uint2": 8, "uint4": 16,
          "double2": 16, "clock_t": 8, "uchar4": 4, "char4": 4, "short2": 4, "ushort2": 4}

_INT_TYPES = r"(?:unsigned\s+|signed\s+)?(?:long\s+long|int|long|short|size_t|unsigned|uint|u?int(?:8|16|32|64)_t|auto)"


class EvalError(Exception):
    pass


class Unknown(Exception):
    """An expression that needs a value only the running program knows (where none may stand in)."""


@dataclass
class Geometry:
    """One way to launch the kernel: where it came from, and what it fixes (None: not fixed by the source)."""
    block: tuple[int, int, int]
    grid: tuple[int, int, int] | None = None
    shared_mem: int | None = None
    template_args: list[str] | None = None
    scalars: dict[str, int | float] = field(default_factory=dict)
    origin: str = ""
    from_source: bool = True     # False: the made-up default

    def key(self):
        return (self.block, self.grid, self.shared_mem, tuple(self.template_args or ()),
                tuple(sorted(self.scalars.items())))


# ---------------------------------------------------------------- text helpers

def strip_comments(text: str) -> str:
    """Comments and string contents blanked (same length, newlines kept), so offsets still match the text."""
    def blank(m):
        s = m.group(0)
        if s[0] in "\"'":
            return s[0] + re.sub(r"[^\n]", " ", s[1:-1]) + s[-1] if len(s) >= 2 else s
        return re.sub(r"[^\n]", " ", s)
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S)


def split_top(s: str, sep: str = ",") -> list[str]:
    """`s` split at `sep` outside (), [], {} and template <>."""
    out, depth, cur, angle = [], 0, [], 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "<" and depth == 0 and re.match(r"\s*(?:[A-Za-z_]|\d+\s*[,>])", s[i + 1:]) \
                and re.search(r"[A-Za-z_]\w*\s*$", s[:i]) and not re.search(r"<\s*$", s[:i]):
            angle += 1
        elif ch == ">" and angle and depth == 0 and s[i - 1:i] != "-":
            angle -= 1
        if ch == sep and depth == 0 and angle == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [x.strip() for x in out]


def balanced(text: str, open_at: int, o: str = "(", c: str = ")") -> int:
    """Offset just past the bracket that closes the one at `open_at`; -1 when unbalanced."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == o:
            depth += 1
        elif text[i] == c:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


# ---------------------------------------------------------------- macros and file-scope constants

class Scope:
    """Macros (object- and function-like) and file-scope integer constants of a set of sources."""

    def __init__(self):
        self.macros: dict[str, str] = {}
        self.fmacros: dict[str, tuple[list[str], str]] = {}
        self.consts: dict[str, str] = {}
        self.cache: dict[str, object] = {}

    def add_text(self, text: str, given: dict | None = None) -> None:
        clean = strip_comments(text).replace("\\\n", " ")
        active = [True]          # stack: is this branch live
        taken = [True]           # stack: has a branch of this #if been taken
        for line in clean.splitlines():
            m = re.match(r"\s*#\s*(\w+)\s*(.*)$", line)
            if not m:
                continue
            d, rest = m.group(1), m.group(2).strip()
            if d in ("if", "ifdef", "ifndef"):
                live = active[-1] and self._cond(d, rest)
                active.append(live)
                taken.append(live)
            elif d == "elif":
                if len(active) > 1:
                    live = active[-2] and not taken[-1] and self._cond("if", rest)
                    active[-1] = live
                    taken[-1] = taken[-1] or live
            elif d == "else":
                if len(active) > 1:
                    active[-1] = active[-2] and not taken[-1]
                    taken[-1] = True
            elif d == "endif":
                if len(active) > 1:
                    active.pop()
                    taken.pop()
            elif d == "define" and active[-1]:
                fm = re.match(r"([A-Za-z_]\w*)\(([^)]*)\)\s*(.*)$", rest)
                if fm:
                    self.fmacros[fm.group(1)] = ([a.strip() for a in fm.group(2).split(",") if a.strip()],
                                                 fm.group(3).strip())
                else:
                    om = re.match(r"([A-Za-z_]\w*)\s*(.*)$", rest)
                    if om:
                        self.macros[om.group(1)] = om.group(2).strip()
            elif d == "undef" and active[-1]:
                self.macros.pop(rest.split()[0] if rest else "", None)
        # file-scope constants and enums (anywhere: host-local ones are read again per function); a file read
        # later (nearer the kernel) overrides an earlier one's
        consts: dict[str, str] = {}
        for m in re.finditer(r"\b(?:static\s+)?(?:const|constexpr)\s+(?:static\s+)?" + _INT_TYPES +
                             r"\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+);", clean):
            consts.setdefault(m.group(1), m.group(2))
        for m in re.finditer(r"\benum\b(?:\s+class)?\s*\w*\s*(?::\s*\w+\s*)?\{([^}]*)\}", clean):
            prev = None
            for item in split_top(m.group(1)):
                em = re.match(r"([A-Za-z_]\w*)\s*(?:=\s*(.+))?$", item.strip())
                if not em:
                    continue
                expr = em.group(2) if em.group(2) else (f"({prev}) + 1" if prev else "0")
                consts.setdefault(em.group(1), expr)
                prev = em.group(1)
        self.consts.update(consts)
        for n, v in (given or {}).items():
            self.macros[n] = str(v)
        self.cache.clear()

    def _cond(self, d: str, rest: str) -> bool:
        name = rest.split()[0] if rest.split() else ""
        if d == "ifdef":
            return name in self.macros or name in self.fmacros
        if d == "ifndef":
            return not (name in self.macros or name in self.fmacros)
        expr = re.sub(r"\bdefined\s*\(?\s*([A-Za-z_]\w*)\s*\)?",
                      lambda m: "1" if (m.group(1) in self.macros or m.group(1) in self.fmacros) else "0", rest)
        try:
            return bool(evaluate(expr, self, {}, unknown=0)[0])
        except (EvalError, Unknown):
            return False

    def value(self, name: str, depth: int = 0):
        if name in self.cache:
            return self.cache[name]
        text = self.macros.get(name)
        if text is None:
            text = self.consts.get(name)
        if text is None or depth > 20:
            raise KeyError(name)
        self.cache[name] = None    # a cycle reads as unknown
        try:
            v, unknown = evaluate(text, self, {}, depth=depth + 1)
            if unknown:
                v = None
        except (EvalError, Unknown):
            v = None
        self.cache[name] = v
        return v


def _expand_fmacros(expr: str, scope: Scope, depth: int = 0) -> str:
    if depth > 8 or not scope.fmacros:
        return expr
    out, i = [], 0
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", expr):
        if m.start() < i or m.group(1) not in scope.fmacros:
            continue
        end = balanced(expr, m.end() - 1)
        if end < 0:
            break
        params, body = scope.fmacros[m.group(1)]
        args = split_top(expr[m.end():end - 1]) if params else []
        if len(args) != len(params):
            continue
        for p, a in zip(params, args):
            body = re.sub(rf"\b{re.escape(p)}\b", f"({a})", body)
        out.append(expr[i:m.start()])
        out.append(f"({body})")
        i = end
    out.append(expr[i:])
    res = "".join(out)
    return _expand_fmacros(res, scope, depth + 1) if res != expr else res


# ---------------------------------------------------------------- expressions

class _Dim3(tuple):
    pass


class Lazy(str):
    """A host variable whose value needs a runtime one: its expression, read where it is used (with the stand-in)."""


def _dim3(*a):
    v = [int(x) for x in a] + [1, 1, 1]
    return _Dim3(v[:3])


def _cdiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise EvalError("division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _ceil_div(a, b):
    return -(-int(a) // int(b))


def _align_up(a, b):
    return _ceil_div(a, b) * int(b)


_FUNCS = {"min": min, "max": max, "MIN": min, "MAX": max, "fmin": min, "fmax": max, "imin": min, "imax": max,
          "umin": min, "umax": max, "_dim3": _dim3, "_cdiv": _cdiv, "_ceil_div": _ceil_div, "_align_up": _align_up,
          "ceil": math.ceil, "floor": math.floor, "abs": abs, "sqrt": math.sqrt, "sqrtf": math.sqrt,
          "ceilf": math.ceil, "floorf": math.floor, "log2": math.log2, "pow": pow}
_CEIL_DIV = re.compile(r"\b(?:i?[Dd]iv(?:Rnd)?[Uu]p|DIV_UP|DIVUP|CEIL_DIV|ceil_div|ceilDiv|div_round_up|"
                       r"DIV_ROUND_UP|cuda_div_up|divup|iDivCeil|divCeil|ceilDivide)\s*\(")
_ALIGN_UP = re.compile(r"\b(?:iAlignUp|alignUp|ALIGN_UP|align_up|roundUp|round_up)\s*\(")


class _Names(dict):
    def __init__(self, scope: Scope, local: dict, unknown, depth: int):
        super().__init__(_FUNCS)
        self.scope, self.local, self.unknown, self.depth, self.used_unknown = scope, local, unknown, depth, False

    def __missing__(self, name):
        base, _, comp = name.partition("__")
        for n in (name, base):
            if n in self.local:
                v = self.local[n]
                if isinstance(v, Lazy) and self.depth < 30:
                    local = dict(self.local)
                    local[n] = None       # `x = x + 1` reads the earlier, unknown, x
                    try:
                        v, unk = evaluate(v, self.scope, local, unknown=self.unknown, depth=self.depth + 1)
                    except (EvalError, Unknown):
                        v, unk = None, False
                    self.used_unknown |= unk
                if v is None or isinstance(v, Lazy):
                    break
                try:
                    return _component(v, n == base and comp)
                except _NoComponent:
                    break
            try:
                v = self.scope.value(n, self.depth)
            except KeyError:
                continue
            if v is None:
                break
            try:
                return _component(v, n == base and comp)
            except _NoComponent:
                break
        if self.unknown is None:
            raise Unknown(name)
        self.used_unknown = True
        return self.unknown


def _pyexpr(expr: str, scope: Scope) -> str:
    e = _expand_fmacros(expr.strip(), scope)
    e = re.sub(r"\bstd\s*::\s*|\b::\s*", "", e)
    e = re.sub(r"\bsizeof\s*\(\s*([^()]*?)\s*\)",
               lambda m: str(SIZEOF[re.sub(r"\s+", " ", m.group(1).replace("const ", ""))])
               if re.sub(r"\s+", " ", m.group(1).replace("const ", "")) in SIZEOF else "_nosizeof_", e)
    e = re.sub(r"\b(?:static_cast|reinterpret_cast|const_cast)\s*<[^<>]*>", "", e)
    e = re.sub(r"\(\s*(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:long\s+long|int|long|short|char|size_t|float|double|"
               r"unsigned|uint|u?int(?:8|16|32|64)_t|bool)\s*\)", "", e)
    e = re.sub(r"\b(?:min|max)\s*<\s*\w+\s*>", lambda m: m.group(0).split("<")[0], e)
    e = _CEIL_DIV.sub("_ceil_div(", e)
    e = _ALIGN_UP.sub("_align_up(", e)
    e = re.sub(r"\bdim3\s*[({]", "_dim3(", e)
    e = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", e)
    e = re.sub(r"\b(\d+\.\d*|\.\d+|\d+\.?\d*[eE][-+]?\d+)[fF]\b", r"\1", e)
    e = re.sub(r"\b(\d+)\.[fF]\b|\b(\d+)[fF]\b", lambda m: (m.group(1) or m.group(2)) + ".0", e)
    e = re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", e))
    e = re.sub(r"\s*->\s*|(?<=[\w\]\)])\.(?=[A-Za-z_])", "__", e)
    e = re.sub(r"\b0(\d+)\b", r"0o\1", e)
    e = e.replace("&&", " and ").replace("||", " or ")
    e = re.sub(r"!(?!=)", " not ", e)
    e = re.sub(r"(?<![/])/(?![/=])", " _DIV_ ", e)
    m = re.match(r"^(.*?)\?(.*?):(.*)$", e, re.S)
    if m:
        e = f"(({m.group(2)}) if ({m.group(1)}) else ({m.group(3)}))"
    return e


def evaluate(expr: str, scope: Scope, local: dict, *, unknown=None, depth: int = 0):
    """(value, whether a stand-in `unknown` was used) of a C expression; EvalError where it cannot be read,
    Unknown where it needs a runtime value and no stand-in is given."""
    if not expr or not expr.strip():
        raise EvalError("empty")
    e = _pyexpr(expr, scope)
    if "_nosizeof_" in e or re.search(r"[{}\[\];\"']|\b(?:new|this|delete)\b", e):
        raise EvalError(expr)
    names = _Names(scope, local, unknown, depth)
    e = e.replace(" _DIV_ ", " // ")
    try:
        v = eval(compile(e, "<expr>", "eval"), {"__builtins__": {}}, names)
    except Unknown:
        raise
    except Exception as ex:
        # `//` floors where C truncates toward zero; only negative quotients differ, and those are no sizes
        raise EvalError(f"{expr}: {ex}") from None
    if isinstance(v, bool):
        v = int(v)
    if not isinstance(v, (int, float, tuple)):
        raise EvalError(expr)
    return v, names.used_unknown


# ---------------------------------------------------------------- sites

@dataclass
class Site:
    kernel: str                   # the name at the call (a variable for a launch through a pointer)
    template_args: list[str]
    grid: list[str]               # one expression (a dim3 or int), or three
    block: list[str]
    shared_mem: str | None
    args: list[str] | None        # None: not known (driver-API launches)
    text: str                     # the comment-free source it is in
    offset: int
    path: Path
    line: int


def find_sites(text: str, path: Path) -> list[Site]:
    clean = strip_comments(text)
    out: list[Site] = []
    for m in re.finditer(r"\b([A-Za-z_][\w:]*)\s*(<[^;<>]*(?:<[^;<>]*>[^;<>]*)*>)?\s*<\s*<\s*<", clean):
        cm = re.compile(r">\s*>\s*>").search(clean, m.end())     # `<< <` / `>> >` as old nvcc code writes them
        if cm is None:
            continue
        close, after = cm.start(), cm.end()
        cfg = split_top(clean[m.end():close])
        po = re.match(r"\s*\(", clean[after:])
        args = None
        if po:
            start = after + po.end() - 1
            end = balanced(clean, start)
            if end > 0:
                inner = clean[start + 1:end - 1].strip()
                args = split_top(inner) if inner else []
        targs = split_top(m.group(2)[1:-1]) if m.group(2) else []
        name = m.group(1).split("::")[-1]
        out.append(Site(name, targs, [cfg[0]] if cfg else [], [cfg[1]] if len(cfg) > 1 else [],
                        cfg[2] if len(cfg) > 2 else None, args, clean, m.start(), path,
                        clean.count("\n", 0, m.start()) + 1))
    handles = {m.group(1): m.group(2) for m in
               re.finditer(r"cuModuleGetFunction\s*\(\s*&\s*(\w+)\s*,\s*[^,]+,\s*\"(\w+)\"", text)}
    for m in re.finditer(r"\b(cuLaunchKernel|cudaLaunchKernel|cudaLaunchCooperativeKernel|"
                         r"cuLaunchCooperativeKernel)\s*\(", clean):
        end = balanced(clean, m.end() - 1)
        if end < 0:
            continue
        a = split_top(clean[m.end():end - 1])
        fn = re.sub(r"\([^()]*\)|[&*\s]", "", a[0]) if a else ""
        fn = fn.split("::")[-1]
        line = clean.count("\n", 0, m.start()) + 1
        if m.group(1).startswith("cu") and not m.group(1).startswith("cuda") and len(a) >= 7:
            out.append(Site(handles.get(fn, fn), [], a[1:4], a[4:7], a[7] if len(a) > 7 else None, None,
                            clean, m.start(), path, line))
        elif len(a) >= 3:
            out.append(Site(fn, [], [a[1]], [a[2]], a[4] if len(a) > 4 else None, None, clean, m.start(),
                            path, line))
    return out


def _enclosing_function(clean: str, pos: int) -> tuple[int, str] | None:
    """(offset of the body's `{`, header text) of the outermost function body around `pos`."""
    stack = []
    for m in re.finditer(r"[{}]", clean[:pos]):
        if m.group(0) == "{":
            stack.append(m.start())
        elif stack:
            stack.pop()
    for b in stack:
        before = clean[:b].rstrip()
        before = re.sub(r"(?:\bconst|\boverride|\bnoexcept|->\s*[\w:<>]+)\s*$", "", before).rstrip()
        if before.endswith(")"):
            start = max(before.rfind(";"), before.rfind("}"), before.rfind("{")) + 1
            return b, clean[start:b]
    return None


_DECL = re.compile(
    r"(?P<dim3>\bdim3\s+(?P<d3>[^;]+);)"
    r"|(?P<int>(?<![\w.>])(?:(?:static|const|constexpr|register)\s+)*" + _INT_TYPES + r"\s+(?P<iv>(?![\w\s]*\()[^;]+);)"
    r"|(?P<for>\bfor\s*\(\s*(?:" + _INT_TYPES + r"\s+)?(?P<fv>\w+)\s*=\s*(?P<fe>[^;]+);)"
    r"|(?P<asg>(?<![\w.>])(?P<an>[A-Za-z_]\w*(?:\.[xyz])?)\s*=(?!=)\s*(?P<ae>[^;]+);)")


def host_env(site: Site, scope: Scope, types: dict | None = None) -> tuple[dict, list[str], str | None]:
    """The host function's variables before `site` ({name: value, None where runtime}), its template parameter
    names, and its name. `types` ({template parameter: type}, from a call of the host template) gives `sizeof(T)`
    of the host function's own type parameters (`smem = 2 * sizeof(T)`)."""
    enc = _enclosing_function(site.text, site.offset)
    env: dict = {}
    if enc is None:
        return env, [], None
    brace, header = enc
    tparams = []
    tm = re.search(r"\btemplate\s*<(.*)>", header, re.S)
    if tm:
        for tp in split_top(tm.group(1)):
            nm = re.search(r"([A-Za-z_]\w*)\s*(?:=.*)?$", tp)
            if nm:
                tparams.append(nm.group(1))
    fname = None
    pm = re.search(r"([A-Za-z_]\w*)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*$", header.strip(), re.S)
    if pm:
        fname = pm.group(1)
        for prm in split_top(pm.group(2)):
            nm = re.search(r"([A-Za-z_]\w*)\s*(?:\[\s*\])?\s*(?:=.*)?$", prm)
            if nm:
                env[nm.group(1)] = None
    body = site.text[brace + 1:site.offset]

    def val(expr):
        """The value where the source fixes it, else the expression itself (read later with a stand-in)."""
        if types:
            expr = _sizeof_bound(expr, types)
        try:
            v, unk = evaluate(expr, scope, env)
            return v
        except Unknown:
            return Lazy(expr)
        except EvalError:
            return None

    for m in _DECL.finditer(body):
        if m.group("dim3"):
            for d in split_top(m.group("d3")):
                dm = re.match(r"([A-Za-z_]\w*)\s*(?:\((.*)\)|\{(.*)\}|=\s*(.+))?\s*$", d, re.S)
                if not dm:
                    continue
                if dm.group(2) is not None or dm.group(3) is not None:
                    inner = dm.group(2) if dm.group(2) is not None else dm.group(3)
                    parts = [val(x) for x in split_top(inner)] if inner.strip() else []
                    if any(p is None or isinstance(p, tuple) for p in parts):
                        env[dm.group(1)] = None
                    elif any(isinstance(p, Lazy) for p in parts):
                        env[dm.group(1)] = Lazy(f"dim3({inner})")
                    else:
                        env[dm.group(1)] = _dim3(*parts) if parts else _dim3()
                elif dm.group(4) is not None:
                    v = val(dm.group(4))
                    env[dm.group(1)] = v if isinstance(v, (tuple, Lazy)) else (_dim3(v) if isinstance(v, int) else None)
                else:
                    env[dm.group(1)] = _dim3()
        elif m.group("int"):
            for d in split_top(m.group("iv")):
                dm = re.match(r"([A-Za-z_]\w*)\s*(?:=\s*(.+)|\((.+)\)|\{(.+)\})?\s*$", d, re.S)
                if dm:
                    e = dm.group(2) or dm.group(3) or dm.group(4)
                    env[dm.group(1)] = val(e) if e else None
        elif m.group("for"):
            env[m.group("fv")] = val(m.group("fe"))
        elif m.group("asg"):
            n = m.group("an")
            v = val(m.group("ae"))
            if "." in n:
                base, comp = n.split(".")
                cur = env.get(base)
                if isinstance(cur, tuple) and isinstance(v, int):
                    lst = list(cur)
                    lst["xyz".index(comp)] = v
                    env[base] = _dim3(*lst)
                elif isinstance(cur, (tuple, Lazy)) and isinstance(v, (int, Lazy)):
                    parts = [f"({base}.{c})" if c != comp else f"({m.group('ae')})" for c in "xyz"]
                    env[base] = Lazy(f"dim3({', '.join(parts)})")
                elif base in env:
                    env[base] = None
            else:
                env[n] = v
    return env, tparams, fname


# ---------------------------------------------------------------- the kernel's geometries

def related_sources(path: Path) -> list[tuple[Path, str]]:
    """The kernel's file first, then its program and the program's other sources, then the other sources in the
    same folder (a program that loads the kernel at run time, NVRTC or the driver API, is one of those)."""
    files: list[Path] = [path]
    try:
        from .portfile import find_program_and_sources
        prog, srcs = find_program_and_sources(path)
        files += [f for f in [prog, *srcs] if f is not None]
    except Exception:
        pass
    try:
        files += sorted(f for f in path.parent.iterdir() if f.suffix in SOURCE_SUFFIXES and f.is_file())
    except OSError:
        pass
    # a header's includers (directly or through other headers: `runner.cu` includes `kernels.cuh`, which
    # includes `kernels/k3.cuh`) in the folders above it, and the sources next to them: the launches that
    # instantiate its template kernels are there
    for inc in _includers(path):
        files.append(inc)
        try:
            files += sorted(f for f in inc.parent.iterdir() if f.suffix in SOURCE_SUFFIXES and f.is_file())
        except OSError:
            pass
    seen, out = set(), []
    for f in files:
        try:
            key = f.resolve()
        except OSError:
            continue
        if key in seen or len(out) >= MAX_FILES:
            continue
        seen.add(key)
        try:
            if f.stat().st_size > 2 << 20:
                continue
            out.append((f, f.read_text(errors="replace")))
        except OSError:
            continue
    return out


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def _includers(path: Path, levels: int = 3, max_scan: int = 400) -> list[Path]:
    """Source files in `path`'s folder and up to `levels` folders above it (each folder's own files and those of
    its direct subfolders) that include `path`, directly or through headers that do; nearest first."""
    try:
        target = path.resolve()
    except OSError:
        return []
    folders, d = [], target.parent
    for _ in range(levels + 1):
        folders.append(d)
        if d.parent == d or (d / ".git").exists():
            break
        d = d.parent
    cands: list[Path] = []
    seen: set[Path] = set()
    for fo in folders:
        try:
            subs = [fo] + sorted(x for x in fo.iterdir() if x.is_dir() and not x.name.startswith("."))
        except OSError:
            continue
        for sub in subs:
            try:
                for f in sorted(sub.iterdir()):
                    if f.suffix in SOURCE_SUFFIXES and f.is_file() and f.resolve() not in seen and f.resolve() != target:
                        seen.add(f.resolve())
                        cands.append(f)
            except OSError:
                continue
            if len(cands) >= max_scan:
                break
    includes: dict[Path, set[Path]] = {}
    for f in cands:
        try:
            if f.stat().st_size > 2 << 20:
                continue
            text = f.read_text(errors="replace")
        except OSError:
            continue
        includes[f] = {(f.parent / m).resolve() for m in _INCLUDE.findall(text)}
    found: list[Path] = []
    want = {target}
    changed = True
    while changed:
        changed = False
        for f, incs in includes.items():
            if f not in found and incs & want:
                found.append(f)
                want.add(f.resolve())
                changed = True
    return found


def build_scope(texts: list[str], given: dict | None = None) -> Scope:
    """The kernel's own file is read last: its #defines are what the kernel sees."""
    scope = Scope()
    scope.macros.update({n: str(v) for n, v in (given or {}).items()})   # -D: seen by every #if
    for t in reversed(texts[1:]):      # the program's sources over the other files next to it
        scope.add_text(t)
    scope.add_text(texts[0], given)
    return scope


def _fix(vals, n_default) -> tuple[int, int, int] | None:
    if vals is None:
        return None
    v = list(vals) if isinstance(vals, tuple) else [vals]
    if not all(isinstance(x, int) for x in v):
        return None
    v = (v + [1, 1, 1])[:3]
    return tuple(v)


def _dims(exprs: list[str], scope: Scope, env: dict, unknown) -> tuple[tuple[int, int, int], bool] | None:
    try:
        if len(exprs) == 1:
            v, unk = evaluate(exprs[0], scope, env, unknown=unknown)
            if isinstance(v, int):
                v = (v,)
        elif len(exprs) == 3:
            parts = [evaluate(e, scope, env, unknown=unknown) for e in exprs]
            v, unk = tuple(p[0] for p in parts), any(p[1] for p in parts)
        else:
            return None
    except (EvalError, Unknown):
        return None
    d = _fix(v, None)
    return (d, unk) if d else None


def _sizeof_bound(expr: str, types: dict) -> str:
    """`expr` with `sizeof(T)` of a bound type parameter T written as `sizeof(<its type>)`."""
    return re.sub(r"\bsizeof\s*\(\s*([A-Za-z_]\w*)\s*\)",
                  lambda m: f"sizeof({types[m.group(1)]})" if m.group(1) in types else m.group(0), expr)


def _host_template_values(site: Site, fname: str, tparams: list[str], texts: list[str], scope: Scope) -> list[dict]:
    """The template arguments each call `fname<...>(...)` in the sources gives the host template `fname`."""
    out = []
    for t in texts:
        for m in re.finditer(rf"\b{re.escape(fname)}\s*<([^<>;]*)>\s*\(", strip_comments(t)):
            vals = split_top(m.group(1))
            if len(vals) != len(tparams):
                continue
            d = {}
            for p, e in zip(tparams, vals):
                try:
                    v, unk = evaluate(e, scope, {})
                    d[p] = v if not unk else e
                except (EvalError, Unknown):
                    d[p] = e
            if d not in out:
                out.append(d)
    return out[:4]


def _targ_text(expr: str, scope: Scope, bind: dict, env: dict | None = None) -> str | None:
    e = expr.strip()
    if e in bind:
        return str(bind[e])
    if e in ("true", "false"):
        return e
    try:   # `1024 / numOfMultiWarpGroups`: the host function's own constants count too
        local = {k: v for k, v in (env or {}).items() if isinstance(v, int) and not isinstance(v, bool)}
        local.update({k: v for k, v in bind.items() if isinstance(v, int)})
        v, unk = evaluate(e, scope, local)
        if not unk and isinstance(v, int):
            return str(v)
    except (EvalError, Unknown):
        pass
    if re.fullmatch(r"[A-Za-z_][\w:\s\*]*", e) and e not in bind:
        return e       # a type (float, unsigned int, ...) or an enumerator the kernel's file knows
    return None


# a template parameter that is the block's size (`template <class T, unsigned int blockSize>`)
_BLOCK_PARAM = re.compile(r"(?i)^(?:block_?(?:size|dim|threads)(?:_?x)?|threads(?:_?per_?block)?|n_?threads|bs|"
                          r"block_?x|tpb|cta_?size)$")


def kernel_geometries(k, path: str | Path, *, given_defines: dict | None = None,
                      kernel_names: set[str] | None = None, sources=None) -> list[Geometry]:
    """Geometries for kernel `k` (a source.models.KernelInfo) read from the source, best first; may be empty."""
    path = Path(path)
    sources = sources if sources is not None else related_sources(path)
    if not sources:
        return []
    texts = [t for _, t in sources]
    scope = build_scope(texts, given_defines)
    kernel_names = set(kernel_names or ()) | {k.name}
    all_kernels = set(kernel_names)
    for t in texts:
        all_kernels |= set(re.findall(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?[\w\s:<>,*]*?\b"
                                      r"([A-Za-z_]\w*)\s*\(", strip_comments(t)))
    n_params = len(k.params)
    direct, indirect = [], []
    for f, t in sources:
        for s in find_sites(t, f):
            if s.kernel == k.name:
                direct.append(s)
            elif s.kernel not in all_kernels and s.args is not None and len(s.args) == n_params \
                    and not s.template_args and re.search(rf"\(\s*\*\s*{re.escape(s.kernel)}\s*\)|"
                                                          rf"\b{re.escape(s.kernel)}\s*=(?!=)", s.text):
                indirect.append(s)
    out: list[Geometry] = []
    by_targs: list[Geometry] = []      # sites whose template arguments resolve but whose block does not
    seen = set()
    two_d = re.search(r"(threadIdx|blockDim)\s*\.\s*y", k.body) is not None

    def add(g: Geometry):
        if g.key() not in seen and g.block[0] * g.block[1] * g.block[2] <= 1024 and min(g.block) >= 1:
            seen.add(g.key())
            out.append(g)

    for s in direct + indirect:
        env, tparams, fname = host_env(s, scope)
        binds = [{}]
        if tparams and fname and any(re.search(rf"\b{re.escape(p)}\b", " ".join(s.template_args + s.block +
                                                                                   s.grid + [s.shared_mem or ""]))
                                     for p in tparams):
            binds = _host_template_values(s, fname, tparams, texts, scope) or [{}]
        for bind in binds:
            types = {p: v.strip() for p, v in bind.items() if isinstance(v, str)}
            benv = dict(host_env(s, scope, types)[0] if types else env)
            benv.update({p: v for p, v in bind.items() if isinstance(v, int)})
            targs = None
            if s.template_args:
                targs = [_targ_text(a, scope, bind, benv) for a in s.template_args]
                if any(a is None for a in targs) or any(a in tparams for a in targs):
                    continue     # an argument the host template's caller gives, and no call here fixes it
            tparam_env = {}
            if targs and k.template_params:
                for tp, a in zip(k.template_params, targs):
                    if a.lstrip("-").isdigit():
                        tparam_env[tp.name] = int(a)
            got = _dims(s.block, scope, benv, None)
            if got is None:
                # a block the program computes at run time: the instantiation the site names still stands, at
                # the block its block-size template argument gives (`reduce<T, 256>`), else the made-up one
                if targs and k.template_params:
                    tb = next((v for n, v in tparam_env.items() if _BLOCK_PARAM.match(n) and 0 < v <= 1024), None)
                    by_targs.append(Geometry(block=(tb, 1, 1) if tb else ((16, 16, 1) if two_d else (128, 1, 1)),
                                             shared_mem=_site_smem(s, scope, benv, None, types),
                                             template_args=targs, from_source=False,
                                             origin=f"the template arguments of the launch at {s.path.name}:{s.line}"))
                continue
            block = got[0]
            n = max(64, 2 * max(block))
            g = _dims(s.grid, scope, benv, n)
            site_scope, scaled_note = scope, ""
            if g is not None and not g[1] and _too_many_blocks(g[0]):
                # a grid the file's own constants make too big to run on the CPU (`#define M_TILES 256` products):
                # the same launch at the host-side sizes divided by a power of two (never a name the kernel's device
                # code reads), so that the grid and the sizes passed with it agree, as a smaller run would give
                smaller = _smaller_site(s, k, scope, texts, given_defines, bind, block)
                if smaller is not None:
                    site_scope, benv, g, scaled_note = smaller
            # a grid of runtime sizes over tiles larger than the stand-in (`imageW / (8 * 16)` at 64) comes out 0:
            # the stand-in grows until each dimension has a block, so that the sizes the scalars get and the grid
            # agree (a grid clamped to 1 over sizes too small for it makes blocks overlap: a made-up race)
            while g is not None and g[1] and min(g[0]) < 1 and n < (1 << 16):
                n *= 2
                g = _dims(s.grid, scope, benv, n)
            grid = None
            if len(s.grid) == 1 and re.fullmatch(r"[A-Za-z_]\w*", s.grid[0].strip()) and \
                    benv.get(s.grid[0].strip(), 0) is None:
                g = None      # a grid the program computes at run time: its shape is not known either
            if g is not None:
                grid = tuple(max(1, min(MAX_BLOCKS_PER_DIM, x)) for x in g[0])
                while grid[0] * grid[1] * grid[2] > MAX_BLOCKS:
                    grid = tuple(max(1, x // 2) if x == max(grid) else x for x in grid)
            smem = _site_smem(s, site_scope, benv, n, types)
            scalars = {}
            if s.args is not None and len(s.args) == n_params:
                for p, a in zip(k.params, s.args):
                    if p.pointer:
                        continue
                    try:
                        v, unk = evaluate(a, site_scope, benv, unknown=n)
                    except (EvalError, Unknown):
                        continue
                    if unk and isinstance(v, (int, float)) and not 0 < v <= 1 << 22:
                        continue     # a runtime size the stand-in made empty or huge: the made-up default serves
                    if isinstance(v, (int, float)) and not isinstance(v, tuple):
                        scalars[p.name] = v
            how = "launch" if s.kernel == k.name else f"launch through '{s.kernel}'"
            add(Geometry(block=block, grid=grid, shared_mem=smem, template_args=targs, scalars=scalars,
                         origin=f"the {how} at {s.path.name}:{s.line}" + scaled_note))
    for g in by_targs:
        add(g)
    # __launch_bounds__(N) and shared-array sizes, where no launch site fixed the block
    if not out:
        if k.launch_bounds:
            lb = re.search(r"\(\s*([^,()]+(?:\([^()]*\))?[^,()]*)", k.launch_bounds)
            if lb:
                try:
                    v, unk = evaluate(lb.group(1), scope, {})
                    if isinstance(v, int) and not unk and 0 < v <= 1024:
                        r = int(math.isqrt(v))
                        block = (r, r, 1) if two_d and r * r == v else (v, 1, 1)
                        add(Geometry(block=block, origin=f"__launch_bounds__({v}) of '{k.name}'"))
                except (EvalError, Unknown):
                    pass
        for sh in k.shared:
            if sh.dynamic or not sh.sizes:
                continue
            try:
                dims = [evaluate(x, scope, {})[0] for x in sh.sizes]
            except (EvalError, Unknown):
                continue
            if not all(isinstance(d, int) and d > 0 for d in dims):
                continue
            if two_d and len(dims) >= 2:
                a, b = dims[-2], dims[-1]
                side = min(a, b)
                if side >= 4 and abs(a - b) <= 2 and side * side <= 1024:
                    add(Geometry(block=(side, side, 1), origin=f"the shared array '{sh.name}' "
                                                               f"[{']['.join(map(str, dims))}]"))
            elif not two_d and len(dims) == 1 and 32 <= dims[0] <= 1024 and dims[0] & (dims[0] - 1) == 0:
                add(Geometry(block=(dims[0], 1, 1), origin=f"the shared array '{sh.name}' [{dims[0]}]"))
    return out[:6]


# a launch the file's constants make bigger than this many threads is taken at smaller host-side sizes
SCALED_THREADS = 1 << 14
_MIN_SIZE = 256          # constants below this are not sizes worth scaling (tile sizes, block sizes, flags)
_MIN_SCALED = 16         # nor divided below this
_DEVICE_FN = re.compile(r"\b(__global__|__device__)\b[^;{}]*?\b([A-Za-z_]\w*)\s*\(")
_DEVICE_DECL = re.compile(r"\b(?:__device__|__constant__|__shared__|__managed__)\b[^;{}()]*;")


def _site_smem(s: "Site", scope: Scope, env: dict, unknown, types: dict) -> int | None:
    """The dynamic shared memory a launch site gives, where its expression can be read (None: not given or not
    known)."""
    if not s.shared_mem or s.shared_mem.strip() in ("0", ""):
        return None
    try:
        v, _ = evaluate(_sizeof_bound(s.shared_mem, types), scope, env, unknown=unknown)
    except (EvalError, Unknown):
        return None
    return v if isinstance(v, int) and 0 <= v <= 1 << 20 else None


def _too_many_blocks(grid) -> bool:
    return any(x > MAX_BLOCKS_PER_DIM for x in grid) or math.prod(grid) > MAX_BLOCKS


def _idents(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", text))


def _kernel_device_names(k, texts: list[str], scope: Scope) -> set[str]:
    """Names the device code of kernel `k` may read: its body, every `__device__` function and device-side
    declaration of the sources, `#if` conditions, and (transitively) the macros and constants these name. Another
    kernel's body does not count: its launches are not the ones taken here."""
    names = _idents(k.body or "") | _idents(" ".join(p.name for p in getattr(k, "template_params", []) or []))
    for t in texts:
        clean = strip_comments(t)
        for m in _DEVICE_FN.finditer(clean):
            if m.group(1) == "__global__" and m.group(2) != k.name:
                continue
            close = balanced(clean, m.end() - 1)
            if close < 0:
                continue
            j = close
            while j < len(clean) and clean[j] not in "{;":
                j += 1
            if j < len(clean) and clean[j] == "{":
                end = balanced(clean, j, "{", "}")
                if end > 0:
                    names |= _idents(clean[m.start():end])
        for m in _DEVICE_DECL.finditer(clean):
            names |= _idents(m.group(0))
        for m in re.finditer(r"^[ \t]*#[ \t]*(?:if|elif)\b([^\n]*)$", clean, re.M):
            names |= _idents(m.group(1))
    todo = list(names)
    while todo:
        n = todo.pop()
        text = scope.macros.get(n) or scope.consts.get(n) or ""
        if n in scope.fmacros:
            text += " " + scope.fmacros[n][1]
        for i in _idents(text):
            if i not in names:
                names.add(i)
                todo.append(i)
    return names


def _smaller_site(s: "Site", k, scope: Scope, texts: list[str], given: dict | None, bind: dict, block):
    """(scope, host env, grid, note) of launch site `s` with the file's size constants that its grid and arguments
    come from divided by the smallest power of two that brings the launch to about SCALED_THREADS threads, or None
    where no such constant is free of the kernel's device code."""
    enc = _enclosing_function(s.text, s.offset)
    end = s.text.find(";", s.offset)
    used = _idents(s.text[enc[0] if enc else s.offset:end if end > 0 else len(s.text)])
    reach, todo = set(used), list(used)
    while todo:
        n = todo.pop()
        for i in _idents(scope.macros.get(n) or scope.consts.get(n) or ""):
            if i not in reach:
                reach.add(i)
                todo.append(i)
    device = _kernel_device_names(k, texts, scope) | _idents(" ".join(s.template_args))
    given = given or {}
    sizes: dict[str, int] = {}
    for name in sorted(reach):
        if name in device or not (name in scope.macros or name in scope.consts):
            continue
        try:
            v = scope.value(name)
        except KeyError:
            continue
        if isinstance(v, int) and not isinstance(v, bool) and v >= _MIN_SIZE:
            sizes[name] = v
    # a constant written in terms of another one scaled follows it already (M_GLOBAL = M * M_TILES)
    leaves = {n: v for n, v in sizes.items()
              if not (_idents(scope.macros.get(n) or scope.consts.get(n) or "") & set(sizes))}
    def launch_at(values: dict):
        sc = build_scope(texts, {**given, **values})
        env, _tp, _fn = host_env(s, sc)
        env.update({p: v for p, v in bind.items() if isinstance(v, int)})
        got = _dims(s.grid, sc, env, None)
        vals = []
        for a in s.args or []:
            try:
                vals.append(evaluate(a, sc, env)[0])
            except (EvalError, Unknown, Exception):
                vals.append(None)
        return sc, env, got, vals
    # only the constants this launch's grid or arguments change with (not every size its host function names)
    base = launch_at({})
    leaves = {n: v for n, v in leaves.items() if launch_at({n: v // 2})[2:] != base[2:]}
    if not leaves:
        return None
    best = None
    f = 2
    while f <= 4096:
        new = {n: v // f for n, v in leaves.items()}
        if any(x < _MIN_SCALED for x in new.values()):
            break
        sc, env, got, _vals = launch_at(new)
        if got is None or got[1] or min(got[0]) < 1:
            break
        best = (sc, env, got, new)
        if not _too_many_blocks(got[0]) and math.prod(got[0]) * math.prod(block) <= SCALED_THREADS:
            break
        f *= 2
    if best is None or _too_many_blocks(best[2][0]):
        return None
    sc, env, got, new = best
    note = " with " + ", ".join(f"{n} = {v} (was {leaves[n]})" for n, v in new.items()) + \
        " (the file's sizes make that launch too big to run on the CPU)"
    return sc, env, got, note


class _NoComponent(Exception):
    """A `.x/.y/.z` read of a value that is no dim3."""


def _component(v, comp):
    """`v`, or its `.x/.y/.z` when `comp` names one (a dim3 is a tuple)."""
    if not comp:
        return v
    if isinstance(v, tuple) and comp in ("x", "y", "z"):
        return v["xyz".index(comp)]
    raise _NoComponent(comp)
