"""Member functions of the kernel's structs and classes (templates) that read the thread's position or the grid's
shape (`threadIdx`, `blockIdx`, `blockDim`, `gridDim`), declare `__shared__` storage, or are called on an object in
shared memory, carried into the Metal port.

Metal gives thread positions to the kernel function only (as its parameters) and declares threadgroup memory in the
kernel only; CUDA's member functions read them anywhere. The Metal port treats each member function like a free
`__device__` helper (translator._helper_attributes, helpershared.py): one that reads a thread attribute (directly or
through the functions it calls, free or member) takes it as a trailing parameter, and every call passes it
(`obj.f(...)`, `this->f(...)`, `f(...)` inside another member, `Class::f(...)`); a `__shared__` variable a member
function declares is declared in the kernel and handed down the same way. Like helper overloads, every function of
one name takes what any of them needs, so calls never have to know the object's class.

An object in threadgroup memory (a `__shared__` object, or a data member of one) can only call member functions
declared for that address space (MSL: `void f() threadgroup`, with `threadgroup T&` returns): classes whose objects
all live there get their non-static member functions so declared; reference and pointer parameters of such a class
become `threadgroup`. What stays refused (by class and line): operators and constructors that would need the thread
position or a hoisted array (their calls are implicit: nothing to pass it through), member functions declared in the
class and defined outside it that would need one, and classes whose objects live in both address spaces with member
functions called on the threadgroup ones (MSL would need a second, threadgroup copy of each).

The CUDA-backend port keeps the classes as written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..source.cfamily import parse_bytes
from .analysis import unwrap_namespaces, walk

THREAD_WORDS = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b")
_SPECIFIERS = ("class_specifier", "struct_specifier", "union_specifier")
_TARGS = r"(?:<(?:[^<>;{}]|<(?:[^<>;{}]|<[^<>;{}]*>)*>)*>)"


@dataclass
class Member:
    cls: str
    name: str              # the function's name; "operator[]"... for operators; the class's for constructors
    kind: str              # "function", "operator", "constructor", "declaration" (declared here, defined outside)
    static: bool
    text: str              # the definition as written, its template line included
    offset: int            # where it starts in the class entry (unwrapped)


@dataclass
class ClassInfo:
    name: str
    entry: str                                             # the preamble entry (unwrapped) it is defined in
    offset: int                                            # where its definition starts in the entry
    end: int = 0                                           # and ends
    template_params: list[str] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)
    data: dict[str, str] = field(default_factory=dict)     # data member -> its type's name (no template arguments)
    bases: list[str] = field(default_factory=list)


@dataclass
class ClassMembers:
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)   # typedef / using name -> class name
    tg_resident: set[str] = field(default_factory=set)      # every object in threadgroup memory
    tg_classes: set[str] = field(default_factory=set)       # those with member functions to declare threadgroup
    tg_data: dict[str, set[str]] = field(default_factory=dict)   # such a class -> its data members
    mixed: set[str] = field(default_factory=set)            # objects in both address spaces
    bindings: dict[str, dict[str, str]] = field(default_factory=dict)   # class -> {template param: argument}
    param_types: dict[str, list[tuple[str, str]]] = field(default_factory=dict)   # class -> [(bound, own) types]

    def resolve(self, name: str) -> str | None:
        """The class a type name (namespaces, template arguments and typedefs allowed) names, if one of ours."""
        def bare(n: str) -> str:
            n = re.sub(r"^(?:(?:const|volatile|typename|struct|class)\s+)+", "", re.sub(r"\s+", " ", n).strip())
            return re.sub(_TARGS + r"\s*$", "", n).strip().split("::")[-1].strip()
        base = bare(name)
        seen = set()
        while base in self.aliases and base not in seen:
            seen.add(base)
            base = bare(self.aliases[base])
        return base if base in self.classes else None

    def type_names(self, cls: str) -> set[str]:
        return {cls} | {a for a in self.aliases if self.resolve(a) == cls}


def _text(data: bytes, n) -> str:
    return data[n.start_byte:n.end_byte].decode("utf-8", errors="replace")


def _is_function(d) -> bool:
    from .rewrite import function_declarator
    return function_declarator(d) is not None


def _declarator_name(d, data: bytes) -> tuple[str, str] | None:
    """(name, kind) of a member function's declarator."""
    from .rewrite import function_declarator
    d = function_declarator(d)
    if d is None:
        return None
    n = d.child_by_field_name("declarator")
    if n is None:
        return None
    if n.type == "operator_name":
        return "".join(_text(data, n).split()), "operator"
    if n.type == "destructor_name":
        return _text(data, n), "destructor"
    return _text(data, n).split("::")[-1], "function"


def read_classes(entries: list[str]) -> ClassMembers:
    """The structs and classes (nested ones too) of `entries` (preamble entries), with their member functions, data
    members, bases and the typedefs naming them."""
    out = ClassMembers()
    for entry in entries:
        inner = unwrap_namespaces(entry)
        if not re.search(r"\b(?:struct|class|union)\b", inner) and "typedef" not in inner and "using" not in inner:
            continue
        data = inner.encode()
        root = parse_bytes(data, "cuda").root_node
        for n in walk(root):
            if n.type in ("type_definition", "alias_declaration"):
                t = n.child_by_field_name("type")
                ds = n.children_by_field_name("declarator") if n.type == "type_definition" else \
                    [n.child_by_field_name("name")]
                if t is not None and t.type not in _SPECIFIERS:
                    for d in ds:
                        if d is not None and d.type in ("type_identifier", "identifier"):
                            out.aliases[_text(data, d)] = _text(data, t)
                continue
            if n.type not in _SPECIFIERS:
                continue
            body = n.child_by_field_name("body")
            name = n.child_by_field_name("name")
            if body is None or name is None:
                continue
            cname = _text(data, name).split("::")[-1]
            start = n.parent if n.parent is not None and n.parent.type == "template_declaration" else n
            info = ClassInfo(name=cname, entry=inner, offset=start.start_byte, end=n.end_byte)
            if start is not n:
                plist = start.child_by_field_name("parameters")
                for p in (plist.named_children if plist is not None else []):
                    ids = [c for c in walk(p) if c.type in ("identifier", "type_identifier")]
                    if ids:
                        info.template_params.append(_text(data, ids[-1] if p.type.endswith("declaration")
                                                          and len(ids) > 1 else ids[0]))
            for c in n.children:
                if c.type == "base_class_clause":
                    info.bases += [_text(data, x).split("<")[0].split("::")[-1] for x in c.named_children
                                   if x.type in ("type_identifier", "qualified_identifier", "template_type")]
            for c in body.named_children:
                fn, tmpl = c, None
                if c.type == "template_declaration":
                    fn = next((x for x in c.named_children if x.type in ("function_definition", "declaration",
                                                                          "field_declaration")), None)
                    tmpl = c
                    if fn is None:
                        continue
                top = tmpl or fn
                if fn.type == "function_definition" or (fn.type in ("field_declaration", "declaration") and
                                                        fn.child_by_field_name("declarator") is not None and
                                                        _is_function(fn.child_by_field_name("declarator"))):
                    got = _declarator_name(fn.child_by_field_name("declarator"), data)
                    if got is None:
                        continue
                    mname, kind = got
                    if kind == "destructor":
                        continue
                    if mname == cname:
                        kind = "constructor"
                    if fn.type != "function_definition":
                        kind = "declaration"
                    static = any(x.type == "storage_class_specifier" and _text(data, x) == "static"
                                 for x in fn.children)
                    info.members.append(Member(cls=cname, name=mname, kind=kind, static=static,
                                               text=_text(data, top), offset=top.start_byte))
                elif fn.type == "field_declaration":
                    t = fn.child_by_field_name("type")
                    if t is None or t.type in _SPECIFIERS or any(x.type == "storage_class_specifier" and
                                                                 _text(data, x) == "static" for x in fn.children):
                        continue
                    for d in fn.children_by_field_name("declarator"):
                        ids = [x for x in walk(d) if x.type == "field_identifier"]
                        if ids and not any(x.type in ("pointer_declarator", "reference_declarator") for x in walk(d)):
                            info.data[_text(data, ids[0])] = _text(data, t)
            if cname not in out.classes:
                out.classes[cname] = info
    for a, t in list(out.aliases.items()):   # keep only the aliases of our classes
        if out.resolve(t) is None:
            del out.aliases[a]
    return out


def _mask(text: str) -> str:
    from ..sim.preprocess import mask_comments
    return mask_comments(text)


def _statement_start(code: str, at: int) -> int:
    return max(code.rfind(";", 0, at), code.rfind("{", 0, at), code.rfind("}", 0, at)) + 1


def residency(cm: ClassMembers, function_texts: list[str], more_texts: list[str] = ()) -> None:
    """Fills cm.tg_classes / cm.mixed from where the objects of each class live: `__shared__` declarations and data
    members of such objects (threadgroup); other declarations, by-value parameters and temporaries in
    `function_texts` (the kernel, its helpers, member functions) or data members of those (thread). Base classes
    live where their derived classes do."""
    names = "|".join(sorted({re.escape(n) for c in cm.classes for n in cm.type_names(c)}, key=len, reverse=True))
    if not names:
        return
    tg: set[str] = set()
    th: set[str] = set()
    shared = re.compile(r"\b__shared__\s+(?:(?:volatile|const|static|typename)\s+)*((?:::)?(?:[A-Za-z_]\w*::)*(?:" + names
                        + r"))\b\s*" + _TARGS + r"?\s*[A-Za-z_]\w*")
    decl = re.compile(r"(?<![\w:.>])((?:[A-Za-z_]\w*::)*(?:" + names + r"))\s*(" + _TARGS
                      + r")?\s*(?:(\s[A-Za-z_]\w*)\s*(?=[;=\[({,)])|(?=\())")
    for text in list(function_texts) + list(more_texts):
        code = _mask(text)
        for m in shared.finditer(code):
            c = cm.resolve(m.group(1))
            if c:
                tg.add(c)
        for m in decl.finditer(code):
            c = cm.resolve(m.group(1))
            if c is None:
                continue
            stmt = code[_statement_start(code, m.start()):m.start()]
            if re.search(r"\b(?:__shared__|typedef|using|sizeof|return)\b", stmt):
                continue
            if m.group(3) is None:   # `C(...)` / `C<...>(...)`: a temporary, unless it follows `::`, `.`
                if re.search(r"(?:::|\.|->)\s*$", code[:m.start()]) or code[m.end():m.end() + 1] != "(":
                    continue
            elif m.group(3).strip() in ("operator", "const", "volatile"):
                continue
            th.add(c)
    changed = True
    while changed:
        changed = False
        for c, info in cm.classes.items():
            for space in (tg, th):
                if c not in space:
                    continue
                for t in list(info.data.values()):
                    d = cm.resolve(t)
                    if d and d not in space:
                        space.add(d)
                        changed = True
                for b in info.bases:
                    b = cm.resolve(b)
                    if b and b not in space:
                        space.add(b)
                        changed = True
    cm.mixed = tg & th
    cm.tg_resident = tg - th
    cm.tg_classes = {c for c in tg - th if any(not m.static and m.kind != "constructor"
                                               for m in cm.classes[c].members)}
    cm.tg_data = {c: set(cm.classes[c].data) for c in cm.tg_classes}


def template_bindings(cm: ClassMembers, texts: list[str], kernel_templates: set[str]) -> None:
    """cm.bindings: {class: {its template parameter: the one argument every `Class<args>` of `texts` (the kernel
    and its helpers) and of the other classes (through their own bindings) gives it}}."""
    from ..sim.preprocess import split_top

    def occurrences(text: str, cls: str):
        for n in cm.type_names(cls):
            for m in re.finditer(rf"(?<![\w.]){re.escape(n)}\s*<", text):
                depth, i = 1, m.end()
                while i < len(text) and depth:
                    depth += {"<": 1, ">": -1}.get(text[i], 0)
                    i += 1
                yield [a.strip() for a in split_top(text[m.end():i - 1])]
    for _ in range(3):
        for cls, info in cm.classes.items():
            if not info.template_params:
                continue
            seen: list[list[str]] = []
            for t in texts:
                seen += list(occurrences(_mask(t), cls))
            for other, oinfo in cm.classes.items():
                if other == cls or (oinfo.entry == info.entry and info.offset <= oinfo.offset < info.end):
                    continue   # its own definition (nested classes included) names it in its own terms
                b = cm.bindings.get(other, {})
                for args in occurrences(_mask(oinfo.entry[oinfo.offset:oinfo.end]), cls):
                    bound = [re.sub(r"[A-Za-z_]\w*", lambda w: b.get(w.group(0), w.group(0)), a) for a in args]
                    if any(set(re.findall(r"[A-Za-z_]\w*", a)) & (set(oinfo.template_params) - set(b)) for a in bound):
                        seen.append(["?"])   # in terms of a parameter not known here
                    else:
                        seen.append(bound)
            tuples = {tuple(s) for s in seen if s}
            if len(tuples) == 1 and "?" not in next(iter(tuples)):
                args = next(iter(tuples))
                cm.bindings[cls] = dict(zip(info.template_params, args))


def pseudo_helpers(cm: ClassMembers, line0: int = 0):
    """KernelInfo of each member function (not operators, constructors, declarations) of the classes, its class's
    bound template parameters replaced by their arguments: what helper_shared and the thread-attribute analysis
    read, like free helpers'."""
    from ..source import find_kernels
    out = []
    for cls, info in cm.classes.items():
        b = cm.bindings.get(cls, {})
        for m in info.members:
            if m.kind != "function":
                continue
            text = _mask(m.text)   # (words in comments are no calls)
            if b:
                head, brace, rest = text.partition("{")
                text = head + brace + re.sub(r"[A-Za-z_]\w*", lambda w: b.get(w.group(0), w.group(0)), rest)
            try:
                found = find_kernels(text, "member.cu").helpers
            except Exception:   # a member the parser cannot read: nothing hoisted or passed
                found = []
            h = next((x for x in found if x.name == m.name), None) or _as_helper(m.name, text)
            if h is None:
                continue
            free = [t for t in info.template_params if t not in b]
            from ..source.models import TemplateParam
            h = h.model_copy(update={"template_params": list(h.template_params) + [
                TemplateParam(name=t, kind="int", text=t) for t in free]})
            out.append(h)
            if b:   # the member takes a hoisted object in its class's terms, the kernel declares it in its own
                from .helpershared import _declarations
                try:
                    orig = next((x for x in find_kernels(_mask(m.text), "member.cu").helpers if x.name == m.name), None)
                except Exception:
                    orig = None
                if orig is not None:
                    for (sd_b, _), (sd_o, _) in zip(_declarations(h), _declarations(orig)):
                        if sd_b.type != sd_o.type:
                            cm.param_types.setdefault(cls, []).append((sd_b.type, sd_o.type))
    return out


def _as_helper(name: str, text: str):
    """A KernelInfo for a member function the kernel finder does not list (one returning a reference)."""
    from ..source.cfamily import param_from_node
    from ..source.models import KernelInfo, Position, Range, TemplateParam
    from .rewrite import function_declarator
    data = text.encode()
    root = parse_bytes(data, "cuda").root_node
    fn = next((n for n in walk(root) if n.type == "function_definition"), None)
    body = fn.child_by_field_name("body") if fn is not None else None
    fdecl = function_declarator(fn.child_by_field_name("declarator")) if fn is not None else None
    if body is None or fdecl is None:
        return None
    params, tparams = [], []
    plist = fdecl.child_by_field_name("parameters")
    for p in (plist.named_children if plist is not None else []):
        prm = param_from_node(p, data, data)
        if prm is not None:
            params.append(prm)
    if fn.parent is not None and fn.parent.type == "template_declaration":
        tl = fn.parent.child_by_field_name("parameters")
        for p in (tl.named_children if tl is not None else []):
            ids = [c for c in walk(p) if c.type in ("identifier", "type_identifier")]
            if ids:
                tparams.append(TemplateParam(name=_text(data, ids[0] if "type" in p.type else ids[-1]),
                                             kind="typename" if "type" in p.type else "int", text=_text(data, p)))
    zero = Range(start=Position(line=0, character=0), end=Position(line=text.count("\n"), character=0))
    return KernelInfo(name=name, language="cuda", qualifier="__device__", params=params, template_params=tparams,
                      byte_range=(0, len(data)), range=zero, name_range=zero,
                      body=_text(data, body)[1:-1], body_byte_range=(body.start_byte + 1, body.end_byte - 1),
                      text=text)


def class_terms(cm: ClassMembers, params: dict[str, list[tuple[str, str]]]) -> dict[str, list[tuple[str, str]]]:
    """`params` (helper_shared's: function -> [(its Metal parameter, what a call passes)]) with the parameters of a
    class's member functions written in the class's terms (`threadgroup Buf<W>& b`, not the kernel's `Buf<64>`)."""
    owner = {m.name: c for c, info in cm.classes.items() for m in info.members if m.kind == "function"}
    out = {}
    for name, entries in params.items():
        pairs = cm.param_types.get(owner.get(name, ""), [])
        fixed = []
        for param, arg in entries:
            for bound, orig in pairs:
                param = param.replace(bound, orig)
            fixed.append((param, arg))
        out[name] = fixed
    return out


def member_problems(cm: ClassMembers, attrs: dict[str, list[str]], params: dict[str, list]) -> list[tuple[str, int, str, str]]:
    """(class name, offset in its entry, construct, what) for what the Metal port cannot carry: operators and
    constructors that would need the thread position or a kernel-declared array, in-class declarations of member
    functions defined outside the class that would."""
    out = []
    needs = set(attrs) | set(params)
    for cls, info in cm.classes.items():
        for m in info.members:
            code = _mask(m.text)
            body = code[code.find("{"):] if "{" in code else ""
            direct = THREAD_WORDS.search(body)
            hoist = re.search(r"\b__shared__\b", body)
            called = next((w for w in re.findall(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", body) if w in needs),
                          None)
            if m.kind in ("operator", "constructor") and (direct or hoist or called):
                what = f"uses {direct.group(1)}" if direct else ("declares a __shared__ variable" if hoist else
                                                                 f"calls {called}, which needs the thread position "
                                                                 "or a kernel-declared array")
                label = m.name if m.kind == "operator" else f"the constructor {m.name}"
                out.append((cls, m.offset, f"{label} of {cls}",
                            f"{label} of {cls} {what}: the Metal port passes these to member functions as "
                            "parameters, and an operator's or constructor's calls are implicit (nothing to pass them "
                            "through): make it a named member function, or port by hand"))
            elif m.kind == "declaration" and m.name in needs:
                out.append((cls, m.offset, f"{m.name} of {cls}",
                            f"member function {m.name} of {cls} is defined outside the class and needs the thread "
                            "position or a kernel-declared array, which the Metal port passes as parameters only "
                            "to member functions defined in the class: define it in the class, or port by hand"))
    return out


def tg_reference_params(text: str, tg_types: set[str]) -> str:
    """`Tile<64>& t` / `const Tile* p` parameters of a class whose objects live in threadgroup memory (`tg_types`:
    its names) as `threadgroup` ones, in a parameter list's text."""
    if not tg_types:
        return text
    names = "|".join(sorted((re.escape(n) for n in tg_types), key=len, reverse=True))
    return re.sub(r"([(,]\s*)((?:const\s+)?(?:[A-Za-z_]\w*::)*(?:" + names + r")\s*" + _TARGS + r"?\s*[&*])",
                  lambda m: m.group(1) + ("" if re.search(r"\b(?:thread|threadgroup|device|constant)\b",
                                                          text[max(0, m.start() - 16):m.start()])
                                          else "threadgroup ") + m.group(2), text)
