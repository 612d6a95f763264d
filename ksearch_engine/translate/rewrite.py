"""Rewrites CUDA kernel bodies and device helpers into Metal by walking their tree-sitter tree.

Each node is either replaced by a rule from the table (identifier, function, call pattern, type,
qualifier), handled by one of the table's `special` rules (dynamic shared memory, address spaces of
local pointers, device helpers), reported as unsupported, or rebuilt from its rewritten children with
the original text between them kept as written.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

from pydantic.dataclasses import dataclass as pdataclass

from ..source.cfamily import parse_bytes
from .rules import Rule, RuleTable

from .launch import CUDA_ATOMICS as _CUDA_ATOMICS  # noqa: E402
from .metal_support import THIS_GRID, THIS_THREAD_BLOCK, THREAD_ATTRIBUTES  # noqa: E402

_ADDRESS_SPACES = {"device", "threadgroup", "constant", "thread"}
_HELPER_WORDS = {"__device__", "__host__", "__forceinline__", "__noinline__", "__inline__"}
MAX_DEPTH = 20000   # tree levels; real kernels stay under 100
# THE rename table of the Metal port (specs/translation.yaml ident.metal_keyword): user identifiers that are keywords,
# reserved attribute words or builtin type names in Metal Shading Language but not in CUDA. Variables, functions,
# typedef/struct names and struct fields so named get a trailing underscore, in the kernel, its helpers and the
# header's file-scope entries alike (wmma's `fragment` type too: translate/wmma.py)
METAL_KEYWORDS = {"device", "constant", "threadgroup", "thread", "kernel", "vertex", "fragment", "threadgroup_imageblock",
                  "ray_data", "object_data", "visible", "stage_in", "patch", "sampler", "imageblock",
                  "texture1d", "texture1d_array", "texture2d", "texture2d_array", "texture3d", "texturecube",
                  "texturecube_array", "texture2d_ms", "depth2d", "depth2d_array", "depthcube", "depth2d_ms",
                  }


@pdataclass
class Issue:
    """Something the translator could not do faithfully: the CUDA construct, its 0-based line, why."""
    construct: str
    line: int
    message: str
    severity: str = "error"   # error: the port is wrong or will not compile; warning: check it; info
    # "kernel": the kernel's code; "launch_config": only the sizes that `kernel(*inputs)` infers from host code
    # (the CUDA-convention `launch()` takes the launch as given, so these never block a checked port);
    # "inputs": only the `kernel(*inputs)` wrapper's translation has it (launch() translates without it)
    scope: str = "kernel"

    def model_dump(self, **_) -> dict:
        return {"construct": self.construct, "line": self.line, "message": self.message, "severity": self.severity,
                "scope": self.scope}


@dataclass
class RewriteContext:
    """What the rewriter needs to know about the kernel around the text it rewrites."""
    shared_names: set[str] = field(default_factory=set)
    dynamic_shared: dict[str, str] = field(default_factory=dict)   # array name -> size constant
    outputs: set[str] = field(default_factory=set)
    atomic: bool = False
    helper_pointer_spaces: dict[str, dict[int, str]] = field(default_factory=dict)  # helper -> {param idx: space}
    # launch() path: atomics become ks_atomic_* helpers that cast the address to atomic<T> (launch.py)
    cast_atomics: bool = False
    # Metal: helpers that read thread attributes take them as trailing parameters (metal_support.py)
    helper_attrs: dict[str, list[str]] = field(default_factory=dict)
    # Metal: shared arrays that helpers declare live in the kernel (helpershared.py): helper -> [(its trailing
    # parameter, what a call passes)], and helper -> the names whose declarations leave it
    helper_params: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    hoisted: dict[str, set[str]] = field(default_factory=dict)
    dynamic_alias: dict[str, str] = field(default_factory=dict)   # kernel's extern array -> the buffer declared first
    fragment_types: set[str] = field(default_factory=set)   # Metal: typedef names of wmma fragments (wmma.py)
    # Metal: classes whose objects all live in threadgroup memory (classmembers.py): their non-static member
    # functions are declared `threadgroup` (their data members count as threadgroup memory there), and reference or
    # pointer parameters of any of their type names (tg_types) are `threadgroup` ones
    tg_classes: set[str] = field(default_factory=set)
    tg_types: set[str] = field(default_factory=set)
    tg_data: dict[str, set[str]] = field(default_factory=dict)
    # the names of the structs and classes the kernel uses (classmembers.py): `cub::Sum()` builds an object, it calls
    # no member function of that name (none takes the thread attributes there)
    class_names: set[str] = field(default_factory=set)


class Rewriter:
    def __init__(self, table: RuleTable, line_offset: int = 0, context: RewriteContext | None = None):
        self.table = table
        self.ids = table.by_kind("identifier")
        self.functions = table.by_kind("function")
        self.calls = table.by_kind("call")
        self.types = table.by_kind("type")
        self.qualifiers = table.by_kind("qualifier")
        self.unsupported = table.by_kind("unsupported")
        self.special = {r.id for r in table.rules if r.kind == "special"}
        self.line_offset = line_offset
        self.ctx = context or RewriteContext()
        self.issues: list[Issue] = []
        self.applied: list[str] = []
        self.data = b""
        self.grid_objects: set[str] = set()
        self.nested_replace: dict[int, str] = {}
        self.helper_name = ""   # the helper being rewritten
        self._tg_refs = False   # in a threadgroup member function: local references into its data are threadgroup

    # -- entry points ---------------------------------------------------------------------------
    def rewrite_function(self, text: str, helper: bool) -> tuple[str, str]:
        """(rewritten helper function, "") for a helper; ("", rewritten body without braces) for a kernel."""
        self.data = text.encode()
        root = parse_bytes(self.data, "cuda").root_node
        depth = _depth(root)
        if depth > MAX_DEPTH:
            self.issues.append(Issue(construct="nesting", line=self.line_offset, severity="error",
                                     message=f"blocks nested {depth} deep: too deep to translate (limit {MAX_DEPTH})"))
            return text, ""
        # the walk recurses once or twice per tree level; Python 3.11 frames do not use the C stack
        limit = sys.getrecursionlimit()
        if 3 * depth + 200 > limit:
            sys.setrecursionlimit(3 * depth + 200)
        try:
            return self._rewrite_root(root, helper)
        finally:
            sys.setrecursionlimit(limit)

    def _rewrite_root(self, root, helper: bool) -> tuple[str, str]:
        fn = _first(root, "function_definition")
        if fn is None:
            return self._emit(root), ""
        self.grid_objects = self._find_grid_objects(fn)
        self._fn_text = self._text(fn)
        if helper:
            prefix = ""
            if fn.parent is not None and fn.parent.type == "template_declaration":   # `template <uint dir>` stays
                prefix = self.data[fn.parent.start_byte:fn.start_byte].decode("utf-8", errors="replace")
            return prefix + self._emit_helper(fn), ""
        body = fn.child_by_field_name("body")
        inner = self._emit_children(body, skip_braces=True) if body is not None else ""
        return "", inner

    def rewrite_snippet(self, text: str) -> str:
        """Rewrites a run of statements (used by the rule examples and for small fragments)."""
        wrapped = "__global__ void __snippet() {\n" + text + "\n}"
        saved = self.line_offset
        self.line_offset -= 1
        _, body = self.rewrite_function(wrapped, helper=False)
        self.line_offset = saved
        return body.strip("\n")

    # -- helpers --------------------------------------------------------------------------------
    def _line(self, node) -> int:
        return node.start_point[0] + self.line_offset

    def _text(self, node) -> str:
        return self.data[node.start_byte:node.end_byte].decode("utf-8", errors="replace")

    def _apply(self, rule: Rule) -> None:
        if rule.id not in self.applied:
            self.applied.append(rule.id)

    def _report(self, construct: str, node, message: str, severity: str = "error") -> None:
        issue = Issue(construct=construct, line=self._line(node), message=message, severity=severity)
        if all((i.construct, i.line, i.message) != (issue.construct, issue.line, issue.message) for i in self.issues):
            self.issues.append(issue)

    def _grid_synced(self) -> bool:
        """Whether the function being rewritten syncs a grid group (`grid.sync()`, `this_grid().sync()`,
        `cg::sync(grid)`): Metal has no grid-wide barrier, so this_grid() is then reported."""
        text = getattr(self, "_fn_text", "")
        names = "|".join(re.escape(n) for n in self.grid_objects) or "(?!)"
        return bool(re.search(rf"\b(?:{names})\s*\.\s*sync\s*\(|this_grid\s*\(\s*\)\s*\.\s*sync\b"
                              rf"|\bsync\s*\(\s*(?:{names})\s*\)", text))

    def _find_grid_objects(self, fn) -> set[str]:
        names = set()
        text = self._text(fn)
        for m in re.finditer(r"(?:grid_group|auto)\s+(\w+)\s*=\s*[\w:]*this_grid\s*\(", text):
            names.add(m.group(1))
        return names

    # -- the walk -------------------------------------------------------------------------------
    def _emit_children(self, node, skip_braces: bool = False, before: dict | None = None,
                       replace: dict | None = None) -> str:
        """Rebuilds `node` from its children's rewrites, keeping the text between them."""
        children = node.children
        if skip_braces and children and children[0].type == "{":
            start = children[0].end_byte
            children = children[1:]
            end = children[-1].start_byte if children and children[-1].type == "}" else node.end_byte
            if children and children[-1].type == "}":
                children = children[:-1]
        else:
            start, end = node.start_byte, node.end_byte
        out = []
        pos = start
        dropped = False
        for c in children:
            gap = self.data[pos:c.start_byte].decode("utf-8", errors="replace")
            if dropped and gap.strip() == "":
                prev = next((o for o in reversed(out) if o), "")
                gap = "" if (not prev or prev[-1] in " \t\n(") else gap
            out.append(gap)
            if before and c.id in before:
                out.append(before[c.id])
            piece = replace[c.id] if replace and c.id in replace else self._emit(c)
            dropped = piece == "" and c.end_byte > c.start_byte
            out.append(piece)
            pos = c.end_byte
        tail = self.data[pos:end].decode("utf-8", errors="replace")
        out.append(tail)
        return "".join(out)

    def _emit(self, node) -> str:
        if node.id in self.nested_replace:   # set by _emit_helper for nodes below the function's children
            return self.nested_replace.pop(node.id)
        t = node.type
        if t == "preproc_arg" and node.parent is not None \
                and node.parent.type in ("preproc_def", "preproc_function_def"):
            return self._emit_macro_body(node)
        if node.child_count == 0 or t in ("identifier", "type_identifier", "primitive_type", "sized_type_specifier",
                                          "field_identifier"):
            return self._emit_leaf(node)
        if t == "type_qualifier":
            word = self._text(node).strip()
            rule = self.qualifiers.get(word)
            if rule is not None:
                self._apply(rule)
                return rule.metal or ""
            return self._emit_children(node)
        if t == "function_definition" and _in_class_body(node):
            return self._emit_member(node)
        if t == "call_expression":
            return self._emit_call(node)
        if t in ("gnu_asm_expression", "asm_statement"):
            rule = self.unsupported.get("asm")
            reason = rule.reason if rule else "inline PTX assembly has no Metal equivalent"
            self._report("asm(...)", node, reason)
            return self._text(node)
        if t == "declaration":
            return self._emit_declaration(node)
        if t == "field_declaration" and self.ctx.tg_types:
            return self._emit_field(node)
        if t == "type_descriptor":
            return self._emit_type_descriptor(node)
        if t == "assignment_expression" and self.ctx.atomic:
            return self._emit_atomic_store(node)
        return self._emit_children(node)

    def _emit_macro_body(self, node) -> str:
        """A `#define` body goes through the same rules as code: it is parsed as an expression (or statements)
        and rewritten; a body that does not parse as either is kept as written."""
        text = self._text(node)
        body = text.strip()
        if not body or not re.search(r"[A-Za-z_]", body):
            return text
        lead = text[:len(text) - len(text.lstrip())]
        trail = text[len(text.rstrip()):]
        rule = self.types.get(" ".join(body.split()))
        if rule is not None and rule.metal:   # a type (`#define fp double`): what the type is in Metal
            self._apply(rule)
            return lead + rule.metal + trail
        cont = body.replace("\\\n", "\n")   # line continuations: the parser sees plain newlines
        for wrapped, cut in ((f"__ks_macro_body({cont});", ("__ks_macro_body(", ");")), (cont, None)):
            sub = Rewriter(self.table, line_offset=self._line(node), context=self.ctx)
            data = ("__global__ void __m() {\n" + wrapped + "\n}").encode()
            root = parse_bytes(data, "cuda").root_node
            if root.has_error:
                continue
            out = sub.rewrite_snippet(wrapped)
            if cut is not None:
                out = out.strip()
                if not (out.startswith(cut[0]) and out.endswith(cut[1])):
                    continue
                out = out[len(cut[0]):-len(cut[1])]
            if out.strip() == cont.strip():
                return text
            for i in sub.issues:
                if all((i.construct, i.line, i.message) != (j.construct, j.line, j.message) for j in self.issues):
                    self.issues.append(i)
            for a in sub.applied:
                if a not in self.applied:
                    self.applied.append(a)
            return lead + out.replace("\n", " \\\n") + trail
        return text

    def _emit_leaf(self, node) -> str:
        t = node.type
        text = self._text(node)
        if t == "identifier":
            rule = self.ids.get(text)
            if rule is not None and not _is_declared_name(node):
                self._apply(rule)
                return rule.metal or ""
            if text in METAL_KEYWORDS and "ident.metal_keyword" in self.special:
                if "ident.metal_keyword" not in self.applied:
                    self.applied.append("ident.metal_keyword")
                return text + "_"
            return text
        if t == "field_identifier" and text in METAL_KEYWORDS and "ident.metal_keyword" in self.special:
            self._apply_special("ident.metal_keyword")   # a struct field `int kernel;` and its uses `it.kernel`
            return text + "_"
        if t in ("type_identifier", "primitive_type", "sized_type_specifier"):
            norm = " ".join(text.split())
            rule = self.types.get(norm)
            if rule is not None:
                self._apply(rule)
                if rule.severity:
                    self._report(norm, node, rule.notes or f"{norm} is not available in Metal", rule.severity)
                return rule.metal or ""
            if t == "type_identifier" and text in METAL_KEYWORDS and "ident.metal_keyword" in self.special:
                # a type named like a Metal keyword: renamed like a variable (wmma::fragment -> translate/wmma.py)
                self._apply_special("tc.wmma" if text == "fragment" and "tc.wmma" in self.special
                                    else "ident.metal_keyword")
                return text + "_"
            return text
        return text

    def _call_name(self, fn) -> str:
        if fn is None:
            return ""
        if fn.type in ("identifier", "qualified_identifier"):
            return self._text(fn)
        if fn.type == "template_function":
            return self._text(fn.child_by_field_name("name"))
        return ""

    def _emit_call(self, node) -> str:
        fn = node.child_by_field_name("function")
        args_node = node.child_by_field_name("arguments")
        name = self._call_name(fn)
        # `ns::helper<W>(...)`: the function's own name, without its namespaces and template arguments
        short = re.sub(r"\s*<(?:[^<>]|<[^<>]*>)*>\s*$", "", name).split("::")[-1]
        if any(c.type == "kernel_call_syntax" for c in node.children):
            rule = next((r for r in self.table.rules if r.id == "unsupported.dynamic_parallelism"), None)
            self._report(f"{name}<<<...>>>", node,
                         rule.reason if rule and rule.reason else "kernels cannot launch kernels in Metal")
            return self._text(node)
        if short == "this_grid" and not (args_node is not None and args_node.named_children) \
                and "cg.this_grid" in self.special and not self._grid_synced():
            # a grid group read for its ranks and sizes only (grid-stride loops): built from the thread attributes
            self._apply_special("cg.this_grid")
            return THIS_GRID
        if short == "this_grid" or (fn is not None and fn.type == "field_expression"
                                    and self._text(fn.child_by_field_name("field")) == "sync"
                                    and (self._text(fn.child_by_field_name("argument")) in self.grid_objects
                                         or "this_grid" in self._text(fn.child_by_field_name("argument")))):
            rule = next((r for r in self.table.rules if r.id == "unsupported.grid_sync"), None)
            if rule is not None:
                self._report("grid.sync()" if short != "this_grid" else "this_grid()", node,
                             rule.reason or "grid-wide synchronization is not available in Metal")
            return self._emit_children(node)
        if short in ("clock", "clock64") and name in ("clock", "clock64", "::clock") \
                and not (args_node is not None and args_node.named_children) and "time.clock" in self.special:
            self._apply_special("time.clock")
            return "ks_clock(ks_clock_ticks)"
        if short == "this_thread_block" and "cg.this_thread_block" in self.special and \
                len([a for a in (args_node.named_children if args_node is not None else [])
                     if a.type != "comment"]) <= 1:   # the one-argument form takes a block_tile_memory's scratch
            self._apply_special("cg.this_thread_block")
            return THIS_THREAD_BLOCK
        if self.ctx.cast_atomics and name in _CUDA_ATOMICS:
            args = [a for a in (args_node.named_children if args_node is not None else []) if a.type != "comment"]
            idents = {self._text(x) for x in _walk(args[0]) if x.type == "identifier"} if args else set()
            suffix = "_tg" if idents & self.ctx.shared_names else ""
            if "atomic.cast" not in self.applied:
                self.applied.append("atomic.cast")
            return f"ks_atomic_{_CUDA_ATOMICS[name]}{suffix}(" + ", ".join(self._emit(a) for a in args) + ")"
        if name in self.unsupported:
            rule = self.unsupported[name]
            if rule.metal is not None:   # dropped with a note (printf, assert): the port computes the same
                self._report(f"{name}(...)", node, rule.reason or f"{name} is dropped in Metal",
                             rule.severity or "warning")
                self._apply(rule)
                return rule.metal
            self._report(f"{name}(...)", node, rule.reason or f"{name} has no Metal equivalent")
            return self._emit_children(node)
        args = [a for a in (args_node.named_children if args_node is not None else []) if a.type != "comment"]
        if name in self.calls:
            rule = self.calls[name]
            pattern = rule.arg_names()
            if rule.requires == "atomic_outputs" and args and "unsupported.shared_atomics" in self.special:
                idents = {self._text(x) for x in _walk(args[0]) if x.type == "identifier"}
                if idents & self.ctx.shared_names:
                    if "unsupported.shared_atomics" not in self.applied:
                        self.applied.append("unsupported.shared_atomics")
                    self._report(f"{name}(...)", node, "atomic on shared memory: Metal needs the array declared "
                                 "`threadgroup atomic<T>` and every access to it atomic (atomic_load_explicit / "
                                 "atomic_store_explicit); port this array by hand")
            required = sum(1 for _, opt in pattern if not opt)
            if required <= len(args) <= len(pattern):
                bound = {pname: self._emit(a) for (pname, _), a in zip(pattern, args)}
                raw = {pname: self._text(a).strip() for (pname, _), a in zip(pattern, args)}
                if rule.check is not None and rule.check.arg in raw and raw[rule.check.arg] not in rule.check.allowed \
                        and rule.id.startswith("warp.shfl") and rule.check.arg == "width":
                    # a shuffle within sub-groups of `width` lanes: Metal's 32-lane shuffle with CUDA's lane rules
                    kind = rule.id.split(".", 1)[1].replace("_legacy", "").replace("shfl", "")
                    value, other = (bound.get(n, "") for n, _ in (pattern[-3], pattern[-2]))
                    self._apply_special("warp.shfl_width")
                    return f"ks_shfl{kind}_w({value}, {other}, {bound['width']}, thread_index_in_simdgroup)"
                if rule.check is not None and rule.check.arg in raw and raw[rule.check.arg] not in rule.check.allowed:
                    self._report(f"{name}(..., {rule.check.arg}={raw[rule.check.arg]})", node,
                                 f"{rule.check.message} (width {raw[rule.check.arg]}; only "
                                 f"{' or '.join(rule.check.allowed)} is translated faithfully)")
                self._apply(rule)
                out = rule.metal or ""
                for pname, _ in pattern:
                    out = re.sub(r"\$" + pname + r"\b", lambda _m, v=bound.get(pname, ""): v, out)
                return out
            self._report(f"{name}(...)", node,
                         f"{name} called with {len(args)} arguments; rule {rule.id} expects {rule.cuda}", "warning")
        if name in self.functions and fn is not None:
            rule = self.functions[name]
            self._apply(rule)
            return self._emit_children(node, replace={fn.id: rule.metal or ""})
        # helper calls: pointer arguments to shared arrays decide the helper's parameter address space
        out = self._emit_children(node)
        if fn is not None and fn.type == "field_expression":   # `obj.f(...)`, `this->f(...)`: a member function
            field_node = fn.child_by_field_name("field")
            if field_node is not None and field_node.type == "template_method":
                field_node = field_node.child_by_field_name("name")
            short = self._text(field_node).strip() if field_node is not None else ""
        attrs = list(self.ctx.helper_attrs.get(short, [])) + [a for _, a in self.ctx.helper_params.get(short, [])]
        if short in self.ctx.class_names and (fn is None or fn.type != "field_expression"):
            attrs = []   # a constructor call (a functor such as cub::Sum()): no member function of that name
        if attrs and out.endswith(")"):
            inner = out[:-1]
            sep = "" if inner.rstrip().endswith("(") else ", "
            out = inner + sep + ", ".join(attrs) + ")"
        return out

    def _apply_special(self, rule_id: str) -> None:
        if rule_id not in self.applied:
            self.applied.append(rule_id)

    # -- special rules --------------------------------------------------------------------------
    def _emit_declaration(self, node) -> str:
        words = [self._text(c).strip() for c in node.children if c.type in ("storage_class_specifier", "type_qualifier")]
        is_shared = "__shared__" in words
        if is_shared:
            for d in node.children_by_field_name("declarator"):
                self.ctx.shared_names.add(_decl_name(d, self))
            gone = self.ctx.hoisted.get(self.helper_name, set())
            names = [_decl_name(d, self) for d in node.children_by_field_name("declarator")]
            if names and all(n in gone for n in names):   # the kernel declares it; this helper takes it
                self._apply_special("mem.helper_shared")
                return f"/* ksearch: threadgroup {', '.join(names)}: a parameter (Metal declares it in the kernel) */"
        if is_shared and "extern" in words and "mem.dynamic_shared" in self.special:
            type_node = node.child_by_field_name("type")
            decls = node.children_by_field_name("declarator")
            if type_node is not None and decls:
                pieces = []
                if all(_decl_name(d, self) in self.ctx.dynamic_alias for d in decls):   # a view of the one buffer
                    t = self._emit(type_node)
                    self._apply_special("mem.dynamic_shared")
                    return " ".join(f"threadgroup {t}* {n} = (threadgroup {t}*){self.ctx.dynamic_alias[n]};"
                                    for n in (_decl_name(d, self) for d in decls))
                for d in decls:
                    name = _decl_name(d, self)
                    size = self.ctx.dynamic_shared.get(name) or f"{name.upper()}_SIZE"
                    self.ctx.dynamic_shared[name] = size
                    pieces.append(f"{name}[{size}]")
                self.applied.append("mem.dynamic_shared") if "mem.dynamic_shared" not in self.applied else None
                if "mem.shared" in {r.id for r in self.table.rules}:
                    self._apply(self.table.get("mem.shared"))
                return f"threadgroup {self._emit(type_node)} {', '.join(pieces)};"
        if is_shared:
            return self._emit_children(node)
        before = self._pointer_space_prefix(node, node.child_by_field_name("type"), node)
        if before is None and self._tg_refs:
            before = self._tg_reference_prefix(node)
        return self._emit_children(node, before=before)

    def _tg_reference_prefix(self, node) -> dict | None:
        """{type node id: 'threadgroup '} for a local reference bound to threadgroup memory (`T& c = data[i];` in
        a member function of a class whose objects live there): MSL references carry their address space."""
        type_node = node.child_by_field_name("type")
        decls = node.children_by_field_name("declarator")
        if type_node is None or not decls:
            return None
        refs = [d for d in decls if d.type == "reference_declarator" or (
            d.type == "init_declarator" and getattr(d.child_by_field_name("declarator"), "type", "")
            == "reference_declarator")]
        if not refs:
            return None
        words = {self._text(c).strip() for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")}
        if words & _ADDRESS_SPACES or self._text(type_node) in _ADDRESS_SPACES:
            return None
        idents = set(re.findall(r"[A-Za-z_]\w*", " ".join(self._text(d) for d in refs)))
        if not idents & self.ctx.shared_names:
            return None
        return {type_node.id: "threadgroup "}

    def _emit_field(self, node) -> str:
        """Metal: a data member pointing or referring to a class whose objects all live in threadgroup memory
        (`TempStorage* temp;`, classmembers.py) is a threadgroup pointer / reference."""
        tnode = node.child_by_field_name("type")
        decls = node.children_by_field_name("declarator")
        if tnode is None or not decls or not all(d.type in ("pointer_declarator", "reference_declarator")
                                                 for d in decls):
            return self._emit_children(node)
        words = {self._text(c).strip() for c in node.children if c.type == "type_qualifier"}
        bare = re.sub(r"\s*<.*$", "", self._text(tnode)).split("::")[-1].strip()
        if words & _ADDRESS_SPACES or bare not in self.ctx.tg_types:
            return self._emit_children(node)
        first = next(c for c in node.children if c.type != "comment")
        return self._emit_children(node, before={first.id: "threadgroup "})

    def _emit_member(self, fn) -> str:
        """A member function defined in a struct/class body, for Metal (classmembers.py): one that reads thread
        attributes or uses arrays the kernel declares takes them as trailing parameters, like a helper; one of a class
        whose objects live in threadgroup memory is declared `threadgroup` (a reference it returns is a threadgroup
        one); reference and pointer parameters of such a class are threadgroup ones."""
        ctx = self.ctx
        if not (ctx.helper_attrs or ctx.helper_params or ctx.tg_classes or ctx.tg_types):
            return self._emit_children(fn)
        cls = fn.parent
        while cls is not None and cls.type not in ("class_specifier", "struct_specifier", "union_specifier"):
            cls = cls.parent
        cname_node = cls.child_by_field_name("name") if cls is not None else None
        cname = self._text(cname_node).split("::")[-1] if cname_node is not None else ""
        d = fn.child_by_field_name("declarator")
        fdecl = function_declarator(d)
        if fdecl is None:
            return self._emit_children(fn)
        nnode = fdecl.child_by_field_name("declarator")
        fname = self._text(nnode).split("::")[-1].strip() if nnode is not None and nnode.type in (
            "identifier", "field_identifier") else ""
        static = any(c.type == "storage_class_specifier" and self._text(c) == "static" for c in fn.children)
        ctor = fname == cname or (nnode is not None and nnode.type == "destructor_name")
        attrs = list(ctx.helper_attrs.get(fname, [])) if fname and not ctor else []
        hparams = list(ctx.helper_params.get(fname, [])) if fname and not ctor else []
        tg = cname in ctx.tg_classes and not static and not ctor
        plist = fdecl.child_by_field_name("parameters")
        before: dict = {}
        if plist is not None and (attrs or hparams or ctx.tg_types):
            from .classmembers import tg_reference_params
            text = tg_reference_params(self._emit(plist), ctx.tg_types)
            if attrs or hparams:
                inner = text[:text.rfind(")")]
                empty = inner.strip() in ("(", "(void")
                inner = "(" if empty else inner
                extra = ", ".join([f"{THREAD_ATTRIBUTES[a]} {a}" for a in attrs] + [x for x, _ in hparams])
                text = inner + ("" if empty else ", ") + extra + ")"
                self._apply_special("fn.helper_thread_attributes")
            self.nested_replace[plist.id] = text
        body = fn.child_by_field_name("body")
        if tg and body is not None:
            before[body.id] = "threadgroup "
            tnode = fn.child_by_field_name("type")
            words = {self._text(c).strip() for c in fn.children if c.type == "type_qualifier"}
            if d is not None and d.type == "reference_declarator" and tnode is not None \
                    and not words & _ADDRESS_SPACES and self._text(tnode) not in _ADDRESS_SPACES:
                before[tnode.id] = "threadgroup "   # `T& operator[](int i)`: a reference into threadgroup memory
        saved_name, saved_refs = self.helper_name, self._tg_refs
        added = (ctx.tg_data.get(cname, set()) - ctx.shared_names) if tg else set()
        ctx.shared_names |= added
        self.helper_name, self._tg_refs = fname, tg
        try:
            return self._emit_children(fn, before=before or None)
        finally:
            ctx.shared_names -= added
            self.helper_name, self._tg_refs = saved_name, saved_refs

    def _pointer_space_prefix(self, node, type_node, value_scope) -> dict | None:
        """{type node id: 'device '} when a declaration/type declares a pointer without an address space."""
        if "mem.local_pointer_space" not in self.special or type_node is None:
            return None
        if not _has_pointer(node):
            return None
        words = {self._text(c).strip() for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")}
        if words & _ADDRESS_SPACES or self._text(type_node) in _ADDRESS_SPACES:
            return None
        idents = set(re.findall(r"[A-Za-z_]\w*", self._text(value_scope)))
        space = "threadgroup" if idents & self.ctx.shared_names else "device"
        if "mem.local_pointer_space" not in self.applied:
            self.applied.append("mem.local_pointer_space")
        return {type_node.id: f"{space} "}

    def _emit_type_descriptor(self, node) -> str:
        # casts such as (float4*)p or reinterpret_cast<const float4*>(p) need an address space too
        scope = node.parent.parent if node.parent is not None and node.parent.parent is not None else node
        if node.parent is not None and node.parent.type == "cast_expression":
            scope = node.parent
        elif node.parent is not None and node.parent.type == "template_argument_list" and scope.type == \
                "template_function" and scope.parent is not None and scope.parent.type == "call_expression":
            scope = scope.parent   # reinterpret_cast<f128*>(params): the space of what is cast (a threadgroup array)
        before = self._pointer_space_prefix(node, node.child_by_field_name("type"), scope)
        return self._emit_children(node, before=before)

    def _emit_atomic_store(self, node) -> str:
        left = node.child_by_field_name("left")
        op = node.child_by_field_name("operator")
        op_text = self._text(op) if op is not None else "="
        target = left.child_by_field_name("argument") if left is not None and left.type == "subscript_expression" else None
        if target is None or self._text(target) not in self.ctx.outputs:
            return self._emit_children(node)
        right = self._emit(node.child_by_field_name("right"))
        addr = "&" + self._emit(left)
        fn = {"=": "atomic_store_explicit", "+=": "atomic_fetch_add_explicit", "-=": "atomic_fetch_sub_explicit"}.get(op_text)
        if fn is None:
            self._report(f"{self._text(node)}", node, "this update of an atomic output has no atomic form; port it by hand")
            return self._emit_children(node)
        self._report(self._text(left), node, "outputs are atomic<T> in this port (the kernel uses atomics): "
                     f"this write became {fn}", "info")
        return f"{fn}({addr}, {right}, memory_order_relaxed)"

    def _emit_helper(self, fn) -> str:
        rule_on = "fn.device_helper" in self.special
        replace: dict = {}
        # `__device__ inline T f()` already says inline: the CUDA words then just go
        first = not any(self._text(c).strip() == "inline" for c in fn.children
                        if c.type not in ("compound_statement", "function_declarator"))
        for c in fn.children:
            if c.type in ("compound_statement", "function_declarator"):
                break
            word = self._text(c).strip()
            if word in _HELPER_WORDS and rule_on:
                replace[c.id] = "inline" if first else ""
                first = False
        if rule_on and replace:
            if "fn.device_helper" not in self.applied:
                self.applied.append("fn.device_helper")
        # helper pointer parameters need an address space
        name_node = fn.child_by_field_name("declarator")
        fname = ""
        while name_node is not None and name_node.type != "function_declarator":
            name_node = name_node.child_by_field_name("declarator")
        if name_node is not None:
            fname = self._text(name_node.child_by_field_name("declarator"))
            fname = fname.split("::")[-1].split("<")[0].strip()
            self.helper_name = fname
            plist = name_node.child_by_field_name("parameters")
            spaces = self.ctx.helper_pointer_spaces.get(fname, {})
            idx = 0
            for p in (plist.named_children if plist is not None else []):
                if p.type != "parameter_declaration":
                    continue
                tnode = p.child_by_field_name("type")
                if tnode is not None and _has_pointer(p) and "mem.local_pointer_space" in self.special:
                    words = {self._text(c).strip() for c in p.children if c.type == "type_qualifier"}
                    if not (words & _ADDRESS_SPACES):
                        replace[tnode.id] = f"{spaces.get(idx, 'device')} " + self._emit(tnode)
                elif tnode is not None and (re.search(r"\bfragment\s*<", self._text(tnode))
                                            or self._text(tnode).split("::")[-1].strip() in self.ctx.fragment_types) \
                        and getattr(p.child_by_field_name("declarator"), "type", "") == "reference_declarator":
                    # a wmma fragment by reference (translate/wmma.py): Metal references need an address space
                    words = {self._text(c).strip() for c in p.children if c.type == "type_qualifier"}
                    if not (words & _ADDRESS_SPACES):
                        replace[tnode.id] = "thread " + self._emit(tnode)
                idx += 1
            attrs = self.ctx.helper_attrs.get(fname)
            hparams = self.ctx.helper_params.get(fname, [])
            if (attrs or hparams) and plist is not None:
                self.nested_replace.update(replace)
                replace = {}
                text = self._emit(plist)
                if self.ctx.tg_types:   # `Tile& t` of a class whose objects live in threadgroup memory
                    from .classmembers import tg_reference_params
                    text = tg_reference_params(text, self.ctx.tg_types)
                inner = text[:text.rfind(")")]
                empty = inner.strip() in ("(", "(void")
                inner = "(" if empty else inner
                extra = ", ".join([f"{THREAD_ATTRIBUTES[a]} {a}" for a in attrs or []] + [d for d, _ in hparams])
                replace[plist.id] = inner + ("" if empty else ", ") + extra + ")"
                self._apply_special("fn.helper_thread_attributes")
            elif self.ctx.tg_types and plist is not None:
                from .classmembers import tg_reference_params
                self.nested_replace.update(replace)
                replace = {}
                replace[plist.id] = tg_reference_params(self._emit(plist), self.ctx.tg_types)
        top = {c.id for c in fn.children}
        self.nested_replace.update({i: v for i, v in replace.items() if i not in top})
        return self._emit_children(fn, replace={i: v for i, v in replace.items() if i in top})


def function_declarator(d):
    """The function_declarator under a function's declarator (through `*`, `&` and parentheses), or None."""
    while d is not None and d.type != "function_declarator":
        nxt = d.child_by_field_name("declarator")
        if nxt is None and d.type in ("reference_declarator", "pointer_declarator", "parenthesized_declarator"):
            nxt = next((c for c in reversed(d.named_children) if c.type.endswith("declarator")), None)
        d = nxt
    return d


def _in_class_body(node) -> bool:
    """Whether a function definition is a member function defined in a struct/class body."""
    p = node.parent
    if p is not None and p.type == "template_declaration":
        p = p.parent
    return p is not None and p.type == "field_declaration_list"


def _depth(root) -> int:
    best, stack = 0, [(root, 1)]
    while stack:
        n, d = stack.pop()
        best = max(best, d)
        stack.extend((c, d + 1) for c in n.children)
    return best


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def _first(node, type_name):
    for c in node.children:
        if c.type == type_name:
            return c
        if c.type == "template_declaration":
            f = _first(c, type_name)
            if f is not None:
                return f
    return None


def _has_pointer(node) -> bool:
    stack = [c for c in node.children]
    while stack:
        n = stack.pop()
        if n.type in ("pointer_declarator", "abstract_pointer_declarator"):
            return True
        if n.type in ("init_declarator", "array_declarator", "parenthesized_declarator", "reference_declarator"):
            stack.extend(n.children[:1] if n.type == "init_declarator" else n.children)
    return False


def _decl_name(d, rw: Rewriter) -> str:
    node = d
    while node is not None and node.type not in ("identifier", "field_identifier"):
        nxt = node.child_by_field_name("declarator")
        node = nxt
    return rw._text(node) if node is not None else "smem"


def _is_declared_name(node) -> bool:
    """True when an identifier is the name being declared (never rename those)."""
    p = node.parent
    if p is None:
        return False
    if p.type in ("init_declarator", "array_declarator", "pointer_declarator", "function_declarator",
                  "reference_declarator") and p.child_by_field_name("declarator") == node:
        return True
    if p.type == "parameter_declaration" and p.child_by_field_name("declarator") == node:
        return True
    if p.type == "declaration" and node in p.children_by_field_name("declarator"):
        return True
    return False
