"""A capture at smaller sizes: when a program's launches are too big (bytes) or too slow to record and check on the
CPU, capture.py runs the program again with the host-side sizes that produced them divided by a power of two.

Which sizes: integer constants of the user's host code whose values the oversized launches show (a scalar
argument, a grid dimension, a buffer's element count):

* ``#define NAME EXPR`` and ``[const] int-type NAME = EXPR;`` (file scope or in a host function),
* the arguments of ``dim3 NAME(E1, E2, E3);`` declarations (sizes kept in dim3s),
* integer command-line arguments of the run.

Names that device code uses (kernel and ``__device__`` function bodies, ``__device__``/``__constant__``/
``__shared__`` declarations, template arguments of launches, and the macros these expand to) are never changed: the
kernels the ports are checked against stay exactly the file's own. Nothing is made up: the smaller run is the
user's own program, at sizes of its own kind, and every launch it records is a real launch of the original kernel.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from .preprocess import mask_comments, split_top

MIN_VALUE = 256             # constants below this are not sizes worth scaling (block sizes, counts, flags)
TARGET_SECONDS = 0.5        # a launch the checks replay six times (original and two ports, races twice)
TARGET_THREADS = 1 << 18
MAX_FACTOR = 4096
SMALL_DEVICE_SMS = 4        # what a run at a smaller device reports: grids sized by the SM count shrink with it
CAPTURE_CHIP = "h200"       # the GPU the capture's runtime reports (ksim_host.h's device_prop names it)


def device_sms() -> int:
    """The multiprocessors of the GPU the capture's runtime reports, from specs/hardware (the chip's compute
    units); capture.py hands it to every run (KSIM_CAPTURE_SMS)."""
    if not _SMS:
        n = 132   # the H200's, where the specs cannot be read
        try:
            from ..specs import load_specs
            for hw in load_specs().hardware_files.values():
                for chip in hw.chips:
                    if chip.id == CAPTURE_CHIP and chip.compute_units:
                        n = int(chip.compute_units[0])
        except Exception:  # noqa: BLE001 - the figure above stands
            pass
        _SMS.append(n)
    return _SMS[0]


_SMS: list[int] = []


def device_plan(evidence: list[Evidence]) -> ScalePlan | None:
    """Launches too big or slow whose grid is a multiple of the device's multiprocessor count (a grid sized from
    cudaDeviceProp::multiProcessorCount: persistent kernels, one block per SM times k): a run on a smaller
    simulated device, the program and its kernels unchanged."""
    sms = device_sms()
    hit = [ev for ev in evidence if any(g >= sms and g % sms == 0 for g in ev.grid)]
    if not hit:
        return None
    site = SizeSite("device", "the device's multiprocessor count", sms)
    return ScalePlan(factor=sms // SMALL_DEVICE_SMS, changes=[(site, SMALL_DEVICE_SMS)],
                     kernels=[ev.kernel for ev in hit], why=hit[0].why)


@dataclass
class SizeSite:
    """One host-side integer the program's sizes come from."""
    kind: str                   # define / var / dim3 / argv
    name: str                   # NAME (dim3: "dimsA.x"; argv: "argv[2]")
    value: int
    expr: str = ""
    file: Path | None = None
    line: int = 0
    start: int = 0              # span of `expr` in the file's text (argv: the index in argv)
    end: int = 0
    idents: list[str] = field(default_factory=list)
    local: bool = False         # a variable of a host function (device code cannot name it)
    floor: int = 0              # the least value the program accepts (k_dim_max's k_dim_min): never scaled below

    def where(self, shown=lambda p: p.name) -> str:
        return f"{shown(self.file)}:{self.line}" if self.file else "the command line"


@dataclass
class Evidence:
    """What one oversized or slow launch shows about sizes."""
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    scalars: set[int]
    counts: list[int]           # element counts of its buffers
    need: int                   # bytes of its buffers
    seconds: float | None       # its (estimated) run time on the CPU, where known
    why: str                    # "oversize" / "slow"


@dataclass
class ScalePlan:
    factor: int                                        # per dimension
    changes: list[tuple[SizeSite, int]]                # (site, new value)
    kernels: list[str]                                 # the kernels that needed it
    why: str

    def describe(self, shown=lambda p: p.name) -> str:
        parts = [f"{s.name} = {new} (was {s.value}, {s.where(shown)})" for s, new in self.changes[:4]]
        more = f" and {len(self.changes) - 4} more" if len(self.changes) > 4 else ""
        return ", ".join(parts) + more


# ------------------------------------------------------------------------------------------------
# Integer constant expressions
# ------------------------------------------------------------------------------------------------
_TOK = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|\d+)(?:[uU]?[lL]{0,2}|[lL]{1,2}[uU])\b|([A-Za-z_]\w*(?:\.[xyz])?)|(<<|>>|[-+*/%()]))")
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.LShift, ast.RShift)


def idents_of(expr: str) -> list[str]:
    return re.findall(r"(?<![\w.])[A-Za-z_]\w*", expr)


def evaluate(expr: str, known: dict[str, int]) -> int | None:
    """The value of a C integer constant expression (literals, + - * / % << >>, parentheses, known names)."""
    out, pos, expr = [], 0, expr.strip()
    if not expr:
        return None
    while pos < len(expr):
        m = _TOK.match(expr, pos)
        if not m:
            return None
        if m.group(1):
            t = m.group(1)
            out.append(str(int(t, 16) if t[:2] in ("0x", "0X") else int(t, 8) if len(t) > 1 and t[0] == "0" else int(t)))
        elif m.group(2):
            v = known.get(m.group(2))
            if v is None:
                return None
            out.append(f"({v})")
        else:
            out.append("//" if m.group(3) == "/" else m.group(3))
        pos = m.end()
        if pos < len(expr) and not expr[pos:].strip():
            break
    try:
        tree = ast.parse(" ".join(out), mode="eval")
    except SyntaxError:
        return None

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp) and isinstance(n.op, _OPS):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, (ast.FloorDiv, ast.Mod)) and b == 0:
                raise ValueError
            if isinstance(n.op, (ast.LShift, ast.RShift)) and not 0 <= b < 64:
                raise ValueError
            if isinstance(n.op, ast.FloorDiv) and (a < 0) != (b < 0):
                return -(abs(a) // abs(b))   # C truncates toward zero
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b, ast.FloorDiv: a // b if b else 0,
                    ast.Mod: a % b if b else 0, ast.LShift: a << b, ast.RShift: a >> b}[type(n.op)]
        raise ValueError
    try:
        v = ev(tree)
    except (ValueError, RecursionError):
        return None
    return v if abs(v) < (1 << 62) else None


# ------------------------------------------------------------------------------------------------
# Finding the sites
# ------------------------------------------------------------------------------------------------
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?![\w(])[ \t]+([^\n]*?)[ \t]*$", re.M)
_INT_WORDS = r"(?:static|const|constexpr|unsigned|signed|long|short|int|size_t|uint|uint32_t|int32_t|int64_t|uint64_t)"
_VAR = re.compile(r"(?<![\w.>])((?:" + _INT_WORDS + r"[ \t]+)+)([A-Za-z_]\w*)[ \t]*=[ \t]*([^;,{}\n]+?)[ \t]*;")
_VAR_DECL = re.compile(r"(?<![\w.>])((?:" + _INT_WORDS + r"[ \t]+)+)([A-Za-z_]\w*[ \t]*=[^;{}\n]*?)[ \t]*;")
_DECLARATOR = re.compile(r"[ \t]*([A-Za-z_]\w*)[ \t]*=[ \t]*(\S(?:[^\n]*\S)?)[ \t]*$")
_LIST = re.compile(r"(?:\bstd\s*::\s*(?:vector|array)\s*<\s*(?:unsigned\s+|signed\s+)?(?:int|long|size_t|uint\w*|int\d+_t)"
                   r"(?:\s*,\s*\d+)?\s*>|(?<![\w.>])(?:" + _INT_WORDS + r"[ \t]+)+)[ \t]*([A-Za-z_]\w*)[ \t]*(?:\[[ \t]*\w*[ \t]*\])?"
                   r"[ \t]*=?[ \t]*\{([^{};]*)\}[ \t]*;")
_SIZE_LIST_NAME = re.compile(r"(?i)size|dim|len|shape|^n$|^ns$|^m$")
_NOT_SIZE_LIST = re.compile(r"(?i)block|thread|warp|tile|grid|bs")
_DIM3 = re.compile(r"\bdim3[ \t]+([A-Za-z_]\w*)[ \t]*\(([^;{}]*)\)[ \t]*;")
_DEVICE_FN = re.compile(r"\b(?:__global__|__device__)\b[^;{}]*?\b[A-Za-z_]\w*\s*\(")
_DEVICE_DECL = re.compile(r"\b(?:__device__|__constant__|__shared__|__managed__)\b[^;{}]*;")
_LAUNCH_TARGS = re.compile(r"<([^<>;()]*)>\s*<<<")


def _match_fwd(code: str, start: int, open_c: str, close_c: str) -> int:
    depth = 0
    for i in range(start, len(code)):
        if code[i] == open_c:
            depth += 1
        elif code[i] == close_c:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _device_spans(code: str) -> list[tuple[int, int]]:
    spans = []
    for m in _DEVICE_FN.finditer(code):
        close = _match_fwd(code, m.end() - 1, "(", ")")
        if close < 0:
            continue
        k = close + 1
        while k < len(code) and code[k] not in "{;":
            k += 1
        if k >= len(code) or code[k] != "{":
            continue
        end = _match_fwd(code, k, "{", "}")
        if end > 0:
            spans.append((m.start(), end + 1))
    for m in _DEVICE_DECL.finditer(code):
        spans.append((m.start(), m.end()))
    return spans


_TYPE_DEF = re.compile(r"\b(?:struct|class|union)[ \t]+(?:__align__\s*\([^)]*\)\s*|alignas\s*\([^)]*\)\s*)?"
                       r"([A-Za-z_]\w*)[^;{}()]*\{")
_TYPEDEF_ANON = re.compile(r"\btypedef[ \t]+(?:struct|class|union)\b[^;{}()]*\{")


def _type_bodies(code: str) -> dict[str, str]:
    """{type name: its definition's body} of the struct/class/union definitions in `code` (`typedef struct {...}
    Name;` under Name): what a type named in device code brings with it (array bounds of its fields)."""
    out: dict[str, str] = {}
    for m in _TYPE_DEF.finditer(code):
        end = _match_fwd(code, m.end() - 1, "{", "}")
        if end > 0:
            out[m.group(1)] = out.get(m.group(1), "") + " " + code[m.end():end]
    for m in _TYPEDEF_ANON.finditer(code):
        end = _match_fwd(code, m.end() - 1, "{", "}")
        name = re.match(r"\s*([A-Za-z_]\w*)\s*;", code[end + 1:end + 200]) if end > 0 else None
        if name:
            out[name.group(1)] = out.get(name.group(1), "") + " " + code[m.end():end]
    return out


def device_names(texts: dict[Path, str]) -> set[str]:
    """Identifiers device code depends on: in its bodies and declarations, launch template arguments, the macros
    those expand to and the definitions of the types they name (a field `float x[LEN]` of a struct a kernel takes
    makes LEN the struct's layout), transitively."""
    names: set[str] = set()
    macros: dict[str, str] = {}
    for text in texts.values():
        code = mask_comments(text)
        for n, body in _type_bodies(code).items():
            macros[n] = macros.get(n, "") + " " + body
        for a, b in _device_spans(code):
            names |= set(idents_of(code[a:b]))
        for m in _LAUNCH_TARGS.finditer(code):
            names |= set(idents_of(m.group(1)))
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)]*\))?([^\n]*)$", code, re.M):
            macros[m.group(1)] = macros.get(m.group(1), "") + " " + m.group(3)
        # a conditional compiled into device code (#if N % BLOCK) counts too
        for m in re.finditer(r"^[ \t]*#[ \t]*(?:if|elif)\b([^\n]*)$", code, re.M):
            names |= set(idents_of(m.group(1)))
    todo = [n for n in names if n in macros]
    while todo:
        n = todo.pop()
        for i in idents_of(macros[n]):
            if i not in names:
                names.add(i)
                if i in macros:
                    todo.append(i)
    return names


def _function_scopes(code: str) -> tuple[list[int], list[int]]:
    """(positions of braces, how many function bodies are open after each): bisect a position into it to know
    whether it lies in a function body (a local of a host function: device code cannot name it)."""
    stack, pos, depth = [], [], []
    for m in re.finditer(r"[{}]", code):
        i = m.start()
        if code[i] == "{":
            head = re.sub(r"\b(?:const|noexcept|override|final)\s*$", "", code[max(0, i - 200):i].rstrip()).rstrip()
            stack.append(head.endswith(")") or bool(stack and stack[-1]))
        elif stack:
            stack.pop()
        pos.append(i)
        depth.append(sum(stack) if len(stack) < 64 else 1)
    return pos, depth


def _in_function(scopes: tuple[list[int], list[int]], at: int) -> bool:
    import bisect
    k = bisect.bisect_right(scopes[0], at) - 1
    return k >= 0 and scopes[1][k] > 0


def size_sites(texts: dict[Path, str], argv: list[str] = ()) -> list[SizeSite]:
    """The program's host-side integer constants of at least MIN_VALUE, with their values; device-used names and
    names defined twice with different values are left out."""
    raw: list[SizeSite] = []
    for path, text in texts.items():
        code = mask_comments(text)
        dev = _device_spans(code)
        scopes = _function_scopes(code)

        def in_device(pos: int) -> bool:
            return any(a <= pos < b for a, b in dev)
        for m in _DEFINE.finditer(code):
            raw.append(SizeSite("define", m.group(1), 0, text[m.start(2):m.end(2)], path,
                                code.count("\n", 0, m.start()) + 1, m.start(2), m.end(2)))
        for m in _VAR_DECL.finditer(code):
            if re.search(r"\bfor\s*\(\s*$", code[max(0, m.start() - 40):m.start()]):
                continue   # a loop's counter
            if in_device(m.start()) or not re.search(r"\b(?:int|long|short|size_t|uint\w*|int\d+_t|unsigned)\b", m.group(1)):
                continue
            # one declaration may declare several sizes: `int B = 8, T = 1024, C = 768;`
            parts = split_top(m.group(2), "([{", ")]}")
            off = m.start(2)
            for part in parts:
                d = _DECLARATOR.match(part)
                if d and (len(parts) > 1 or "," not in d.group(2)):
                    a, b = off + d.start(2), off + d.end(2)
                    site = SizeSite("var", d.group(1), 0, text[a:b], path, code.count("\n", 0, m.start()) + 1, a, b)
                    site.local = _in_function(scopes, m.start())
                    raw.append(site)
                off += len(part) + 1
        for m in _LIST.finditer(code):
            # the sizes a benchmark loops over: `std::vector<int> SIZE = {128, 256, ..., 4096};` (not block sizes)
            if in_device(m.start()) or not _SIZE_LIST_NAME.search(m.group(1)) or _NOT_SIZE_LIST.search(m.group(1)):
                continue
            off = m.start(2)
            for i, part in enumerate(split_top(m.group(2), "([{", ")]}")):
                lead = len(part) - len(part.lstrip())
                a, b = off + lead, off + len(part.rstrip())
                if b > a and re.fullmatch(r"[\w\s*+<>()-]+", code[a:b]):
                    site = SizeSite("list", f"{m.group(1)}[{i}]", 0, text[a:b], path, code.count("\n", 0, a) + 1, a, b)
                    site.local = _in_function(scopes, m.start())
                    raw.append(site)
                off += len(part) + 1
        for m in _DIM3.finditer(code):
            if in_device(m.start()):
                continue
            off = m.start(2)
            for axis, part in zip("xyz", split_top(m.group(2))):
                lead = len(part) - len(part.lstrip())
                a, b = off + lead, off + len(part.rstrip())
                if b > a:
                    raw.append(SizeSite("dim3", f"{m.group(1)}.{axis}", 0, text[a:b], path,
                                        code.count("\n", 0, a) + 1, a, b))
                off += len(part) + 1
    # values: macros and variables by name (a name defined with two values is unknown), in a few rounds
    known: dict[str, int] = {}
    ambiguous: set[str] = set()
    for _ in range(4):
        vals: dict[str, set[int]] = {}
        for s in raw:
            if s.kind != "dim3":
                v = evaluate(s.expr, known)
                if v is None and s.local:   # a function's own (`int n = 1 << log2N` of a parameter): another
                    continue                # variable than a file's constant of that name
                vals.setdefault(s.name, set()).add(v if v is not None else -1 << 70)
        for n, vs in vals.items():
            if len(vs) == 1 and next(iter(vs)) != -1 << 70:
                known[n] = next(iter(vs))
            elif len(vs) > 1:
                ambiguous.add(n)
                known.pop(n, None)
    out = []
    for s in raw:
        if s.kind != "dim3" and (s.name in ambiguous or s.name not in known):
            continue
        if s.kind != "dim3" and s.local and evaluate(s.expr, known) is None:
            continue   # a function's own variable of a known name, made of its parameters
        v = known[s.name] if s.kind != "dim3" else evaluate(s.expr, known)
        if v is None or v < MIN_VALUE:
            continue
        s.value, s.idents = v, idents_of(s.expr)
        # an upper bound with a lower one beside it (k_dim_max / k_dim_min, MAX_N / MIN_N): the program rejects
        # or clamps sizes below the lower one, so a smaller run keeps at least that
        low = _MAX_WORD.sub(lambda m: _MIN_OF[m.group(0)], s.name) if s.kind in ("define", "var") else s.name
        if low != s.name and low in known and 0 < known[low] < v:
            s.floor = known[low]
        out.append(s)
    # sizes written as a power of two of a constant (`const int log2Data = 23; const int dataN = 1 << log2Data;`):
    # the exponent is the size's root, scaled by subtracting (a "log2" site: its value is the size it makes)
    by_name = {r.name: r for r in raw if r.kind in ("define", "var") and re.fullmatch(r"\s*\d+\s*", r.expr)}
    for s in out[:]:
        m = _POW2.match(s.expr)
        r = by_name.get(m.group(1)) if m else None
        if r is not None and r.name not in ambiguous and 0 < known.get(r.name, 0) < 63 and \
                all(o.name != r.name or o.kind != "log2" for o in out):
            out.append(SizeSite("log2", r.name, 1 << known[r.name], r.expr, r.file, r.line, r.start, r.end,
                                local=r.local))
    for i, a in enumerate(argv):
        val = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        if re.fullmatch(r"\d+", val) and int(val) >= MIN_VALUE:
            out.append(SizeSite("argv", f"argument {i + 1} ({a})", int(val), val, None, 0, i, i))
    return out


def host_sites(texts: dict[Path, str], argv: list[str] = ()) -> list[SizeSite]:
    """size_sites less those device code depends on (a host function's own variables always stay in)."""
    dev = device_names(texts)
    return [s for s in size_sites(texts, argv) if not (s.kind in ("define", "var") and s.name in dev and not s.local)
            and not _NOT_A_SIZE.search(s.name)]


_MAX_WORD = re.compile(r"(?<![A-Za-z])(?:max|Max|MAX)(?![a-z])")
_MIN_OF = {"max": "min", "Max": "Min", "MAX": "MIN"}
_POW2 = re.compile(r"^\s*\(?\s*1[uUlL]*\s*<<\s*\(?\s*([A-Za-z_]\w*)\s*\)?\s*\)?\s*$")
# names of values that are no sizes, whatever they equal (a random seed of 1234 is not scaled)
_NOT_A_SIZE = re.compile(r"(?i)seed|magic|version|port\b|mask")


# ------------------------------------------------------------------------------------------------
# Evidence and the plan
# ------------------------------------------------------------------------------------------------
_DTYPE_BYTES = {"float64": 8, "int64": 8, "uint64": 8, "float32": 4, "int32": 4, "uint32": 4, "float16": 2,
                "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1}


def evidence_of(launch: dict, why: str, seconds: float | None = None) -> Evidence:
    """From a launch record as the runtime writes it (launches.jsonl)."""
    scalars, counts, need, seen = set(), [], 0, set()
    for a in launch.get("args", []):
        if a.get("kind") == "scalar" and isinstance(a.get("value"), int) and not isinstance(a.get("value"), bool):
            scalars.add(int(a["value"]))
        if a.get("nbytes"):
            nb = int(a["nbytes"])
            eb = int(a.get("elem_bytes") or _DTYPE_BYTES.get(a.get("dtype") or "", 1) or 1)
            counts.append(nb // max(eb, 1))
            if eb > 1:   # and its size in bytes: hosts often keep that (`uint byteCount = 64 * 1048576`)
                counts.append(nb)
            if eb > 1 and a.get("dtype") in _DTYPE_BYTES and _DTYPE_BYTES[a["dtype"]] != eb:
                counts.append(nb // _DTYPE_BYTES[a["dtype"]])
            key = (a.get("buffer"), a.get("offset_bytes"))
            if key not in seen:
                seen.add(key)
                need += nb
    return Evidence(kernel=launch.get("kernel", "?"), grid=tuple(launch.get("grid", (1, 1, 1))),
                    block=tuple(launch.get("block", (1, 1, 1))), scalars=scalars, counts=counts, need=need,
                    seconds=seconds, why=why)


def matches(v: int, ev: Evidence) -> int:
    """How strongly the launch shows the value `v` as a size: 2 for a scalar argument or a buffer holding about v
    elements (or a small multiple of v), 1 for a grid dimension only (or the grid that covers v elements), else 0."""
    if v < MIN_VALUE or v in ev.block:
        return 0
    if v in ev.scalars:
        return 2
    for c in ev.counts:
        # about v (padded up, or rounded down to a multiple: `(MEM_SIZE / f) & 0xffffff00`), a small multiple, v²
        if abs(c - v) <= v // 16 + 8192 or (c % v == 0 and c // v <= 16) or c == v * v:
            return 2
    for g, b in zip(ev.grid, ev.block):
        if g > 1 and (g == v or g == -(-v // max(b, 1))):
            return 1
    return 0


def _product_sites(sites: list[SizeSite], ev: Evidence) -> list[SizeSite]:
    """Two or three sizes whose product the launch shows as a size (a buffer of `T * C` or `B * T * C` elements,
    a scalar `N = T * C`), where no size alone does; the fewest, and of those the first in the program."""
    import itertools

    named = [s for s in sites if s.kind in ("define", "var")]
    by_name = list({s.name: s for s in named}.values())[:24]   # (a name's several sites follow its first)
    for r in (2, 3):
        for group in itertools.combinations(by_name, r):
            if matches(math.prod(s.value for s in group), ev) == 2:
                return [s for s in named if any(s.name == g.name for g in group)]
    return []


def before_first_launch(sites: list[SizeSite], factor: int = 8) -> ScalePlan | None:
    """A run whose time ran out before its first launch: the host's literal sizes (sites of no other name, at least
    256) divided by `factor`, each kept at 32 or more. None where there is none."""
    changes = []
    for s in sites:
        if s.kind in ("define", "var") and not s.idents and s.value >= 256:
            new = max(32, s.value // factor)
            p = math.gcd(s.value, 1024)
            if s.value % factor and p > 1:
                new = max(p, new // p * p)
            if new < s.value:
                changes.append((s, new))
    if not changes:
        return None
    return ScalePlan(factor=factor, changes=changes, kernels=[], why="too slow to check")


def _roots(hit: list[SizeSite], sites: list[SizeSite]) -> list[SizeSite]:
    """The literal sizes (sites of no other name) that the derived sites of `hit` are computed from."""
    literal = {s.name: s for s in sites if s.kind in ("define", "var", "log2") and not s.idents}
    out: dict[str, SizeSite] = {}
    for s in hit:
        if s.kind in ("define", "var") and s.idents:
            for n in s.idents:
                if n in literal and n != s.name:
                    out.setdefault(n, literal[n])
    return [s for s in sites if s.name in out and s.kind in ("define", "var", "log2") and not s.idents]


def _pow2_ceil(x: float) -> int:
    return 1 << max(1, math.ceil(math.log2(max(x, 2.0))))


def plan(sites: list[SizeSite], evidence: list[Evidence], byte_budget: int,
         target_seconds: float = TARGET_SECONDS, min_factor: int = 1) -> ScalePlan | None:
    """Which sites to divide, and by what: each oversized launch brought to about an eighth of the byte budget,
    TARGET_THREADS threads and TARGET_SECONDS of CPU time. None when no site explains any launch."""
    chosen: dict[int, SizeSite] = {}
    need_factor, dims, kernels, blocks = 1.0, 1, [], [32]
    factors: set[int] = set()   # sites that are one factor of a size (no block-size floor of their own)
    for ev in evidence:
        strength = {id(s): matches(s.value, ev) for s in sites}
        best = max(strength.values(), default=0)
        # a grid dimension alone is weak evidence (a bin count, a number of buckets): only where nothing stronger
        hit = [s for s in sites if best and strength[id(s)] == best]
        combo = _product_sites(sites, ev) if best < 2 else []
        if combo:   # a buffer of B * T * C elements: the sizes multiply, each divided by a root of the factor
            hit, dims = combo, max(dims, len(combo))
            factors.update(id(s) for s in combo)
        if not hit:
            continue
        # a derived size (`total = B * NH * T * T`) scales through the sizes it is made of: dividing it alone would
        # change the grid and leave the buffers as big (and the program computing less than it asks for)
        roots = _roots(hit, sites)
        if roots:
            hit = [s for s in hit if not set(s.idents) & {r.name for r in roots}] + roots
            factors.update(id(r) for r in roots)
            dims = max(dims, max(sum(s.idents.count(r.name) for r in roots) for s in hit + roots))
        kernels.append(ev.kernel)
        for s in hit:
            chosen[id(s)] = s
        m = max(2 * ev.need / max(byte_budget / 8, 1), math.prod(ev.grid) * math.prod(ev.block) / TARGET_THREADS,
                (ev.seconds or 0) / target_seconds)
        need_factor = max(need_factor, m)
        blocks.append(max(ev.block))
        vals = sorted({s.value for s in hit})
        if any(v * w <= c <= (v * w) * 17 // 16 + 8192 for i, v in enumerate(vals) for w in vals[i:]
               for c in ev.counts) or sum(1 for g in ev.grid if g > 1) >= 2:
            dims = 2
    if not chosen:
        return None
    # a site whose expression names another chosen site follows it already
    names = {s.name for s in chosen.values() if s.kind in ("define", "var")}
    picked = [s for s in chosen.values() if not (set(s.idents) & names)]
    f = min(MAX_FACTOR, max(min_factor, _pow2_ceil(need_factor ** (1.0 / dims))))
    changes = []
    floor = max(blocks)
    for s in picked:
        keep = 32 if any(s.value in ev.grid for ev in evidence) or id(s) in factors else floor
        if s.floor and s.value // f < s.floor:   # the least the program accepts, where the factor goes below it
            if s.floor < s.value:
                changes.append((s, s.floor))
            continue
        g = f
        while g > 1 and s.value // g < keep:
            g //= 2
        if g < 2:
            continue
        new = s.value // g
        p = math.gcd(s.value, 1024)
        if s.value % g and p > 1:
            new = max(p, new // p * p)
        if new < s.value:
            changes.append((s, new))
    # a list of sizes a benchmark loops over is one kind of size: its other elements above the new value shrink by
    # the same factor (buffers allocated at the largest would be overrun by the next ones)
    for s, new in list(changes):
        if s.kind != "list":
            continue
        base, g = s.name.rsplit("[", 1)[0], max(1, s.value // max(new, 1))
        for o in sites:
            if (o.kind == "list" and o is not s and o.file == s.file and o.name.rsplit("[", 1)[0] == base
                    and o.value > new and all(o is not c for c, _n in changes)):
                changes.append((o, max(1, o.value // g)))
    if not changes:
        return None
    why = "over the capture's byte budget" if any(e.why == "oversize" for e in evidence) else "too slow to check"
    return ScalePlan(factor=f, changes=changes, kernels=list(dict.fromkeys(kernels)), why=why)


def apply(plan: ScalePlan, texts: dict[Path, str], argv: list[str]) -> tuple[dict[Path, str], list[str]]:
    """The files' texts and argv with the plan's values written in (each change stays on its line)."""
    out = dict(texts)
    argv = list(argv)
    by_file: dict[Path, list[tuple[SizeSite, int]]] = {}
    for s, new in plan.changes:
        if s.kind == "device":   # the simulated GPU's own figure (KSIM_CAPTURE_SMS): nothing in the files
            continue
        if s.kind == "argv":
            a = argv[s.start]
            argv[s.start] = (a.split("=", 1)[0] + "=" + str(new)) if a.startswith("-") and "=" in a else str(new)
        else:
            by_file.setdefault(s.file, []).append((s, new))
    for f, changes in by_file.items():
        t = out[f]
        for s, new in sorted(changes, key=lambda c: -c[0].start):
            lit = f"({new}{'LL' if new > 2**31 - 1 else ''})" if s.kind != "log2" else f"({max(new, 1).bit_length() - 1})"
            t = t[:s.start] + lit + t[s.end:]
        out[f] = t
    return out, argv
