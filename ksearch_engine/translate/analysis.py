"""What the translator needs to know about a CUDA kernel beyond its signature: which pointer parameters
it writes (outputs), which helpers it calls, how big its static shared memory is, and the values of the
file's simple `#define` constants."""
from __future__ import annotations

import re

from ..source.cfamily import parse_bytes
from ..source.models import KernelInfo
from .hostexpr import HostExprError, expr_to_py

C_TO_MX = {"float": "float32", "int": "int32", "unsigned": "uint32", "unsigned int": "uint32", "uint": "uint32",
           "uint32_t": "uint32", "int32_t": "int32", "half": "float16", "__half": "float16",
           "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "bool": "bool", "int64_t": "int64",
           "long": "int64", "long long": "int64", "size_t": "int64", "double": "float32",
           "float4": "float32", "float2": "float32", "uint8_t": "uint8", "int8_t": "int8"}
MX_SIZE = {"float32": 4, "int32": 4, "uint32": 4, "float16": 2, "bfloat16": 2, "bool": 1, "int64": 8,
           "uint8": 1, "int8": 1}


def walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def written_pointers(kernel: KernelInfo, helpers: list[KernelInfo] | None = None, _depth: int = 0) -> set[str]:
    """Pointer parameters the kernel writes through, directly or through local pointers derived from them, or
    through a `helpers` function it passes them to (`store128(out + c, v)` writing `*reinterpret_cast<int4*>(p)`)."""
    by_name = {h.name: h for h in (helpers or [])}
    data = kernel.text.encode()
    root = parse_bytes(data, "cuda").root_node
    params = {p.name for p in kernel.params if p.pointer}
    alias: dict[str, str] = {}

    def t(n):
        return data[n.start_byte:n.end_byte].decode("utf-8", "replace")

    def base_of(n) -> str | None:
        while n is not None and n.type in ("subscript_expression", "field_expression", "pointer_expression",
                                           "parenthesized_expression", "cast_expression", "binary_expression",
                                           "call_expression"):
            if n.type == "call_expression":   # reinterpret_cast<int4*>(p)
                fn = n.child_by_field_name("function")
                a = n.child_by_field_name("arguments")
                if fn is None or a is None or not re.match(r"(?:reinterpret|static|const)_cast\b", t(fn)) \
                        or not a.named_children:
                    return None
                n = a.named_children[0]
            elif n.type == "cast_expression":
                n = n.child_by_field_name("value")
            elif n.type == "binary_expression":
                n = n.child_by_field_name("left")
            elif n.type == "parenthesized_expression":
                n = n.named_children[0] if n.named_children else None
            else:
                n = n.child_by_field_name("argument")
        if n is None or n.type != "identifier":
            return None
        name = t(n)
        return alias.get(name, name) if (name in params or name in alias) else None

    nodes = list(walk(root))

    def source_of(value) -> str | None:
        idents = [t(x) for x in walk(value) if x.type == "identifier"] if value is not None else []
        return next((alias.get(i, i) for i in idents if i in params or i in alias), None)

    local_ptrs = set()
    for n in nodes:   # local pointers initialized from a parameter (and every local pointer declared)
        if n.type in ("init_declarator", "declaration") and n.child_by_field_name("declarator") is not None \
                and n.child_by_field_name("declarator").type == "pointer_declarator":
            d = n.child_by_field_name("declarator")
            while d is not None and d.type != "identifier":
                d = d.child_by_field_name("declarator")
            if d is None:
                continue
            local_ptrs.add(t(d))
            src = source_of(n.child_by_field_name("value")) if n.type == "init_declarator" else None
            if src is not None:
                alias[t(d)] = src
    for _ in range(2):   # `FOUR_VECTOR* fA; ... fA = &d_fv_gpu[first_i];` (Rodinia's lavaMD): assigned later
        for n in nodes:
            left = n.child_by_field_name("left") if n.type == "assignment_expression" else None
            if left is not None and left.type == "identifier" and t(left) in local_ptrs and t(left) not in alias:
                src = source_of(n.child_by_field_name("right"))
                if src is not None:
                    alias[t(left)] = src
    out = set()
    for n in nodes:
        target = None
        if n.type == "assignment_expression":
            left = n.child_by_field_name("left")
            if left is not None and left.type != "identifier":
                target = base_of(left)
        elif n.type == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type != "identifier":
                target = base_of(arg)
        elif n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None and t(fn).split("::")[-1] == "store_matrix_sync":   # wmma: writes through arg 0
                args = n.child_by_field_name("arguments").named_children
                target = base_of(args[0]) if args else None
            elif fn is not None and t(fn).split("<")[0].strip() in by_name and _depth < 8:
                callee = by_name[t(fn).split("<")[0].strip()]
                inner = written_pointers(callee, helpers, _depth + 1)
                args = n.child_by_field_name("arguments").named_children
                for p, a in zip(callee.params, args):
                    if p.name in inner and base_of(a):
                        out.add(base_of(a))
            elif fn is not None and t(fn).startswith("atomic"):
                args = n.child_by_field_name("arguments").named_children
                if args:
                    a = args[0]
                    if a.type == "pointer_expression":
                        a = a.child_by_field_name("argument")
                    target = base_of(a)
        if target:
            out.add(target)
    return out


def called_helpers(kernel: KernelInfo, helpers: list[KernelInfo]) -> list[KernelInfo]:
    """Helpers the kernel calls, directly or through other helpers, in file order."""
    by_name = {h.name: h for h in helpers}
    want: set[str] = set()
    todo = [kernel.text]
    while todo:
        words = set(re.findall(r"[A-Za-z_]\w*", todo.pop()))
        for w in words & set(by_name) - want:
            want.add(w)
            todo.append(by_name[w].text)
    return _callees_first([h for h in helpers if h.name in want])


def _callees_first(helpers: list[KernelInfo]) -> list[KernelInfo]:
    """`helpers` reordered so that each comes after the helpers it calls (C++ wants a function declared before
    its use; helpers gathered from several headers and the program are not always in that order), otherwise in
    their given order. Overloads (one name, several definitions) move together; a cycle keeps the given order."""
    groups: dict[str, list[KernelInfo]] = {}
    for h in helpers:
        groups.setdefault(h.name, []).append(h)
    rank = {n: i for i, n in enumerate(groups)}
    calls = {n: sorted((set(re.findall(r"[A-Za-z_]\w*", "\n".join(h.body for h in hs))) & set(groups)) - {n},
                       key=rank.get) for n, hs in groups.items()}
    done: set[str] = set()
    order: list[str] = []
    for root in groups:
        if root in done:
            continue
        stack = [(root, iter(calls[root]))]
        active = {root}
        while stack:
            name, it = stack[-1]
            nxt = next((c for c in it if c not in done and c not in active), None)
            if nxt is None:
                stack.pop()
                active.discard(name)
                done.add(name)
                order.append(name)
            else:
                active.add(nxt)
                stack.append((nxt, iter(calls[nxt])))
    return [h for n in order for h in groups[n]]


def helper_pointer_spaces(kernel: KernelInfo, helpers: list[KernelInfo], shared: set[str],
                          helper_shared: dict[str, set[str]] | None = None) -> dict[str, dict[int, str]]:
    """{helper: {param index: 'threadgroup'}} for helper calls that pass a shared array: from the kernel, and from
    helpers passing on shared memory they were given or declare themselves (`helper_shared`: helper -> names)."""
    names = {h.name for h in helpers}
    out: dict[str, dict[int, str]] = {}

    def calls(text: str) -> list[tuple[str, list[set[str]]]]:
        data = text.encode()
        found = []
        for n in walk(parse_bytes(data, "cuda").root_node):
            if n.type != "call_expression":
                continue
            fn = n.child_by_field_name("function")
            if fn is not None and fn.type == "template_function":
                fn = fn.child_by_field_name("name")
            name = data[fn.start_byte:fn.end_byte].decode() if fn is not None else ""
            args = n.child_by_field_name("arguments")
            if name not in names or args is None:
                continue
            found.append((name, [{data[x.start_byte:x.end_byte].decode() for x in walk(a) if x.type == "identifier"}
                                 for a in args.named_children if a.type != "comment"]))
        return found

    def mark(text_calls, tg: set[str]) -> bool:
        changed = False
        for name, args in text_calls:
            for i, idents in enumerate(args):
                if idents & tg and out.setdefault(name, {}).get(i) != "threadgroup":
                    out[name][i] = "threadgroup"
                    changed = True
        return changed

    mark(calls(kernel.text), set(shared))
    helper_calls = {id(h): calls(h.body) for h in helpers if set(re.findall(r"[A-Za-z_]\w*", h.body)) & names}
    changed = True
    while changed and helper_calls:
        changed = False
        for h in helpers:
            if id(h) not in helper_calls:
                continue
            spaces = out.get(h.name, {})
            tg = {p.name for i, p in enumerate(h.params) if spaces.get(i) == "threadgroup"}
            tg |= (helper_shared or {}).get(h.name, set())
            if tg and mark(helper_calls[id(h)], tg):
                changed = True
    return out


_ENUM = re.compile(r"\s*(?:typedef\s+)?enum\s+(?!class\b|struct\b)(?:[A-Za-z_]\w*\s*)?(?::\s*[\w\s]+?)?\{(?P<body>[^{}]*)\}")


def is_enum(entry: str) -> bool:
    """Whether a file-scope entry is an enum's definition (`enum E {...};`, `typedef enum {...} E;`)."""
    return re.match(r"\s*(?:typedef\s+)?enum\b", entry) is not None


def _enumerators(entry: str) -> dict[str, str]:
    """{NAME: python expression} for the enumerators of a plain (unscoped) `enum E { A, B = 4, C };`: each is the
    one before it plus one where no value is written, as in C."""
    m = _ENUM.match(re.sub(r"//[^\n]*|/\*.*?\*/", " ", entry, flags=re.S))
    if m is None:
        return {}
    out: dict[str, str] = {}
    prev = "-1"
    for part in m.group("body").split(","):
        e = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:=\s*(.+?))?\s*", part)
        if e is None:
            if part.strip():
                return out     # an enumerator this reader does not follow: the ones after it stay unknown
            continue
        try:
            prev = expr_to_py(e.group(2)) if e.group(2) else f"({prev}) + 1"
        except HostExprError:
            return out
        out[e.group(1)] = prev
    return out


def define_constants(preamble: list[str]) -> dict[str, str]:
    """{NAME: python expression} for `#define NAME <arithmetic>`, `constexpr int NAME = <arithmetic>;` and the
    enumerators of plain enums."""
    out: dict[str, str] = {}
    for line in preamble:
        if is_enum(line):
            out.update(_enumerators(line))
            continue
        # (a comment after the value: `#define WARP_SIZE 32 // lanes`)
        m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)\s+(.+?)\s*$", re.sub(r"/\*.*?\*/|//[^\n]*", " ", line))
        if not m:
            m = re.match(r"\s*(?:static\s+)?constexpr\s+\w+\s+([A-Za-z_]\w*)\s*=\s*(.+?);\s*$", line)
        if not m:
            continue
        try:
            out[m.group(1)] = expr_to_py(m.group(2))
        except HostExprError:
            continue
    return out


def eval_size(expr: str, env: dict) -> int | None:
    try:
        py = expr_to_py(expr)
        return int(eval(py, {"__builtins__": {}, "_cdiv": _cdiv, "_cmod": _cmod, "min": min, "max": max,
                                 "int": int, "float": float}, dict(env)))
    except Exception:
        return None


def _cdiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _cmod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - _cdiv(a, b) * b
    import math
    return math.fmod(a, b)


def constants_env(preamble: list[str], template_values: dict[str, object]) -> dict[str, object]:
    env: dict[str, object] = {}
    glb = {"__builtins__": {}, "_cdiv": _cdiv, "_cmod": _cmod, "min": min, "max": max, "int": int, "float": float}
    for name, py in define_constants(preamble).items():
        try:
            env[name] = eval(py, glb, dict(env))
        except Exception:
            continue
    env.update(template_values)
    return env


_NS_OPEN = re.compile(r"\s*(?:namespace\b[ \t]*(?:[A-Za-z_]\w*)?[ \t]*\{[ \t]*)+\n")
_NS_CLOSE = re.compile(r"\n\}+(?:\n(?:using namespace [\w:]+;[ \t]*)*)?\s*$")


def unwrap_namespaces(entry: str) -> str:
    """A preamble entry without the `namespace N {` ... `}` `using namespace N;` around it (source/cfamily's
    _in_namespaces): the type, constant or typedef itself."""
    m = _NS_OPEN.match(entry)
    if not m:
        return entry
    end = _NS_CLOSE.search(entry, m.end())
    return entry[m.end():end.start()] if end else entry


def _entry_name(entry: str) -> str | None:
    entry = unwrap_namespaces(entry)
    m = re.match(r"\s*template\s*<(?:[^<>;{}]|<[^<>;{}]*>)*>\s*(?=(?:struct|class|union)\b)", entry)
    if m:   # `template <int K = 4> struct S {...}`: named S
        entry = entry[m.end():]
    m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)", entry)
    if m:
        return m.group(1)
    m = re.match(r"\s*(?:typedef\b.*?\b([A-Za-z_]\w*)\s*;\s*$)", entry, re.S)
    if m:
        return m.group(1)
    m = re.match(r"\s*(?:struct|union|class|enum(?:\s+class)?)\s+(?:(?:alignas|__align__)\s*\(\s*\w+\s*\)\s*)?"
                 r"([A-Za-z_]\w*)", entry)
    if m:
        return m.group(1)
    m = re.match(r"\s*using\s+([A-Za-z_]\w*)\s*=", entry)
    if m:
        return m.group(1)
    m = re.match(r"[^=;{\[]*?\b([A-Za-z_]\w*)\s*(?:\[|=|;|\{)", entry)
    return m.group(1) if m else None


def entry_provides(e: str) -> set[str]:
    """The names a file-scope entry (ParseResult.preamble) defines: a macro, type, constant, enumerators."""
    e2 = re.sub(r"__align__\s*\(\s*\d+\s*\)|alignas\s*\(\s*\d+\s*\)", "", unwrap_namespaces(e))
    out = {_entry_name(e2)} - {None}
    if is_enum(e2):   # an enum provides its enumerators
        body = e2[e2.find("{") + 1:e2.rfind("}")] if "{" in e2 else ""
        out |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=|,|$)", body.strip()))
    if re.match(r"\s*#\s*if", e2):   # a conditional block of #defines provides each of them
        out |= set(re.findall(r"^\s*#\s*define\s+([A-Za-z_]\w*)", e2, re.M))
    m = re.search(r"\}\s*([A-Za-z_]\w*)\s*;?\s*$", e2)   # typedef struct {...} Name;
    if m:
        out.add(m.group(1))
    return out


def needed_preamble(preamble: list[str], texts: list[str]) -> list[str]:
    """The file-scope entries (macros, constants, types) that `texts` use, directly or through each other."""
    names = [(entry_provides(e), e) for e in preamble]
    used = set(re.findall(r"[A-Za-z_]\w*", "\n".join(texts)))
    keep: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, (name, entry) in enumerate(names):
            if i in keep or not (name & used):
                continue
            keep.add(i)
            # only the part before a big initializer can name other entries worth following; a type's definition
            # (a class with many member functions) is followed whole
            whole = re.match(r"\s*(?:template\b|struct\b|class\b|union\b|typedef\s+struct\b)",
                             unwrap_namespaces(entry)) is not None
            used |= set(re.findall(r"[A-Za-z_]\w*", entry if whole else entry[:4096]))
            changed = True
    return [e for i, (_, e) in enumerate(names) if i in keep]


_DOUBLE = re.compile(r"\bdouble(\d?)\b")


def double_twins(helpers: list[KernelInfo]) -> tuple[list[KernelInfo], list[KernelInfo]]:
    """(kept, dropped): an overload whose parameters differ from another's only by double where the other has
    float (`float f(float)` and `double f(double)`, one per precision) is the same function once both ports compute
    doubles as float, and C++ rejects the redefinition: the overload on doubles is dropped (its calls reach the float
    one, which the ports compute the same way)."""
    def key(h: KernelInfo):
        return h.name, tuple((_DOUBLE.sub(r"float\1", " ".join(p.type.split())), p.pointer, p.reference)
                             for p in h.params)
    plain = {key(h) for h in helpers if not any(_DOUBLE.search(p.type) for p in h.params)}
    dropped = [h for h in helpers if any(_DOUBLE.search(p.type) for p in h.params) and key(h) in plain]
    return [h for h in helpers if h not in dropped], dropped
