"""Shared arrays declared in `__device__` helpers, for the Metal port.

CUDA lets a helper declare `__shared__ float s[64];` or `extern __shared__ float sdata[];` (one array per block, as
if declared in the kernel). Metal takes `threadgroup` variables in a kernel function's own scope only, so the Metal
port declares each such array at the top of the kernel body and hands it down: the declaring helper takes it as a
trailing parameter of the same name (`threadgroup float* s`), and every helper that calls it (directly or through
others) takes and forwards it too. `extern __shared__` arrays of helpers are one dynamic array, sized like the
kernel's own (`SDATA_SIZE`, a template constant from the launch's shared-memory bytes). The CUDA-backend port keeps
the helpers as written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..source.cfamily import parse_bytes, shared_from_declaration
from ..source.models import KernelInfo, SharedDecl
from .analysis import walk


@dataclass
class HelperShared:
    kernel_decls: list[str] = field(default_factory=list)          # Metal declarations for the kernel's body
    params: dict[str, list[tuple[str, str]]] = field(default_factory=dict)   # helper -> [(Metal param, call arg)]
    hoisted: dict[str, set[str]] = field(default_factory=dict)     # helper -> its own declarations that go
    tg_names: dict[str, set[str]] = field(default_factory=dict)    # helper -> names that are threadgroup memory
    dynamic: dict[str, str] = field(default_factory=dict)          # hoisted extern array -> its size constant
    shared: list[SharedDecl] = field(default_factory=list)         # the hoisted arrays (budget, dynamic sizes)
    problems: list[tuple[str, int, str]] = field(default_factory=list)   # (construct, line, message)
    alias: dict[str, str] = field(default_factory=dict)   # the kernel's extern array -> the buffer it views
    file_scope: list[SharedDecl] = field(default_factory=list)   # file-scope __shared__ variables the kernel declares


def _declarations(h: KernelInfo) -> list[tuple[SharedDecl, list[str]]]:
    """(shared declaration, its qualifiers other than __shared__) in helper `h`'s body."""
    data = h.text.encode()
    root = parse_bytes(data, "cuda").root_node
    out = []
    for n in walk(root):
        if n.type != "declaration":
            continue
        words = [data[c.start_byte:c.end_byte].decode() for c in n.children
                 if c.type in ("type_qualifier", "storage_class_specifier")]
        if "__shared__" not in words:
            continue
        quals = [w for w in words if w in ("volatile", "const")]
        for sd in shared_from_declaration(n, data, data, "cuda"):
            sd.line = h.range.start.line + n.start_point[0]
            out.append((sd, quals))
    return out


def _template_bindings(k: KernelInfo, helpers: list[KernelInfo]) -> dict[str, dict[str, str]]:
    """helper -> {its template parameter: the one argument every call in `k`'s call tree gives it explicitly}
    (`matrixMulCUDA<16>(...)` from a kernel, or a caller helper's own bound parameter). A parameter given two
    different arguments, or deduced (no explicit `<...>`), stays unbound: the kernel cannot declare an array
    sized by it."""
    from ..sim.preprocess import split_top
    bodies = [(None, k.body)] + [(h.name, h.body) for h in helpers]
    kernel_templates = {t.name for t in k.template_params}
    out: dict[str, dict[str, str]] = {}
    for _ in range(len(helpers) + 1):      # callers' bindings resolve their callees' arguments: iterate
        changed = False
        for h in helpers:
            if not h.template_params:
                continue
            seen: dict[str, set[str]] = {}
            complete = True
            for caller, body in bodies:
                if caller == h.name:
                    continue
                for m in re.finditer(rf"(?<![\w.>:]){re.escape(h.name)}\s*(<)?", body):
                    if m.group(1) is None:
                        if re.match(r"\s*\(", body[m.end():]):
                            complete = False       # deduced arguments: not known here
                        continue
                    depth, i = 1, m.end()
                    while i < len(body) and depth:
                        depth += {"<": 1, ">": -1}.get(body[i], 0)
                        i += 1
                    args = [a.strip() for a in split_top(body[m.end():i - 1]) if a.strip()]
                    bound = out.get(caller, {}) if caller else {}
                    for tp, a in zip(h.template_params, args):
                        if caller is not None:
                            a = re.sub(r"[A-Za-z_]\w*", lambda w: bound.get(w.group(0), w.group(0)), a)
                            free = set(re.findall(r"[A-Za-z_]\w*", a)) & (
                                {t.name for t in next(x for x in helpers if x.name == caller).template_params}
                                - kernel_templates)
                            if free:
                                complete = False
                                continue
                        seen.setdefault(tp.name, set()).add(a)
                    for tp in h.template_params[len(args):]:
                        if tp.default is not None:
                            seen.setdefault(tp.name, set()).add(tp.default.strip())
            if not complete:
                continue
            new = {name: next(iter(vals)) for name, vals in seen.items() if len(vals) == 1}
            if new != out.get(h.name):
                out[h.name] = new
                changed = True
        if not changed:
            break
    return out


def _bind(text: str, binding: dict[str, str], wrap: bool = True) -> str:
    """`text` with the template parameters of `binding` replaced by their arguments (parenthesized in sizes)."""
    if not binding:
        return text
    return re.sub(r"[A-Za-z_]\w*", lambda w: ((f"({binding[w.group(0)]})" if wrap else binding[w.group(0)])
                                               if w.group(0) in binding else w.group(0)), text)


_FILE_SCOPE_CONTAINERS = {"translation_unit", "preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif",
                          "linkage_specification", "namespace_definition", "declaration_list"}


def file_shared(source: str) -> list[tuple[SharedDecl, list[str]]]:
    """(declaration, its qualifiers other than __shared__) of every `__shared__` variable declared at file scope
    (outside any function: `__shared__ float tile[64];`, `extern __shared__ float buf[];`), in file order; `line`
    is the declaration's 0-based line in `source`."""
    if "__shared__" not in source:
        return []
    data = source.encode()
    root = parse_bytes(data, "cuda").root_node
    out = []
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type == "declaration":
            words = [data[c.start_byte:c.end_byte].decode() for c in n.children
                     if c.type in ("type_qualifier", "storage_class_specifier")]
            if "__shared__" in words:
                quals = [w for w in words if w in ("volatile", "const")]
                for sd in shared_from_declaration(n, data, data, "cuda"):
                    sd.line = n.start_point[0]
                    out.append((sd, quals))
            continue
        if n.type in _FILE_SCOPE_CONTAINERS:
            stack.extend(reversed(n.children))
    return out


def _uses(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", text) is not None


def helper_shared(k: KernelInfo, helpers: list[KernelInfo], metal_type, kernel_words: set[str],
                  file_scope: list[tuple[SharedDecl, list[str]]] = ()) -> HelperShared:
    """What the Metal port does with the shared arrays `helpers` (callees first) declare, and with the file-scope
    `__shared__` variables (`file_scope`, as file_shared gives them) the kernel or its helpers use: the kernel
    declares each under its own name, and a helper that names one takes it as a parameter of that name (its callers
    forward it). `metal_type` maps a CUDA element type to Metal's, `kernel_words` are the identifiers of the kernel's
    own text (names to avoid)."""
    res = HelperShared()
    kernel_templates = {t.name for t in k.template_params}
    taken = set(kernel_words)
    names = {h.name for h in helpers}
    own: dict[str, list[tuple[str, str]]] = {}     # helper -> [(hoisted name, its Metal param)]
    dyn_type: dict[str, str] = {}
    # the kernel's own extern __shared__ array: every extern array of a helper is the same buffer (CUDA)
    kdyn = next((s for s in k.shared if s.dynamic), None)
    bindings = _template_bindings(k, helpers) if any(h.template_params for h in helpers) else {}
    for h in helpers:
        for sd, quals in _declarations(h):
            helper_templates = {t.name for t in h.template_params} - kernel_templates
            binding = {n: v for n, v in bindings.get(h.name, {}).items() if n in helper_templates}
            if binding:
                # the kernel instantiates the helper with fixed arguments (`helper<16>(...)`): the kernel declares
                # the array with them
                sd = sd.model_copy(update={"type": _bind(sd.type, binding, wrap=False),
                                           "sizes": [_bind(x, binding) for x in sd.sizes]})
            used = set(re.findall(r"[A-Za-z_]\w*", " ".join([sd.type] + sd.sizes)))
            if used & helper_templates:
                res.problems.append((sd.text.strip(), sd.line,
                                     f"shared array '{sd.name}' of helper {h.name} is sized or typed by the helper's "
                                     f"template parameter {sorted(used & helper_templates)[0]}: Metal declares "
                                     "threadgroup arrays in the kernel only, which does not know it; declare the "
                                     "array in the kernel and pass it to the helper"))
                continue
            elem = " ".join(quals + [metal_type(sd.type)])
            if sd.dynamic:
                hoisted = sd.name if sd.name not in taken or sd.name in dyn_type else f"ks_tg_{sd.name}"
                if hoisted in dyn_type and dyn_type[hoisted] != elem:
                    res.problems.append((sd.text.strip(), sd.line,
                                         f"extern __shared__ '{sd.name}' is declared as {dyn_type[hoisted]} and as "
                                         f"{elem}: in CUDA both alias one buffer, in Metal they would be two "
                                         "arrays; use one type"))
                    continue
                if hoisted not in dyn_type and kdyn is not None:
                    # one buffer for the kernel's extern array and the helpers': declared first, the kernel's array
                    # and each helper's a view of it
                    buf = "ks_dynamic_shared"
                    if buf not in res.alias.values():
                        kelem = metal_type(kdyn.type)
                        size = f"{kdyn.name.upper()}_SIZE"
                        res.dynamic[kdyn.name] = size
                        res.kernel_decls.append(f"threadgroup {kelem} {buf}[{size}];")
                        res.alias[kdyn.name] = buf
                    dyn_type[hoisted] = elem
                    res.kernel_decls.append(f"threadgroup {elem}* {hoisted} = (threadgroup {elem}*){buf};")
                    taken.add(hoisted)
                elif hoisted not in dyn_type:
                    dyn_type[hoisted] = elem
                    size = f"{hoisted.upper()}_SIZE"
                    res.dynamic[hoisted] = size
                    res.kernel_decls.append(f"threadgroup {elem} {hoisted}[{size}];")
                    res.shared.append(SharedDecl(name=hoisted, type=sd.type, sizes=[""], dynamic=True,
                                                 line=sd.line, text=sd.text))
                    taken.add(hoisted)
            else:
                hoisted = sd.name if sd.name not in taken else f"ks_tg_{h.name}_{sd.name}"
                taken.add(hoisted)
                dims = "".join(f"[{s}]" for s in sd.sizes)
                res.kernel_decls.append(f"threadgroup {elem} {hoisted}{dims};")
                res.shared.append(SharedDecl(name=hoisted, type=sd.type, sizes=list(sd.sizes), dynamic=False,
                                             line=sd.line, text=sd.text))
            param = _tg_param(elem, sd.sizes)
            own.setdefault(h.name, []).append((hoisted, param))
            res.hoisted.setdefault(h.name, set()).add(sd.name)
            res.tg_names.setdefault(h.name, set()).add(sd.name)
            # the helper itself names it as declared; its callers pass (and forward) the kernel's name
            res.params.setdefault(h.name, []).append((param.format(name=sd.name), hoisted))
    for sd, quals in file_scope:
        users = [h for h in helpers if _uses(h.body, sd.name) and sd.name not in res.hoisted.get(h.name, set())
                 and not any(p.name == sd.name for p in h.params)]
        if any(s.name == sd.name for s in k.shared) or not (_uses(k.body, sd.name) or users):
            continue   # the kernel's own array of that name hides it, or nobody uses it
        if any(x.name == sd.name for x in res.shared):
            continue   # declared twice at file scope (an `extern` declaration and its definition)
        elem = " ".join(quals + [metal_type(sd.type)])
        if sd.dynamic:
            kdyn_own = next((s for s in k.shared if s.dynamic), None)
            if kdyn_own is not None:   # one buffer in CUDA: a view of the kernel's own extern array
                res.kernel_decls.append(f"threadgroup {elem}* {sd.name} = (threadgroup {elem}*){kdyn_own.name};")
            else:
                size = f"{sd.name.upper()}_SIZE"
                res.dynamic[sd.name] = size
                res.kernel_decls.append(f"threadgroup {elem} {sd.name}[{size}];")
            res.shared.append(SharedDecl(name=sd.name, type=sd.type, sizes=[""], dynamic=kdyn_own is None,
                                         line=sd.line, text=sd.text))
            param = f"threadgroup {elem}* {{name}}"
        else:
            dims = "".join(f"[{x}]" for x in sd.sizes)
            res.kernel_decls.append(f"threadgroup {elem} {sd.name}{dims};")
            res.shared.append(SharedDecl(name=sd.name, type=sd.type, sizes=list(sd.sizes), dynamic=False,
                                         line=sd.line, text=sd.text))
            param = _tg_param(elem, sd.sizes)
        res.file_scope.append(sd)
        for h in users:
            own.setdefault(h.name, []).append((sd.name, param))
            res.tg_names.setdefault(h.name, set()).add(sd.name)
            res.params.setdefault(h.name, []).append((param.format(name=sd.name), sd.name))
    if not own:
        return res
    # callers take their callees' arrays too (helpers come callees first; iterate for safety)
    calls = {h.name: set(re.findall(r"[A-Za-z_]\w*", h.body)) & names - {h.name} for h in helpers}
    params_of = {h.name: {hoisted: param for hoisted, param in own.get(h.name, [])} for h in helpers}
    changed = True
    while changed:
        changed = False
        for h in helpers:
            for c in calls[h.name]:
                for hoisted, param in params_of.get(c, {}).items():
                    if hoisted not in params_of[h.name]:
                        params_of[h.name][hoisted] = param
                        res.params.setdefault(h.name, []).append((param.format(name=hoisted), hoisted))
                        res.tg_names.setdefault(h.name, set()).add(hoisted)
                        changed = True
    return res


def _tg_param(elem: str, sizes: list) -> str:
    """The Metal parameter (a format string over {name}) through which a helper takes a threadgroup array of
    `sizes` (none: a reference; one: a pointer; more: a pointer to rows)."""
    if not sizes:
        return f"threadgroup {elem}& {{name}}"
    if len(sizes) == 1:
        return f"threadgroup {elem}* {{name}}"
    return f"threadgroup {elem} (*{{name}})" + "".join(f"[{x}]" for x in sizes[1:])
