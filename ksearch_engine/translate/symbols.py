"""File-scope variables in device memory that a kernel reads or writes: `__constant__` tables its program fills with
cudaMemcpyToSymbol (declared without an initializer) and `__device__` variables (counters, flags, tables).

MLX kernels have no program-scope device memory a host could fill (Metal allows program-scope variables in the
`constant` address space only, initialized in the source), so the launch() path passes each such variable as one
more input buffer, `ks_sym_<name>_in` (a `__constant__`, read-only) or `ks_sym_<name>_inout` (a `__device__`
variable, written back), and the kernel declares the variable's name as a view of it
(`device uint (*c_Table)[31] = (device uint (*)[31])ks_sym_c_Table_in;`). Helpers that use one take it as a
trailing parameter of the same name, in both ports. launch(..., symbols={name: contents}) gives the contents;
a variable not given starts as its initializer (a number) or zeros, as a program's would before any copy.
`__constant__` tables written with their contents in the source stay program-scope constants of both headers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_DECL = re.compile(r"^[ \t]*(?:static[ \t]+)?(?:extern[ \t]+)?(?:static[ \t]+)?(?P<space>__constant__|__device__|__managed__)[ \t]+"
                   r"(?P<rest>[^;{}()]*?);", re.M)


@dataclass
class Symbol:
    name: str
    space: str            # "constant" | "device"
    ctype: str            # the element's C type as written
    base: str             # the element's built-in type (launch.POINTEE key)
    sizes: list[str]      # array bounds as written ([] for a scalar)
    count: int            # elements
    dtype: str
    elem_bytes: int
    init: float | int | None
    decl: str             # the declaration as written
    written: bool         # the port passes it in-out

    def entry(self) -> dict:
        return {"name": self.name, "ctype": self.ctype, "dtype": self.dtype, "elem_bytes": self.elem_bytes,
                "count": self.count, "written": self.written, "init": self.init}

    @property
    def input_name(self) -> str:
        return f"ks_sym_{self.name}_{'inout' if self.written else 'in'}"

    def view(self, dialect: str, metal_type=lambda t: t) -> str:
        """The kernel's declaration of the variable as a view of its input buffer."""
        space = "device " if dialect == "metal" else ""
        t = metal_type(self.ctype) if dialect == "metal" else self.ctype
        if dialect == "metal":
            # CUDA's T3 vectors are 12 bytes apart in memory, Metal's 16: the buffer is read as packed_T3
            t = re.sub(r"^((?:u?char|u?short|u?int|uint|float|half))3$", r"packed_\g<1>3", t.strip())
        if not self.sizes:
            return f"    {space}{t}& {self.name} = *({space}{t}*){self.input_name};\n"
        if len(self.sizes) == 1:
            return f"    {space}{t}* {self.name} = ({space}{t}*){self.input_name};\n"
        rest = "".join(f"[{s}]" for s in self.sizes[1:])
        return f"    {space}{t} (*{self.name}){rest} = ({space}{t} (*){rest}){self.input_name};\n"

    def param(self, dialect: str, metal_type=lambda t: t) -> str:
        """The variable as a helper's trailing parameter."""
        line = self.view(dialect, metal_type).strip()
        return line.split(" = ")[0]


def _number(text: str):
    t = text.strip().rstrip("uUlLfF")
    try:
        return int(t, 0)
    except ValueError:
        try:
            return float(t)
        except ValueError:
            return None


def file_symbols(source: str, preamble: list[str]) -> list[Symbol]:
    """The file-scope `__constant__` (without contents) and `__device__` variables of `source` whose element type is
    a built-in scalar or vector type and whose size is a constant here."""
    from ..sim.preprocess import mask_comments, split_top
    from . import analysis

    code = mask_comments(source)
    env = analysis.constants_env(preamble, {})
    out: list[Symbol] = []
    depth_at = _depths(code)
    for m in _DECL.finditer(code):
        if depth_at(m.start()) != 0:
            continue
        first, *more = split_top(m.group("rest"), "([{", ")]}")
        t = re.match(r"\s*(?P<type>[A-Za-z_][\w\s]*?)\s+(?=[A-Za-z_]\w*\s*(?:\[|=|$))", first)
        if t is None:
            continue
        # `__constant__ float c_ax, c_bx;`: each name declared with the first one's type
        for rest in [first[t.end():]] + more:
            sym = _symbol(m, source, t.group("type"), rest, env, preamble)
            if sym is not None:
                out.append(sym)
    return out


def _symbol(m, source: str, type_text: str, rest: str, env, preamble) -> "Symbol | None":
    """One declarator (`c_ax`, `table[N] = ...`) of the declaration `m` whose element type is `type_text`."""
    from . import analysis
    from .launch import POINTEE
    from .layout import resolve_type

    init = None
    if "=" in rest:
        rest, value = rest.split("=", 1)
        if "{" in value or m.group("space") == "__constant__":   # a table with its contents: a constant
            return None
        init = _number(value)
        if init is None:
            return None
    d = re.fullmatch(r"\s*(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]+\]\s*)*)", rest)
    if d is None or "*" in re.sub(r"\[[^\]]*\]", "", rest):   # a pointer (not `[A * B]`, a size)
        return None
    words = type_text.split()
    space = "constant" if m.group("space") == "__constant__" or "__constant__" in words else "device"
    if space == "constant" and init is not None:
        return None
    ctype = " ".join(w for w in words if w not in ("volatile", "const", "static", "__constant__", "__device__",
                                                    "__managed__", "extern"))
    base = resolve_type(ctype, preamble)
    if base in POINTEE:
        dtype, size = POINTEE[base]
    else:   # a struct whose fields are all of one scalar type (`struct Sphere { float r, g, b, radius, x, y, z; }`)
        from .launch import struct_dtype
        st = struct_dtype(base, preamble)
        if st is None:
            return None
        dtype, size = st
    sizes = re.findall(r"\[([^\]]+)\]", d.group("dims"))
    count = 1
    for sz in sizes:
        v = analysis.eval_size(sz, env)
        if not v or v <= 0:
            return None
        count *= v
    lanes = size // {"float64": 8, "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "int16": 2,
                     "uint16": 2, "int8": 1, "uint8": 1, "bool": 1}.get(dtype, 4)
    return Symbol(name=d.group("name"), space=space, ctype=ctype, base=base, sizes=sizes, count=count * lanes,
                  dtype=dtype, elem_bytes=size, init=init, decl=source[m.start():m.end()].strip(),
                  written=space == "device")


def _depths(code: str):
    """depth_at(offset): the brace depth of `code` at an offset (file scope is 0)."""
    import bisect
    marks, depth, pos = [], 0, []
    for i, ch in enumerate(code):
        if ch in "{}":
            depth += 1 if ch == "{" else -1
            pos.append(i)
            marks.append(depth)

    def depth_at(off: int) -> int:
        k = bisect.bisect_left(pos, off)
        return marks[k - 1] if k else 0
    return depth_at


def used(symbols: list[Symbol], texts: list[str]) -> list[Symbol]:
    words = set(re.findall(r"[A-Za-z_]\w*", "\n".join(texts)))
    return [s for s in symbols if s.name in words]


def declares(entry: str, symbols: list[Symbol]) -> bool:
    """A preamble entry that is the declaration of one of `symbols`."""
    e = " ".join(entry.split())
    return any(" ".join(s.decl.split()) in e for s in symbols)


def helper_symbols(helpers, symbols: list[Symbol]) -> dict[str, list[Symbol]]:
    """{helper: the symbols it uses, directly or through the helpers it calls}, in `symbols` order."""
    names = {h.name for h in helpers}
    words = {h.name: set(re.findall(r"[A-Za-z_]\w*", h.body)) for h in helpers}
    need = {h.name: {s.name for s in symbols if s.name in words[h.name]} for h in helpers}
    changed = True
    while changed:
        changed = False
        for h in helpers:
            for c in words[h.name] & names - {h.name}:
                more = need.get(c, set()) - need[h.name]
                if more:
                    need[h.name] |= more
                    changed = True
    return {n: [s for s in symbols if s.name in v] for n, v in need.items() if v}
