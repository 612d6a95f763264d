"""C layouts of the types a kernel's parameters name: scalar typedefs and structs of scalars, as nvcc lays them out.

The one home of "what does this C type look like in memory" beyond launch.POINTEE (the built-in scalar and vector
types, whose sizes it holds) and headers.type_aliases (what a scalar typedef/#define/using stands for): the
alignment of those types and the offsets of a struct's fields (C rules: each field at a multiple of its alignment, the struct's size a
multiple of its largest alignment, `__align__(n)`/`alignas(n)` raising it; pointers 8 bytes, `long` 8 bytes as on
64-bit Linux). A layout comes back as a numpy structured dtype, so that a buffer of such structs is a numpy array
whose bytes are the struct's, field by field.

    resolve_scalar("fp", preamble)          -> "float"   (typedef float fp; / #define fp float)
    struct_layout("Node", preamble, defs)   -> StructLayout(dtype=[('starting','<i4'),('no_of_edges','<i4')], ...)

A struct this module cannot lay out (a field of an unknown type, a pointer field, an array bound that is not a
constant) raises LayoutError naming the struct, the field and, where the source is given, its line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..task import ELEM_BYTES
from .launch import POINTEE, norm_type, struct_body

POINTER_BYTES = 8


class LayoutError(Exception):
    """A type whose layout is not computed here; `kind` says why ("pointer", "double", "unknown")."""

    def __init__(self, message: str, kind: str = "unknown", struct: str = "", field_name: str = "",
                 line: int | None = None):
        super().__init__(message)
        self.kind, self.struct, self.field_name, self.line = kind, struct, field_name, line


def scalar_align(ctype: str) -> int:
    """alignof a built-in scalar or vector type of POINTEE (float3: 4, float4: 16, double2: 16)."""
    dt, size = POINTEE[ctype]
    return size if size & (size - 1) == 0 else ELEM_BYTES[dt]


def resolve_type(ctype: str, preamble: list[str], subst: dict[str, str] | None = None) -> str:
    """`ctype` (qualifiers dropped) with template parameters (`subst`) and scalar aliases (headers.type_aliases:
    typedef, using, #define) followed to their end."""
    from .headers import type_aliases

    aliases = type_aliases(preamble)
    t = norm_type(ctype)
    for _ in range(8):
        if subst and t in subst and norm_type(subst[t]) != t:
            t = norm_type(subst[t])
        elif t in aliases:
            t = aliases[t]
        else:
            break
    return t


def resolve_scalar(ctype: str, preamble: list[str], subst: dict[str, str] | None = None) -> str | None:
    """The built-in scalar/vector type (a POINTEE key) `ctype` stands for, else None (a struct, unknown)."""
    t = resolve_type(ctype, preamble, subst)
    return t if t in POINTEE else None


@dataclass
class StructLayout:
    name: str
    dtype: np.dtype                                   # numpy structured dtype: names, offsets, itemsize
    align: int = 1                                    # alignof the struct
    fields: list[tuple[str, str, int]] = field(default_factory=list)   # (name, scalar C type, count), in order


def _preprocessed(exprs: list[str], preamble: list[str]) -> list[str] | None:
    """`exprs` with the preamble's macros expanded by the simulator's C++ preprocessor (`#if`/`#elif` chains of
    #defines included, as nvcc would see them); None where it cannot run."""
    import subprocess

    from ..sim.build import compiler

    directives = [e for e in preamble if e.lstrip().startswith("#")]
    text = "\n".join(directives) + "\n" + "\n".join(f"ks_dim_{i} = ({e})" for i, e in enumerate(exprs)) + "\n"
    try:
        out = subprocess.run([compiler(), "-E", "-P", "-x", "c++", "-"], input=text, capture_output=True,
                             text=True, timeout=20)
    except Exception:
        return None
    if out.returncode:
        return None
    found = dict(re.findall(r"^ks_dim_(\d+) = (.*)$", out.stdout, re.M))
    return [found.get(str(i), e) for i, e in enumerate(exprs)]


def _dims(decl: str, defines: dict[str, int], preamble: list[str] | None = None) -> int | None:
    n = 1
    dims = re.findall(r"\[([^\]]*)\]", decl)
    if preamble and any(re.search(r"[A-Za-z_]", d) and not all(w in defines for w in re.findall(r"[A-Za-z_]\w*", d))
                        for d in dims):
        dims = _preprocessed(dims, preamble) or dims
    for dim in dims:
        expr = dim.strip()
        for name, v in sorted(defines.items(), key=lambda kv: -len(kv[0])):
            expr = re.sub(rf"\b{re.escape(name)}\b", str(v), expr)
        if not re.fullmatch(r"[\d\s+\-*/()]+", expr):
            return None
        try:
            k = int(eval(expr.replace("/", "//"), {"__builtins__": {}}))
        except Exception:
            return None
        if k <= 0:
            return None
        n *= k
    return n


def _line_of(sources, struct: str, fname: str) -> str | None:
    """Where field `fname` of struct `struct` is declared: "file line N", from `sources` ([(file name, text)]
    or one text); None where no source has it. A `#line N "file"` above it renumbers, as in the compiler."""
    if isinstance(sources, str):
        sources = [("", sources)]
    for fname_src, source in sources or []:
        for m in re.finditer(r"\b(?:struct|class)\b[^;{}]*?\{", source):
            depth, i = 1, m.end()
            while i < len(source) and depth:
                depth += {"{": 1, "}": -1}.get(source[i], 0)
                i += 1
            if not re.search(rf"\b{re.escape(struct)}\b", source[m.start():m.end()] + source[i:i + 80]):
                continue
            f = re.search(rf"\b{re.escape(fname)}\b", source[m.end():i])
            if not f:
                continue
            pos = m.end() + f.start()
            line, where = source.count("\n", 0, pos) + 1, fname_src
            marks = list(re.finditer(r'^[ \t]*#\s*line\s+(\d+)(?:\s+"([^"]*)")?', source[:pos], re.M))
            if marks:
                line = int(marks[-1].group(1)) + source.count("\n", marks[-1].end(), pos) - 1
                where = marks[-1].group(2) or where
            return f"{where} line {line}" if where else f"line {line}"
    return None


_ACCESS = re.compile(r"^(?:\s*(?:public|private|protected)\s*:(?!:))+\s*")


def _split_fields(body: str) -> list[str]:
    """Top-level declarations of a struct or class body (nested struct bodies kept whole), without their access
    specifiers (`private:`/`public:`/`protected:` sections). A member function defined in the body ends its
    declaration at its closing brace (no `;` follows it in C++), so it never swallows the field after it."""
    body = re.sub(r"/\*.*?\*/|//[^\n]*", " ", body, flags=re.S)
    body = re.sub(r"^[ \t]*#.*$", " ", body, flags=re.M)
    out, depth, cur, head = [], 0, [], ""
    for ch in body:
        if ch == "{":
            if depth == 0:
                head = _ACCESS.sub("", "".join(cur)).strip()
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and "(" in head and not re.match(r"(?:typedef\s+)?(?:struct|class|union|enum)\b", head) \
                    and not re.search(r"=\s*$", head):
                cur.append(ch)            # a function body (a method, a constructor with its initializers)
                out.append("".join(cur).strip())
                cur = []
                continue
        if ch == ";" and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return [f for f in (_ACCESS.sub("", x).strip() for x in out) if f]


def _data_members(body: str) -> list[str]:
    """The declarations of a struct/class body that are data members laid out in each object: not member
    functions, constructors, operators, static or constexpr members, nested types, typedefs, `using` or friends
    (one line each, whitespace collapsed, `mutable` and alignment specifiers kept)."""
    out = []
    for decl in _split_fields(body):
        d = " ".join(decl.split())
        if re.match(r"(?:static|typedef|template|using|friend|constexpr|inline|static_assert)\b", d):
            continue
        if re.match(r"(?:struct|class|union|enum)\b[^{;]*\{.*\}$", d) \
                or re.fullmatch(r"(?:struct|class|union|enum(?:\s+class)?)\s+\w+(?:\s*:\s*[\w\s]+)?", d):
            continue   # a nested type's definition without a member of it (or an enum's constants)
        bare = re.sub(r"\b(?:__align__|alignas)\s*\(\s*\d+\s*\)|\[[^\]]*\]", "", d).split("=")[0]
        if "(" in bare:
            continue   # a method, a constructor, an operator (not an array bound or an initializer)
        out.append(re.sub(r"^mutable\s+", "", d))
    return out


def _virtual(body: str) -> bool:
    """A class with virtual member functions: each object holds a vtable pointer the layout here does not place."""
    return any(re.match(r"(?:\w+\s+)*virtual\b", " ".join(d.split())) for d in _split_fields(body))


def _without_initializer(decl: str) -> str:
    """One declarator without its default member initializer (`x = 0.f`, `n{3}`)."""
    depth = 0
    for i, ch in enumerate(decl):
        depth += {"[": 1, "(": 1, "{": 1, "]": -1, ")": -1, "}": -1}.get(ch, 0)
        if ch == "=" and depth == 0:
            return decl[:i].strip()
    return re.sub(r"\s*\{[^{}]*\}\s*$", "", decl).strip()


def _split_declarators(decl: str) -> list[str]:
    """`float x = 0, y[2], *z` -> ["float x", "y[2]", "*z"]: top-level commas only (not inside an initializer)."""
    out, depth, cur = [], 0, []
    for ch in decl:
        depth += {"[": 1, "(": 1, "{": 1, "<": 1, "]": -1, ")": -1, "}": -1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [_without_initializer(x) for x in out]


def _is_enum(name: str, preamble: list[str]) -> bool:
    n = re.escape(name.replace("enum ", "").strip())
    return any(re.search(rf"\benum\s+(?:class\s+)?{n}\s*\{{|\benum\b[^;{{}}]*\{{[^{{}}]*\}}\s*{n}\s*;", e)
               for e in preamble)


def _explicit_align(name: str, preamble: list[str]) -> int:
    for entry in preamble:
        m = re.search(rf"\b(?:struct|class)\s+(?:__align__|alignas)\s*\(\s*(\d+)\s*\)\s*(\w+)?\s*\{{", entry)
        if not m:
            continue
        if m.group(2) == name or re.search(rf"\}}\s*{re.escape(name)}\s*;", entry):
            return int(m.group(1))
    return 1


def _vector_type(name: str) -> bool:
    """A CUDA vector type (int2, float3, uchar4, double2): POINTEE's entries of 2-4 components."""
    from .launch import POINTEE
    return name in POINTEE and re.fullmatch(r"[a-z]+[234]", name) is not None


def _vector_layout(name: str, double_as_float: bool = False) -> StructLayout:
    """A CUDA vector type as a struct of its components x, y, z, w (CUDA's layout: a T3 has no padding)."""
    from .launch import POINTEE
    dt, size = POINTEE[name]
    n = int(name[-1])
    if dt == "float64" and double_as_float:
        dt, size = "float32", 4 * n
    elif dt == "float64":
        raise LayoutError(f"{name} holds doubles", kind="double", struct=name)
    comp = size // n
    names = list("xyzw"[:n])
    c_type = {"float32": "float", "int32": "int", "uint32": "unsigned int", "int8": "signed char",
              "uint8": "unsigned char", "int16": "short", "uint16": "unsigned short", "float16": "__half",
              "bfloat16": "__nv_bfloat16", "int64": "long long", "uint64": "unsigned long long"}[dt]
    np_dt = "uint16" if dt == "bfloat16" else dt
    dtype = np.dtype({"names": names, "formats": [np_dt] * n, "offsets": [i * comp for i in range(n)],
                      "itemsize": size})
    return StructLayout(name=name, dtype=dtype, align=scalar_align(name), fields=[(f, c_type, 1) for f in names])


def struct_layout(name: str, preamble: list[str], defines: dict[str, int] | None = None, *,
                  source=None, _depth: int = 0, double_as_float: bool = False,
                  keep_doubles: bool = False) -> StructLayout:
    """The layout of struct `name` (a file-scope definition in `preamble`); raises LayoutError. `source` (a text,
    or [(file name, text)]) only places a field for the messages. `double_as_float`: the layout the ports compile
    (doubles computed as float), instead of raising for a double; `keep_doubles`: the C layout with its doubles."""
    defines = defines or {}
    body = struct_body(name, preamble)
    if body is None and _vector_type(name):
        return _vector_layout(name, double_as_float)
    if body is None:
        raise LayoutError(f"the definition of {name} is not in the file or its local headers", struct=name)
    names, formats, offsets, fields = [], [], [], []
    off, align = 0, _explicit_align(name, preamble)
    if _virtual(body):
        raise LayoutError(f"class {name} has virtual functions: each object holds a vtable pointer", kind="pointer",
                          struct=name)
    for decl in _data_members(body):
        d = re.sub(r"\b(?:__align__|alignas)\s*\(\s*\d+\s*\)", "", decl).strip()
        if "{" in d:
            raise LayoutError(f"struct {name}: the field '{d}' (a type defined inside it) is not read here",
                              struct=name)
        first, *rest = _split_declarators(d)
        m = re.fullmatch(r"(.*?[\w>])\s*(\**)\s*(\w+\s*(?:\[[^\]]*\]\s*)*)", first.strip())
        if not m or not m.group(1).strip():
            raise LayoutError(f"struct {name}: the field '{d}' is not read here", struct=name)
        decls = [m.group(3)] + [r.strip() for r in rest]
        m = (m.group(1), m.group(2))
        for k, one in enumerate(decls):
            stars = (m[1] if k == 0 else "") + "*" * one.count("*")
            fname = re.match(r"\s*\**\s*(\w+)", one)
            fname = fname.group(1) if fname else "?"
            line = _line_of(source, name, fname)
            count = _dims(one, defines, preamble)
            if count is None:
                raise LayoutError(f"struct {name} has an array field '{fname}' whose size is not a constant here",
                                  struct=name, field_name=fname, line=line)
            if stars:
                raise LayoutError(f"struct {name} holds a pointer (field {fname}"
                                  + (f", {line}" if line else "") + ")", kind="pointer", struct=name,
                                  field_name=fname, line=line)
            base = resolve_type(m[0], preamble)
            if _is_enum(base, preamble):
                base = "int"   # an enum without a fixed underlying type is an int in nvcc's layout
            if base in POINTEE:
                size, al = POINTEE[base][1], scalar_align(base)
                if (base == "double" or POINTEE[base][0] == "float64") and double_as_float:
                    size = POINTEE[base][1] // 2
                    al = size if size & (size - 1) == 0 else 4
                    lanes = size // 4
                    sub = np.dtype("float32") if lanes == 1 else np.dtype((np.float32, (lanes,)))
                    fields.append((fname, base, count))
                elif (base == "double" or POINTEE[base][0] == "float64") and not keep_doubles:
                    raise LayoutError(f"struct {name} holds a double (field {fname}"
                                      + (f", {line}" if line else "") + ")", kind="double", struct=name,
                                      field_name=fname, line=line)
                else:
                    dt, lanes = POINTEE[base][0], POINTEE[base][1] // ELEM_BYTES[POINTEE[base][0]]
                    np_dt = np.dtype("uint16" if dt == "bfloat16" else dt)
                    sub = np_dt if lanes == 1 else np.dtype((np_dt, (lanes,)))
                    fields.append((fname, base, count))
            elif _depth < 4 and struct_body(base, preamble) is not None:
                inner = struct_layout(base, preamble, defines, source=source, _depth=_depth + 1,
                                      double_as_float=double_as_float, keep_doubles=keep_doubles)
                sub, size, al = inner.dtype, inner.dtype.itemsize, inner.align
                fields.append((fname, base, count))
            else:
                missing = re.fullmatch(r"[A-Za-z_]\w*", base) is not None and struct_body(base, preamble) is None
                raise LayoutError(f"struct {name}: the field '{fname}' has type {base}, "
                                  + ("whose definition is not in the file or its local headers" if missing else
                                     "whose layout is not known here"), struct=name, field_name=fname, line=line)
            off = -(-off // al) * al
            names.append(fname)
            formats.append(sub if count == 1 else np.dtype((sub, (count,))))
            offsets.append(off)
            off += size * count
            align = max(align, al)
    if not names:
        raise LayoutError(f"struct {name} has no data fields read here", struct=name)
    size = -(-off // align) * align
    dt = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})
    return StructLayout(name=name, dtype=dt, align=align, fields=fields)


_STD_TAG = re.compile(r"(?:::)?(?:cuda\s*::\s*)?(?:std\s*::\s*)?(?:bool_constant|integral_constant|true_type|false_type)"
                      r"\s*(?:<.*>)?")


def empty_tag(ctype: str, preamble: list[str]) -> bool:
    """A parameter type that carries no data: `std::bool_constant<Atomic>`, `std::integral_constant<int, N>`,
    `std::true_type`/`false_type`, or a struct/class of the file without data members, base classes or virtual
    functions (a tag). Its value is its type, known from the template arguments: the ports take nothing for it."""
    t = " ".join(re.sub(r"\b(?:const|volatile|__restrict__)\b", " ", ctype).split())
    if not t or "*" in t or "&" in t:
        return False
    t = re.sub(r"^(?:struct|class)\s+", "", t)
    if _STD_TAG.fullmatch(t):
        return True
    name = t.split("<")[0].strip()
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        return False
    body = struct_body(name, preamble)
    if body is None or any(re.search(rf"\b(?:struct|class)\s+{re.escape(name)}\s*(?:final\s*)?:(?!:)", e)
                           for e in preamble):
        return False   # unknown, or derived (its base may hold data)
    return not _data_members(body) and not _virtual(body)


def followed_pointer(name: str, preamble: list[str], texts: list[str], source=None,
                     _depth: int = 0) -> LayoutError | None:
    """The pointer field of struct `name` (or of a struct it holds) that the code in `texts` reads (`e->name[0]`,
    `e.next->v`), as a LayoutError naming the struct, the field and, where `source` places it, its line; None where
    the struct holds no pointer or the code reads none. A pointer the program stored in a struct is an address of
    the program's memory: the ports get buffers of their own, so the code cannot follow it there."""
    body = struct_body(name, preamble)
    if body is None or _depth > 4:
        return None
    code = "\n".join(texts)
    for decl in _data_members(body):
        d = re.sub(r"\b(?:__align__|alignas)\s*\(\s*\d+\s*\)", "", decl).strip()
        if "{" in d:
            continue
        first, *rest = _split_declarators(d)
        m = re.fullmatch(r"(.*?[\w>])\s*(\**)\s*(\w+)\s*(?:\[[^\]]*\]\s*)*", first.strip())
        if not m:
            continue
        base = resolve_type(m.group(1), preamble)
        for k, one in enumerate([m.group(2) + m.group(3)] + [r.strip() for r in rest]):
            fname = re.match(r"\s*(\**)\s*(\w+)", one)
            if not fname:
                continue
            stars, fname = fname.group(1), fname.group(2)
            # a struct the code reaches as a member (`elem->name[0]`, `elem->name.c_str()`) follows its pointer
            # field in its own member functions too (`char& operator[](int i) { return data[i]; }`)
            inside = _depth > 0 and stars and len(re.findall(rf"\b{re.escape(fname)}\b", body)) > 1
            if not inside and not re.search(rf"(?:->|\.)\s*{re.escape(fname)}\b", code):
                continue
            if stars:
                line = _line_of(source, name, fname)
                return LayoutError(f"struct {name} holds a pointer (field {fname}" + (f", {line}" if line else "")
                                   + ")", kind="pointer", struct=name, field_name=fname, line=line)
            if base != name and base not in POINTEE:
                inner = followed_pointer(base, preamble, texts, source, _depth + 1)
                if inner is not None:
                    return inner
    return None


def source_files(source: str, path: str | None) -> list[tuple[str, str]]:
    """[(file name, text)]: `source` (the file at `path`) and the local headers it includes from its folder, for
    placing a struct's field in a message (`dataElem.cu line 6`)."""
    import os

    if not path:
        return [("", source)]
    out = [(os.path.basename(path), source)]
    folder = os.path.dirname(os.path.abspath(path))
    for inc in dict.fromkeys(re.findall(r'^[ \t]*#\s*include\s*"([^"]+)"', source, re.M)):
        f = os.path.join(folder, inc)
        if os.path.isfile(f):
            try:
                with open(f, errors="replace") as fh:
                    out.append((os.path.basename(f), fh.read()))
            except OSError:
                pass
    return out


def struct_dtype_of(name: str, preamble: list[str], defines: dict[str, int] | None = None) -> tuple[str, int] | None:
    """(scalar dtype, sizeof) of a struct whose fields are all built-in types of one scalar dtype (a LatLong of two
    floats: float32, 8), else None: the port's launch() then names the buffer by that dtype."""
    try:
        lay = struct_layout(name, preamble, defines)
    except LayoutError:
        return None
    if not all(t in POINTEE for _, t, _ in lay.fields):
        return None
    kinds = {POINTEE[t][0] for _, t, _ in lay.fields}
    if len(kinds) != 1:
        return None
    dt = kinds.pop()
    if lay.dtype.itemsize % ELEM_BYTES[dt]:
        return None
    return dt, lay.dtype.itemsize


def _leaves(dt: np.dtype, base: int = 0):
    """(byte offset, scalar dtype) of every scalar of a (structured) dtype, in field order."""
    if dt.names:
        for n in dt.names:
            sub, off = dt.fields[n][0], dt.fields[n][1]
            yield from _leaves(sub, base + off)
    elif dt.subdtype is not None:
        inner, shape = dt.subdtype
        for i in range(int(np.prod(shape))):
            yield from _leaves(inner, base + i * inner.itemsize)
    else:
        yield base, dt


def double_repack(name: str, preamble: list[str], defines: dict[str, int] | None = None):
    """For a by-value struct holding doubles: ([(offset in C, dtype in C, offset in the ports, dtype there)], sizeof
    in the ports), the map from the original's bytes (what a capture records) to the struct both ports compile with
    doubles as float; None where either layout is not computed here."""
    try:
        struct_layout(name, preamble, defines)
        return None   # no double: the bytes are the ports' as they are
    except LayoutError as e:
        if e.kind != "double":
            return None
    try:
        orig = struct_layout(name, preamble, defines, keep_doubles=True)
        port = struct_layout(name, preamble, defines, double_as_float=True)
    except LayoutError:
        return None
    a, b = list(_leaves(orig.dtype)), list(_leaves(port.dtype))
    if len(a) != len(b) or len(a) > 4096:
        return None
    return [(oa, da.str, ob, db.str) for (oa, da), (ob, db) in zip(a, b)], port.dtype.itemsize


def by_value_problem(name: str, preamble: list[str], defines: dict[str, int] | None = None) -> LayoutError | None:
    """Why struct `name` cannot travel to a port as its bytes (kind "pointer", "double", "texture", "missing"),
    else None. A field whose layout is not computed here (an enum, a type of a header) is no reason by itself:
    the kernel reinterprets the bytes with the same definition the original compiled."""
    from .launch import TEXTURE_TYPES

    if _vector_type(name) and struct_body(name, preamble) is None:
        # a CUDA vector type (int2, float4, uchar4): its bytes, which both ports read as the same vector type
        return LayoutError(f"{name} holds doubles", kind="double", struct=name) if name.startswith("double") \
            else None
    body = struct_body(name, preamble)
    if body is None:
        return LayoutError(f"the definition of {name} is not in the file", kind="missing", struct=name)
    try:
        struct_layout(name, preamble, defines)
        return None
    except LayoutError as e:
        if e.kind in ("pointer", "double"):
            return e
    if _virtual(body):
        return LayoutError(f"class {name} has virtual functions: each object holds a vtable pointer",
                           kind="pointer", struct=name)
    code = " ".join(_data_members(body))          # data members only: comments, directives and methods dropped
    if "*" in code:
        return LayoutError(f"struct {name} holds a pointer", kind="pointer", struct=name)
    if re.search(r"\bdouble\d?\b", code):
        return LayoutError(f"struct {name} holds a double", kind="double", struct=name)
    tex = TEXTURE_TYPES & set(re.findall(r"\w+", code))
    if tex:
        return LayoutError(f"struct {name} holds a texture object ({sorted(tex)[0]})", kind="texture", struct=name)
    return None
