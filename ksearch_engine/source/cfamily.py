"""Finds kernels and device helpers in CUDA (`.cu`/`.cuh`) and Metal (`.metal`) text with tree-sitter.

CUDA is parsed with tree-sitter-cuda. Metal is parsed with tree-sitter-cpp after its address-space
keywords (`device`, `constant`, `threadgroup`, `thread`, `kernel`) are blanked out with spaces of the
same length, so every byte offset still points into the original text.

Speed: the whole file is parsed once; everything after that starts from a few byte-level searches
(`__global__`, `<<<`, `__shared__`) and looks up the node at that offset, so a 5 MB file costs little
more than tree-sitter's own parse.
"""
from __future__ import annotations

import re
from functools import lru_cache

import tree_sitter as ts
import tree_sitter_cpp
import tree_sitter_cuda

from .models import Diagnostic, KernelInfo, LaunchSite, Param, ParseResult, Range, SharedDecl, TemplateParam
from .textpos import TextIndex

METAL_ADDRESS_SPACES = ("device", "constant", "threadgroup", "thread")
_METAL_BLANK = re.compile(rb"\b(device|constant|threadgroup|thread|kernel)\b(?=\s+[A-Za-z_])")
_QUALIFIER_WORDS = {"const", "volatile", "__restrict__", "__restrict", "restrict", *METAL_ADDRESS_SPACES}
_CONTAINERS = {"translation_unit", "linkage_specification", "namespace_definition", "declaration_list",
               "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "ERROR"}
_MAX_ERRORS = 25


@lru_cache(maxsize=None)
def language(dialect: str) -> ts.Language:
    """tree-sitter Language for 'cuda' or 'metal' (C++ grammar)."""
    if dialect == "cuda":
        return ts.Language(tree_sitter_cuda.language())
    return ts.Language(tree_sitter_cpp.language())


def blank_metal(data: bytes) -> bytes:
    """Replaces Metal address-space keywords by spaces of the same length (offsets are kept)."""
    return _METAL_BLANK.sub(lambda m: b" " * len(m.group(0)), data)


# Numeric initializer lists (lookup tables) hold no kernels but cost most of the parse of a big
# generated file: their contents are blanked (same length) before parsing.
_NUMERIC_TABLE = re.compile(rb"(?<=\{)[0-9a-fA-FxXuUlL.,+\-\s]{4096,}(?=\})")


def blank_tables(data: bytes) -> bytes:
    if len(data) < 65536:
        return data
    return _NUMERIC_TABLE.sub(lambda m: b" " * len(m.group(0)), data)


def parse_bytes(data: bytes, dialect: str) -> ts.Tree:
    """Parses CUDA or Metal bytes (Metal is blanked first). Never raises on bad input."""
    if dialect == "metal":
        data = blank_metal(data)
    return ts.Parser(language(dialect)).parse(blank_tables(data))


def text(node, data: bytes) -> str:
    return data[node.start_byte:node.end_byte].decode("utf-8", errors="replace")


# --------------------------------------------------------------------------------------------
# declarations


def function_name_node(fn):
    """The identifier node naming a function_definition, or None."""
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return None, None
    name = decl.child_by_field_name("declarator")
    while name is not None and name.type in ("qualified_identifier", "template_function"):
        name = name.child_by_field_name("name")
    return name, decl


def declarator_info(decl, data: bytes) -> dict:
    """Walks a (pointer/reference/array/attributed/init) declarator down to its identifier."""
    info = {"name": "", "pointer": False, "reference": False, "qualifiers": [], "attribute": None,
            "sizes": [], "name_node": None}
    node = decl
    while node is not None:
        t = node.type
        if t in ("identifier", "field_identifier"):
            info["name"] = text(node, data)
            info["name_node"] = node
            break
        if t == "pointer_declarator" or t == "abstract_pointer_declarator":
            info["pointer"] = True
            info["qualifiers"] += [text(c, data) for c in node.named_children if c.type == "type_qualifier"]
        elif t in ("reference_declarator", "abstract_reference_declarator"):
            info["reference"] = True
        elif t in ("array_declarator", "abstract_array_declarator"):
            info["pointer"] = True
            size = node.child_by_field_name("size")
            info["sizes"].insert(0, text(size, data) if size is not None else "")
        elif t == "attributed_declarator":
            attrs = [text(c, data) for c in node.named_children if c.type == "attribute_declaration"]
            info["attribute"] = " ".join(attrs) or None
            node = node.named_children[0] if node.named_children else None
            continue
        nxt = node.child_by_field_name("declarator")
        if nxt is None:
            named = [c for c in node.named_children if c.type not in ("type_qualifier",)]
            nxt = named[0] if named and t in ("reference_declarator",) else None
        node = nxt
    return info


def param_from_node(node, data: bytes, orig: bytes) -> Param | None:
    if node.type not in ("parameter_declaration", "optional_parameter_declaration"):
        return None
    type_node = node.child_by_field_name("type")
    base = text(type_node, orig) if type_node is not None else ""
    quals = [text(c, data) for c in node.named_children if c.type == "type_qualifier"]
    decl = node.child_by_field_name("declarator")
    info = declarator_info(decl, data) if decl is not None else declarator_info(None, data)
    # `float *const out` is a const pointer to writable floats: a `const` after the `*` is not the pointee's
    quals += [q for q in info["qualifiers"] if not (q == "const" and info["pointer"])]
    # Metal address spaces were blanked for parsing: read them back from the original text.
    # Blanked Metal keywords precede the node's start: widen back to the previous `(` or `,`.
    start = node.start_byte
    while start > 0 and data[start - 1:start] not in (b"(", b","):
        start -= 1
    written = orig[start:node.end_byte].decode("utf-8", errors="replace").strip()
    if re.search(r"^[ \t]*#", written, re.M):
        # `#ifdef TESTING` / `#endif` lines inside a parameter list: the parser folds the directive's words into
        # the type; the parameter is what is left without them (as the condition that holds keeps it)
        written = "\n".join(ln for ln in written.splitlines() if not ln.lstrip().startswith("#")).strip()
        head = re.sub(r"\[[^\]]*\]|[*&]", " ", written)
        head = re.sub(rf"\b{re.escape(info['name'])}\s*$", "", head.strip()) if info["name"] else head
        base = " ".join(w for w in head.split() if w not in _QUALIFIER_WORDS)
    words = re.findall(r"[A-Za-z_]\w*", written.split("[[")[0])
    for w in words:
        if w in METAL_ADDRESS_SPACES and w not in quals:
            quals.append(w)
    if base in METAL_ADDRESS_SPACES:  # blanking did not apply (e.g. `device` followed by `*`)
        base = ""
    ordered = [w for w in words if w in _QUALIFIER_WORDS]
    quals = sorted(set(quals), key=lambda q: ordered.index(q) if q in ordered else 99)
    return Param.model_construct(name=info["name"], type=base, qualifiers=quals, pointer=info["pointer"],
                 reference=info["reference"], attribute=info["attribute"], text=written)


def template_params(tmpl, data: bytes) -> list[TemplateParam]:
    if tmpl is None:
        return []
    plist = tmpl.child_by_field_name("parameters")
    out = []
    for p in (plist.named_children if plist is not None else []):
        default = p.child_by_field_name("default_value") or p.child_by_field_name("default_type")
        dflt = text(default, data) if default is not None else None
        if p.type in ("type_parameter_declaration", "optional_type_parameter_declaration",
                      "variadic_type_parameter_declaration"):
            names = [c for c in p.named_children if c.type == "type_identifier"]
            name = text(p.child_by_field_name("name") or names[0], data) if (names or p.child_by_field_name("name")) else ""
            out.append(TemplateParam(name=name, kind="typename", default=dflt, text=text(p, data)))
        elif p.type in ("parameter_declaration", "optional_parameter_declaration"):
            t = p.child_by_field_name("type")
            d = p.child_by_field_name("declarator")
            out.append(TemplateParam(name=declarator_info(d, data)["name"] if d is not None else "",
                                     kind=text(t, data) if t is not None else "", default=dflt,
                                     text=text(p, data)))
    return out


def shared_from_declaration(decl, data: bytes, orig: bytes, dialect: str) -> list[SharedDecl]:
    type_node = decl.child_by_field_name("type")
    ty = text(type_node, data) if type_node is not None else ""
    dynamic = any(c.type == "storage_class_specifier" and text(c, data) == "extern" for c in decl.children)
    out = []
    for d in decl.children_by_field_name("declarator"):
        info = declarator_info(d, data)
        out.append(SharedDecl.model_construct(name=info["name"], type=ty, sizes=info["sizes"], dynamic=dynamic,
                              line=decl.start_point[0], text=text(decl, orig)))
    return out


# --------------------------------------------------------------------------------------------
# the file


def _iter_functions(node, namespaces: list | None = None):
    """(function_definition, enclosing template_declaration or None) in file order, through namespaces,
    extern "C" blocks, #if blocks and error nodes (iterative: nesting depth is the file's choice). With a list
    given as `namespaces`, it holds the enclosing namespaces' names of the function last yielded."""
    stack = [(iter(node.children), None, [])]
    while stack:
        children, template, ns = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            continue
        t = child.type
        if t == "function_definition":
            if namespaces is not None:
                namespaces[:] = ns
            yield child, template
        elif t == "template_declaration":
            stack.append((iter(child.children), child, ns))
        elif t == "namespace_definition":
            name_node = child.child_by_field_name("name")
            name = re.sub(r"\s+", "", (name_node.text or b"").decode("utf-8", "replace")) \
                if name_node is not None else ""
            stack.append((iter(child.children), None, ns + ([p for p in name.split("::") if p] or [""])))
        elif t in _CONTAINERS:
            stack.append((iter(child.children), None, ns))


def _fn_tokens(fn, data: bytes) -> set[str]:
    toks = set()
    for c in fn.children:
        if c.type in ("compound_statement", "function_declarator"):
            break
        if not c.is_named or c.type in ("storage_class_specifier", "type_qualifier", "attribute_declaration",
                                         "attribute_specifier", "ms_declspec_modifier"):
            toks.add(text(c, data))
    return toks


class _FileScan:
    def __init__(self, orig: bytes, dialect: str, language_name: str, path: str | None):
        self.orig = orig
        self.dialect = dialect
        self.lang_name = language_name
        self.path = path
        self.data = blank_metal(orig) if dialect == "metal" else orig
        self.index = TextIndex(orig)
        self.diagnostics: list[Diagnostic] = []

    def function_info(self, fn, tmpl, shift: int = 0, data: bytes | None = None) -> KernelInfo | None:
        """KernelInfo of one function_definition; `data` is the buffer it was parsed from when that
        is a snippet starting at byte `shift` of the file (error recovery)."""
        data = self.data if data is None else data
        orig = self.orig if not shift else self.orig[shift:shift + len(data)].ljust(len(data), b"}")
        name_node, fdecl = function_name_node(fn)
        if name_node is None:
            return None
        toks = _fn_tokens(fn, data)
        head = orig[fn.start_byte:fn.start_byte + 64]
        lead = None
        if self.dialect == "cuda":
            qualifier = "__global__" if "__global__" in toks else "__device__" if "__device__" in toks else ""
        else:
            # `kernel` was blanked out before parsing, so it sits just before the node's start.
            before = orig[max(0, fn.start_byte - 16):fn.start_byte]
            lead = re.search(rb"\bkernel\s*$", before)
            is_kernel = re.match(rb"\s*(\[\[\s*kernel\s*\]\]|kernel\b)", head) is not None or lead is not None
            qualifier = "kernel" if is_kernel else ""
        start_node = tmpl if tmpl is not None else fn
        body = fn.child_by_field_name("body")
        params = []
        plist = fdecl.child_by_field_name("parameters")
        for p in (plist.named_children if plist is not None else []):
            prm = param_from_node(p, data, orig)
            if prm is not None:
                params.append(prm)
        rtype = fn.child_by_field_name("type")
        lb = next((c for c in fn.children if c.type == "launch_bounds"), None)
        s0, e0 = start_node.start_byte + shift, min(fn.end_byte + shift, len(self.orig))
        if self.dialect == "metal" and tmpl is None and qualifier == "kernel" and lead is not None:
            s0 -= len(before) - lead.start()
        if shift or s0 != start_node.start_byte:
            rng = self.index.range(s0, e0)
        else:
            rng = Range.model_construct(start=self.index.node_range(start_node).start,
                                        end=self.index.node_range(fn).end)
        info = KernelInfo(
            name=text(name_node, data),
            language=self.lang_name,  # type: ignore[arg-type]
            qualifier=qualifier,
            return_type=text(rtype, orig) if rtype is not None else "void",
            params=params,
            template_params=template_params(tmpl, data),
            byte_range=(s0, e0),
            range=rng,
            name_range=self.index.node_range(name_node, shift),
            body=text(body, orig)[1:-1] if body is not None else "",
            body_byte_range=(body.start_byte + 1 + shift, body.end_byte - 1 + shift) if body is not None else None,
            text=self.orig[s0:e0].decode("utf-8", "replace"),
            launch_bounds=text(lb, orig) if lb is not None else None,
        )
        if body is not None and qualifier in ("__global__", "kernel"):
            info.shared = self.shared_in(body, data, orig, shift)
        if body is not None and (body.is_missing or (body.child_count and body.children[-1].is_missing)):
            self.diagnostics.append(Diagnostic(
                message=f"kernel '{info.name}' is incomplete: its closing brace is missing (truncated file?)",
                line=self.index.line_of(e0), severity="error"))
        return info

    def shared_in(self, body, data: bytes, orig: bytes, shift: int) -> list[SharedDecl]:
        word = rb"__shared__" if self.dialect == "cuda" else rb"\bthreadgroup\b"
        out: list[SharedDecl] = []
        seen = set()
        for m in re.finditer(word, orig[body.start_byte:body.end_byte]):
            off = body.start_byte + m.end()
            while off < body.end_byte and data[off:off + 1].isspace():
                off += 1  # blanked Metal keyword: look at the type that follows it
            node = body.descendant_for_byte_range(off, off + 1)
            while node is not None and node.type != "declaration" and node != body:
                node = node.parent
            if node is None or node.type != "declaration" or node.id in seen:
                continue
            seen.add(node.id)
            line = node.start_point[0] if not shift else self.index.line_of(node.start_byte + shift)
            for sd in shared_from_declaration(node, data, orig, self.dialect):
                sd.line = line
                out.append(sd)
        return out

    def launches(self, root) -> list[LaunchSite]:
        if self.dialect != "cuda":
            return []
        out = []
        for m in re.finditer(rb"<<<", self.data):
            node = root.descendant_for_byte_range(m.start(), m.end())
            while node is not None and node.type != "kernel_call_syntax":
                if node.type in ("function_definition", "translation_unit"):
                    node = None
                    break
                node = node.parent
            if node is None or node.parent is None or node.parent.type != "call_expression":
                continue
            call = node.parent
            fn = call.child_by_field_name("function")
            targs: list[str] = []
            while fn is not None and fn.type in ("qualified_identifier", "template_function"):
                if fn.type == "template_function":   # ns::kernel<float, 256>
                    al = fn.child_by_field_name("arguments")
                    targs = [text(a, self.data) for a in (al.named_children if al is not None else [])
                             if a.type != "comment"]
                fn = fn.child_by_field_name("name")
            if fn is None:
                continue
            cfg = [text(c, self.data) for c in node.named_children if c.type != "comment"]
            if len(cfg) < 2:
                continue
            args_node = call.child_by_field_name("arguments")
            args = [text(a, self.data) for a in (args_node.named_children if args_node is not None else [])
                    if a.type != "comment"]
            host = call.parent
            while host is not None and host.type != "function_definition":
                host = host.parent
            host_name = None
            if host is not None:
                hn, _ = function_name_node(host)
                host_name = text(hn, self.data) if hn is not None else None
            out.append(LaunchSite(
                kernel=text(fn, self.data), template_args=targs, grid=cfg[0], block=cfg[1],
                shared_mem=cfg[2] if len(cfg) > 2 else None, stream=cfg[3] if len(cfg) > 3 else None,
                args=args, line=call.start_point[0], range=self.index.node_range(call),
                byte_range=(call.start_byte, call.end_byte),
                host_function=host_name,
                host_byte_range=(host.start_byte, host.end_byte) if host is not None else None))
        return out

    def syntax_errors(self, root) -> None:
        if not root.has_error:
            return
        found = []
        stack = [root]
        while stack and len(found) < _MAX_ERRORS:
            n = stack.pop()
            if n.type == "ERROR" or n.is_missing:
                found.append(n)
                continue
            stack.extend(c for c in reversed(n.children) if c.has_error or c.is_missing)
        for n in found:
            if n.is_missing:
                msg = f"syntax error: missing '{n.type}'"
            else:
                snippet = text(n, self.orig).strip().splitlines()[0][:40] if text(n, self.orig).strip() else ""
                msg = f"syntax error near '{snippet}'" if snippet else "syntax error"
            self.diagnostics.append(Diagnostic(message=msg, line=n.start_point[0], severity="error"))

    def preamble(self, root) -> list[str]:
        return self._entries(_unguarded(root.children, self.orig))

    def _entries(self, children, nested: bool = False, depth: int = 0) -> list[str]:
        """File-scope entries of `children`; those inside `namespace N {...}` come wrapped in it, with a `using
        namespace N;` after (the ports put the kernel's body and helpers at global scope)."""
        out = []
        skip_to = -1
        for c in children:
            if c.type == "namespace_definition" and self.dialect == "cuda":
                name_node, body = c.child_by_field_name("name"), c.child_by_field_name("body")
                if body is None or depth >= _MAX_NAMESPACE_DEPTH:   # (deeper: nothing read, no recursion limit)
                    continue
                name = re.sub(r"\s+", "", text(name_node, self.orig)) if name_node is not None else ""
                parts = [p for p in name.split("::") if p] or [""]
                out += [e if e.lstrip().startswith("#") else _in_namespaces(e, parts)   # (nested ones: using
                        for e in self._entries(_unguarded(body.children, self.orig), True, depth + 1)]   # directives are
                continue                                                                    # transitive)
            if nested and c.type == "template_declaration" and re.match(
                    r"\s*template\s*<\s*[^\s>{};][^{};]*>\s*(?:struct|class|union)\b(?:[^;()]|\([^()]*\))*\{", text(c, self.orig)):
                # a class template in a namespace (file-scope ones: translate/headers.with_aggregates); not an
                # explicit specialization (`template <>`), whose primary template may be a bare declaration
                t = text(c, self.orig).rstrip()
                out.append(t if t.endswith(";") else t + ";")
                continue
            if c.start_byte < skip_to:
                continue
            if c.type == "ERROR" and re.fullmatch(rb"\s*typedef\s+(?:struct|union)\s+(?:__align__|alignas)\s*\(\s*\d+\s*\)\s*",
                                                  self.orig[c.start_byte:c.end_byte]):
                # `typedef struct __align__(16) {...} Name;` parses as an ERROR, a block and a statement
                m = re.compile(rb"\{").search(self.orig, c.end_byte)
                end = _brace_end(self.orig, m.start())[0] if m else -1
                tail = re.compile(rb"\s*(\w+)\s*;").match(self.orig, end) if end > 0 else None
                if tail:
                    out.append(self.orig[c.start_byte:tail.end()].decode("utf-8", "replace"))
                    skip_to = tail.end()
                continue
            if c.type in ("preproc_def", "preproc_function_def"):
                out.append(text(c, self.orig).rstrip())
            elif c.type in ("preproc_if", "preproc_ifdef") and _only_directives(text(c, self.orig)):
                out.append(text(c, self.orig).rstrip())   # #ifdef X / #define N 32 / #else / #define N 16 / #endif
            elif c.type in ("declaration", "function_definition") and re.match(
                    r"\s*(?:typedef\s+)?(struct|union|enum|class)\b[^(;]*\{|\s*(struct|union|class)\s+__align__",
                    text(c, self.orig)):
                t = text(c, self.orig).rstrip()   # `struct __align__(8) P {...};` parses as a function
                end = self.orig[c.end_byte:c.end_byte + 64].decode("utf-8", "replace")
                out.append(t + (";" if not t.endswith(";") and end.lstrip().startswith(";") else ""))
            elif (c.type in ("declaration", "type_definition", "struct_specifier", "alias_declaration",
                             "enum_specifier") or nested and c.type in ("class_specifier", "union_specifier")
                  and not c.has_error) and c.type != "function_definition":   # (file-scope classes and unions:
                # translate/headers.with_aggregates, by braces, whatever the parser made of them)
                t = text(c, self.orig)
                if c.type in ("enum_specifier", "struct_specifier", "class_specifier", "union_specifier") \
                        and not t.rstrip().endswith(";"):
                    t = t.rstrip() + ";"
                if c.type != "declaration" or re.search(r"\b(constexpr|__constant__|const)\b", t):
                    if "(" not in t.split("=")[0] or c.type != "declaration":
                        out.append(t.rstrip())
        return out

    # -- recovery ---------------------------------------------------------------------------

    def recover(self, known: list[KernelInfo]) -> list[KernelInfo]:
        """Re-parses the neighbourhood of each kernel keyword that the main parse did not yield."""
        pat = rb"\b__global__\b" if self.dialect == "cuda" else rb"(\[\[\s*kernel\s*\]\]|\bkernel\s+void\b)"
        spans = [k.byte_range for k in known]
        out: list[KernelInfo] = []
        for m in re.finditer(pat, self.orig):
            off = m.start()
            if any(s <= off < e for s, e in spans):
                continue
            line_start = self.orig.rfind(b"\n", 0, off) + 1
            if b"//" in self.orig[line_start:off] or b"#define" in self.orig[line_start:off]:
                continue
            start = off
            before = self.orig[max(0, off - 300):off]
            tm = re.search(rb"template\s*<[^;{}]*>\s*$", before)
            if tm:
                start = off - (len(before) - tm.start())
            end, missing = _brace_end(self.orig, off)
            snippet = self.orig[start:end]
            if missing:
                # Truncated inside the body: keep whole statements only, then close the open braces.
                cut = max(snippet.rfind(b";"), snippet.rfind(b"}"), snippet.rfind(b"{"))
                if cut > 0:
                    snippet = snippet[:cut + 1]
                _, missing = _brace_end(snippet, off - start)
                snippet += b"}" * missing
            tree = parse_bytes(snippet, self.dialect)
            data = blank_metal(snippet) if self.dialect == "metal" else snippet
            for fn, tmpl in _iter_functions(tree.root_node):
                info = self.function_info(fn, tmpl, shift=start, data=data)
                if info is None or info.qualifier not in ("__global__", "kernel"):
                    continue
                line = self.index.line_of(off)
                self.diagnostics.append(Diagnostic(
                    message=(f"kernel '{info.name}' recovered from a damaged region"
                             + (f" ({missing} closing brace(s) missing)" if missing else "")),
                    line=line, severity="warning"))
                out.append(info)
                spans.append(info.byte_range)
                break
        return out


def _brace_end(data: bytes, off: int) -> tuple[int, int]:
    """End offset of the brace block opened after `off`, and how many braces are left open at EOF."""
    i = data.find(b"{", off)
    if i == -1:
        return len(data), 0
    depth = 0
    n = len(data)
    while i < n:
        c = data[i]
        if c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return i + 1, 0
        elif c == 0x2F and i + 1 < n and data[i + 1] == 0x2F:
            j = data.find(b"\n", i)
            i = n if j == -1 else j
            continue
        elif c == 0x2F and i + 1 < n and data[i + 1] == 0x2A:
            j = data.find(b"*/", i + 2)
            i = n if j == -1 else j + 2
            continue
        elif c in (0x22, 0x27):
            j = i + 1
            while j < n and data[j] != c and data[j] != 0x0A:
                j += 2 if data[j] == 0x5C else 1
            i = j + 1
            continue
        i += 1
    return n, depth


def scan_c_family(data: bytes, dialect: str, language_name: str, path: str | None) -> ParseResult:
    """Kernels, helpers, launch sites and diagnostics of one CUDA or Metal file."""
    scan = _FileScan(data, dialect, language_name, path)
    tree = parse_bytes(data, dialect)
    root = tree.root_node
    kernels: list[KernelInfo] = []
    helpers: list[KernelInfo] = []
    n_functions = 0
    ns: list[str] = []
    for fn, tmpl in _iter_functions(root, ns):
        n_functions += 1
        if dialect == "cuda":
            toks = _fn_tokens(fn, scan.data)
            if not ({"__global__", "__device__"} & toks):
                continue
        info = scan.function_info(fn, tmpl)
        if info is None:
            continue
        info.namespaces = list(ns)
        (kernels if info.qualifier in ("__global__", "kernel") else helpers).append(info)
    scan.syntax_errors(root)
    if root.has_error:
        kernels += scan.recover(kernels)
    by_kernel: dict[str, list[LaunchSite]] = {}
    for ls in scan.launches(root):
        by_kernel.setdefault(ls.kernel, []).append(ls)
    for k in kernels:
        k.launches = by_kernel.get(k.name, [])
    if not kernels:
        word = "__global__" if dialect == "cuda" else "kernel"
        if n_functions == 0 and (root.has_error or not data.strip()):
            scan.diagnostics.append(Diagnostic(
                message=f"no {dialect.upper() if dialect == 'cuda' else 'Metal'} kernel found: this file does "
                        "not look like C/C++ source (no function definitions could be parsed)",
                line=0, severity="error"))
        else:
            scan.diagnostics.append(Diagnostic(message=f"no {word} kernel in this file", line=0, severity="info"))
    return ParseResult(language=language_name, kernels=kernels, helpers=helpers,  # type: ignore[arg-type]
                       diagnostics=scan.diagnostics, path=path,
                       source=data.decode("utf-8", errors="replace"), preamble=scan.preamble(root))


_MAX_NAMESPACE_DEPTH = 32


def _in_namespaces(entry: str, parts: list[str]) -> str:
    """`entry` inside `namespace a { namespace b {` ... `} }` (an anonymous one for ""), then `using namespace a;
    using namespace a::b;` so that code outside (the ports' kernel and helpers) names its types as the namespace's
    own code does."""
    opens = " ".join(f"namespace {p} {{" if p else "namespace {" for p in parts)
    closes = "}" * len(parts)
    using = [f"using namespace {'::'.join(parts[:i + 1])};" for i in range(len(parts)) if all(parts[:i + 1])]
    return f"{opens}\n{entry}\n{closes}" + ("\n" + " ".join(using) if using else "")


def in_namespaces_of(fn: KernelInfo, definition: str) -> str:
    """A helper's definition as the ports emit it: inside the namespaces it was written in (the kernel calls it
    as `ns::helper(...)`, or unqualified from inside the namespace, which the `using` lines after it serve)."""
    return _in_namespaces(definition, fn.namespaces) if fn.namespaces else definition


def _unguarded(children, orig: bytes):
    """File-scope nodes, looking inside an include guard (`#ifndef X_H` + `#define X_H` ... `#endif`): a header's
    (or a .cuh kernel file's) macros, types and constants are all inside one."""
    out = []
    for c in children:
        if c.type == "preproc_ifdef" and orig[c.start_byte:c.start_byte + 8].startswith(b"#ifndef"):
            name = c.child_by_field_name("name")
            inner = [x for x in c.children if x.is_named and (name is None or x.start_byte != name.start_byte)]
            first = inner[0] if inner else None
            fname = first.child_by_field_name("name") if first is not None and first.type == "preproc_def" else None
            if name is not None and fname is not None and \
                    orig[name.start_byte:name.end_byte] == orig[fname.start_byte:fname.end_byte] and \
                    not any(x.type in ("preproc_else", "preproc_elif") for x in inner):
                out.extend(_unguarded(inner[1:], orig))
                continue
        out.append(c)
    return out


def _only_directives(block: str) -> bool:
    """A conditional block made of preprocessor lines only (defines chosen by #if/#ifdef)."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", "", block, flags=re.S)
    lines = [ln.strip() for ln in code.replace("\\\n", " ").splitlines() if ln.strip()]
    return bool(lines) and all(ln.startswith("#") for ln in lines) and any("define" in ln for ln in lines)
