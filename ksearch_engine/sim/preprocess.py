"""Source rewriting that lets g++ compile GPU kernel text against ksim.h.

Every rewrite keeps the number of lines, so compiler diagnostics keep the kernel's own line numbers.
* GPU-only includes (``<metal_stdlib>``, ``<cuda_runtime.h>``, MLX's headers...) are blanked.
* ``extern __shared__ T name[];`` becomes a pointer to the run's dynamic shared memory.
* ``__shared__`` / ``threadgroup`` variable declarations become ``static`` (one copy for the block that
  is running); the same words in front of pointers and references (address-space qualifiers) go away.
* ``strip_host_code`` blanks host-only functions (``main``, launch wrappers) of a whole ``.cu`` file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import cub

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"][^\n]*$', re.M)
_GPU_HEADER = re.compile(
    r"^(metal_\w+|cuda\w*(\.h|\.hpp|/.*)?|cooperative_groups.*|mma\.h|cub/.*|thrust/.*|mlx/.*|curand.*|"
    r"cublas.*|cufft.*|device_launch_parameters\.h|device_functions\.h|vector_types\.h|"
    r"sm_\d+_.*\.h|helper_cuda\.h|helper_math\.h|nvToolsExt.*|crt/.*)$"
)


def _blank(text: str) -> str:
    """Spaces for every character but newlines (keeps line and column numbers)."""
    return re.sub(r"[^\n]", " ", text)


def strip_gpu_includes(text: str, dialect: str) -> str:
    def repl(m: re.Match) -> str:
        path = m.group(1).strip()
        if dialect == "cuda" and path == "curand_kernel.h":   # cuRAND's device API: the simulator's (ksim_curand.h)
            return '#include "ksim_curand.h"'
        if dialect == "cuda" and cub.stands_in(path):   # CUB's block/warp collectives: our stand-in (ksim_cub.h)
            return f'#include "{cub.STAND_IN}"'
        if dialect == "metal" or _GPU_HEADER.match(path):
            return _blank(m.group(0))
        return m.group(0)

    return _INCLUDE.sub(repl, text)


_EXTERN_SHARED = re.compile(
    r"\bextern\s+__shared__\s+((?:__align__\s*\(\s*\d+\s*\)\s*|alignas\s*\(\s*\d+\s*\)\s*)*)"
    r"([A-Za-z_](?:[\w:<>, ]*?[\w>])?)\s+((?:__align__\s*\(\s*\d+\s*\)\s*|alignas\s*\(\s*\d+\s*\)\s*)*)"
    r"([A-Za-z_]\w*)\s*\[\s*\]\s*((?:\[[^\[\];]+\]\s*)*);"
)
# `extern float __shared__ smem[];`: the qualifier after the type, as some samples write it
_EXTERN_SHARED_AFTER = re.compile(r"\bextern(\s+)([A-Za-z_][\w:<>, ]*?[\w>])(\s+)__shared__(\s)")


_SCOPE_HEAD = re.compile(r"(?:\bnamespace(?:\s+[\w:]+)?|\bextern\s*\"C(?:\+\+)?\")\s*$")


def at_file_scope(text: str, pos: int, masked: str | None = None) -> bool:
    """Whether offset `pos` of `text` is outside every function and class body (only namespace and
    `extern "C"` blocks around it)."""
    code = mask_comments(text) if masked is None else masked
    stack: list[bool] = []   # per open brace: a namespace / extern "C" block
    for m in re.finditer(r"[{}]", code[:pos]):
        if m.group(0) == "{":
            stack.append(_SCOPE_HEAD.search(text, max(0, m.start() - 200), m.start()) is not None)
        elif stack:
            stack.pop()
    return all(stack)


def dynamic_shared_view(typ: str, name: str, rows: str = "", file_scope: bool = False) -> str:
    """The declaration `extern __shared__ typ name[]rows;` becomes: a pointer to the run's dynamic shared
    memory. At file scope a static reference to the pointer the runtime sets for each launch (a
    pointer initialized once, when the library loads, would hold none)."""
    if file_scope:
        if rows:
            return f"static {typ} (*&{name}){rows} = *reinterpret_cast<{typ} (**){rows}>(&ksim::g.dyn_smem);"
        return f"static {typ}*& {name} = *reinterpret_cast<{typ}**>(&ksim::g.dyn_smem);"
    if rows:
        return f"{typ} (*{name}){rows} = reinterpret_cast<{typ} (*){rows}>(ksim::dyn_smem());"
    return f"{typ}* {name} = reinterpret_cast<{typ}*>(ksim::dyn_smem());"


def rewrite_extern_shared(text: str) -> str:
    text = _EXTERN_SHARED_AFTER.sub(lambda m: f"extern{m.group(1)}__shared__{m.group(3)}{m.group(2)}{m.group(4)}", text)
    masked = mask_comments(text) if _EXTERN_SHARED.search(text) else text

    def repl(m: re.Match) -> str:
        typ, name, more = m.group(2).strip(), m.group(4), (m.group(5) or "").strip()
        # `extern __shared__ half shmem[][K];`: rows of K
        new = dynamic_shared_view(typ, name, "".join(more.split()), at_file_scope(text, m.start(), masked))
        pad = len(m.group(0)) - len(new)
        return new + " " * max(pad, 0) if "\n" not in m.group(0) else new + "\n" * m.group(0).count("\n")

    return _EXTERN_SHARED.sub(repl, text)


_QUAL = re.compile(r"\b(threadgroup|__shared__)\b")
_ALIGN_AFTER_QUAL = re.compile(r"\b(threadgroup|__shared__)(\s+)((?:alignas|__align__)\s*\((?:[^()]|\([^()]*\))*\))")


_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def mask_comments(text: str) -> str:
    """`text` with comments and string literals blanked (same length, same newlines)."""
    return _COMMENT_OR_STRING.sub(lambda m: _blank(m.group(0)), text)


def split_top(s: str, opening: str = "([{<", closing: str = ")]}>") -> list[str]:
    """`s` split at its top-level commas (outside the given brackets); always at least one part."""
    parts, depth, cur = [], 0, ""
    for c in s:
        if c in opening:
            depth += 1
        elif c in closing:
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return parts


def _declared_names(decl: str) -> list[str]:
    """Names declared by ``float a[32], b[4][4]`` (the text after the qualifier, before ';')."""
    parts = split_top(decl)
    names = []
    for p in parts:
        head = re.sub(r"\([^()]*\)", "", p.split("[")[0].split("=")[0])
        m = re.search(r"([A-Za-z_]\w*)\s*$", head)
        if m:
            names.append(m.group(1))
    return names


def rewrite_block_shared(text: str, words: tuple[str, ...], base_depth: int = 0) -> str:
    """``threadgroup float s[64];`` -> ``static float s[64]; ksim::poison(s);``;
    ``threadgroup float* p`` -> ``float* p``. Declarations inside functions (brace depth > 0) get
    the poison call, which fills the variable with garbage at the start of each threadgroup."""
    # `__shared__ alignas(alignof(float4)) float As[16];`: C++ wants the attribute first (same length)
    text = _ALIGN_AFTER_QUAL.sub(lambda m: m.group(3) + m.group(2) + m.group(1), text)
    out: list[str] = []
    pos = 0
    depth = base_depth
    scanned = 0
    code = mask_comments(text)  # scan this; copy from `text`
    for m in _QUAL.finditer(code):
        if m.group(1) not in words or m.start() < pos:
            continue
        depth += code.count("{", scanned, m.start()) - code.count("}", scanned, m.start())
        scanned = m.start()
        # the declarator that follows, up to the end of this declaration/parameter
        i, bdepth = m.end(), 0
        while i < len(code):
            c = code[i]
            if c in "([<":
                bdepth += 1
            elif c in ")]>":
                if bdepth == 0:
                    break
                bdepth -= 1
            elif c in ";,={" and bdepth == 0:
                break
            i += 1
        decl = code[m.end():i]
        outer = decl
        while True:  # `a[W * G]` is an array: look for * and & outside brackets and parentheses only
            stripped = re.sub(r"\[[^\[\]]*\]|\([^()]*\)", "", outer)
            if stripped == outer:
                break
            outer = stripped
        # `threadgroup float (*As)[16]` (a helper's parameter for a 2-D array, helpershared.py) is a pointer too
        pointer_like = "*" in outer or "&" in outer or re.match(r"[^\[]*\(\s*[*&]", decl) is not None
        out.append(text[pos:m.start()])
        # `void f() const threadgroup {`: the address space of a member function's object (MSL), not a variable
        member_qualifier = not decl.strip() and code[i:i + 1] in ("{", ";", "=") and re.search(
            r"\)\s*(?:(?:const|volatile)\s+)*$", code[max(0, m.start() - 200):m.start()]) is not None
        if pointer_like or member_qualifier:
            out.append(" " * len(m.group(1)))
            pos = m.end()
            continue
        # `static __shared__ float s[64];` / `__shared__ static ...`: static once
        already = re.search(r"\bstatic\s*$", code[max(0, m.start() - 64):m.start()]) is not None \
            or re.match(r"\s*static\b", code[m.end():]) is not None
        out.append(" " * len(m.group(1)) if already else "static" + " " * (len(m.group(1)) - 6))
        end = code.find(";", m.end())
        if depth <= 0 or end < 0:
            pos = m.end()
            continue
        names = _declared_names(code[m.end():end])
        out.append(text[m.end():end + 1])
        out.append("".join(f" ksim::poison({n});" for n in names))
        pos = end + 1
    out.append(text[pos:])
    return "".join(out)


def prepare(text: str, dialect: str, in_function: bool = False) -> str:
    """All rewrites for kernel text of `dialect` ("metal" or "cuda"); `in_function`: the text is a
    function body (an MLX kernel source) rather than a file or header."""
    text = strip_gpu_includes(text, dialect)
    depth = 1 if in_function else 0
    if dialect == "cuda":
        text = rewrite_extern_shared(text)
        return rewrite_block_shared(text, ("__shared__",), depth)
    return rewrite_block_shared(text, ("threadgroup",), depth)


# ------------------------------------------------------------------------------------------------
# Whole .cu files
# ------------------------------------------------------------------------------------------------
@dataclass
class KernelParam:
    name: str
    type: str  # the declaration without the name, e.g. "const float* __restrict__"

    @property
    def is_pointer(self) -> bool:
        return "*" in self.type or "[" in self.type


@dataclass
class KernelInfo:
    name: str
    qualified: str  # with enclosing namespaces
    params: list[KernelParam]
    is_template: bool


def _parser():
    import tree_sitter as ts
    import tree_sitter_cuda

    return ts.Parser(ts.Language(tree_sitter_cuda.language()))


def _head(node, src: bytes) -> str:
    body = node.child_by_field_name("body")
    end = body.start_byte if body is not None else node.end_byte
    return src[node.start_byte:end].decode("utf-8", "replace")


def _is_device_fn(head: str) -> bool:
    return bool(re.search(r"\b(__global__|__device__)\b", head))


def inline_local_includes(text: str, include_dirs, seen: set | None = None, depth: int = 0) -> str:
    """``#include "x.h"`` (and ``<x.h>`` found in `include_dirs`) replaced by the header's text, as
    ``nvcc -I`` would find it; each header once (``#pragma once`` / include guards alike). GPU-only
    headers stay for strip_gpu_includes; headers not found stay (the compiler names them). ``#line``
    directives keep the including file's line numbers."""
    import os

    seen = set() if seen is None else seen
    if depth > 16 or not include_dirs:
        return text
    out, pos, line_no = [], 0, 1
    for m in _INCLUDE.finditer(text):
        path = m.group(1).strip()
        if _GPU_HEADER.match(path):
            continue
        found = next((os.path.join(d, path) for d in include_dirs if os.path.isfile(os.path.join(d, path))), None)
        if found is None:
            if not _system_header(path):
                # a host-side header that is not here (a timer, a file reader): kernels rarely need it, and when
                # one does the compiler names the missing identifier instead of the header
                out.append(text[pos:m.start()] + f"/* ksearch: header {path} not found: left out */")
                line_no += text.count("\n", pos, m.start())
                pos = m.end()
            continue
        real = os.path.realpath(found)
        out.append(text[pos:m.start()])
        line_no += text.count("\n", pos, m.start())
        if real not in seen:
            seen.add(real)
            try:
                inner = open(real, errors="replace").read()
            except OSError:
                inner = ""
            inner = inline_local_includes(inner, [os.path.dirname(real)] + list(include_dirs), seen, depth + 1)
            inner = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*", "", inner, flags=re.M)
            out.append(f'\n#line 1 "{os.path.basename(real)}"\n{inner}\n#line {line_no + 1} "{_CURRENT}"\n')
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


_CURRENT = "__KSIM_CURRENT_FILE__"


def _system_header(path: str) -> bool:
    """Whether the C/C++ compiler finds `path` by itself (a standard or system header)."""
    import glob
    import os

    if "." not in os.path.basename(path):       # <vector>, <cstdio>: the C++ standard library
        return True
    roots = ["/usr/include", "/usr/local/include", *glob.glob("/usr/include/*-linux-gnu"),
             *glob.glob("/usr/lib/gcc/*/*/include"), "/Library/Developer/CommandLineTools/usr/include"]
    return any(os.path.isfile(os.path.join(r, path)) for r in roots)


_CPP_LINKAGE = re.compile(r'^[ \t]*#[ \t]*if(?:def[ \t]+__cplusplus|[ \t]+defined[ \t]*\(?[ \t]*__cplusplus[ \t]*\)?)[^\n]*\n'
                          r'(?:[ \t]*(?://[^\n]*)?\n)*[ \t]*(?:extern[ \t]+"C"\s*\{|\})[ \t]*(?://[^\n]*)?\n'
                          r'(?:[ \t]*(?://[^\n]*)?\n)*[ \t]*#[ \t]*endif[^\n]*$', re.M)


def device_qualifiers(text: str) -> set[str]:
    """`__device__` and the file's own shorthands for it (`#define HD __host__ __device__`, also inside a conditional
    block): the words that mark a function as device code."""
    return {"__device__"} | set(re.findall(r"(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+[^\n]*\b__device__\b",
                                           text))


_CONDITIONAL_LINE = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|else|endif)\b[^\n]*$", re.M)


def _inner_conditionals_blanked(text: str) -> str:
    """`text` with the conditional directives inside braces (a function's body) blanked, same length: an `else if`
    branch behind `#ifdef` in main's option loop (`... #ifdef DBG / else if (...) / #endif / else {...}`) makes the
    parser close the function early, so the rest of main would stay as file-scope code. Both branches read as
    one chain, which is all the function's extent needs; directives at file scope stay."""
    code = mask_comments(text)
    depth, last = 0, 0
    out = list(text)
    for m in _CONDITIONAL_LINE.finditer(code):
        seg = code[last:m.start()]
        depth += seg.count("{") - seg.count("}")
        last = m.start()
        if depth > 0:
            for i in range(m.start(), m.end()):
                out[i] = " "
    return "".join(out)


def strip_host_code(source: str, keep_kernel: str | None = None) -> str:
    """Blank every function definition that is neither ``__global__`` nor ``__device__``. With
    `keep_kernel`, the bodies of the file's other ``__global__`` kernels are blanked too (their
    signatures stay): a kernel another compiler cannot take (wmma, inline PTX, textures) then never
    stops the kernel being run. Declarations of host functions (prototypes: `extern void f(MAT **I);`, whose
    types may come from a host header that is not here) go too: device code never calls them."""
    src = source.encode("utf-8")
    # a C header's `#ifdef __cplusplus / extern "C" { / #endif ... }` splits a block across conditionals, which
    # the parser cannot follow: it reads the text without those lines (same length: the spans stay)
    tree = _parser().parse(_inner_conditionals_blanked(
        _CPP_LINKAGE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)).encode("utf-8"))
    spans: list[tuple[int, int]] = []

    def host_prototype(decl) -> bool:
        """`void f(int);` / `extern float *g(MAT **I, int n);` outside any function: a host function's declaration."""
        if _is_device_fn(src[decl.start_byte:decl.end_byte].decode("utf-8", "replace")):
            return False
        for d in decl.children_by_field_name("declarator"):
            while d is not None and d.type in ("pointer_declarator", "reference_declarator"):
                d = d.child_by_field_name("declarator")
            if d is None or d.type != "function_declarator":
                return False
            params = d.child_by_field_name("parameters")
            # `dim3 grid(16, 16);` parses alike: a declaration's parameters name types, not values
            if params is None or any(c.type in ("number_literal", "string_literal", "binary_expression",
                                                "call_expression") for c in params.children):
                return False
        return bool(decl.children_by_field_name("declarator"))

    def other_kernel_body(fn) -> None:
        head = _head(fn, src)
        if keep_kernel is None or "__global__" not in head:
            return
        decl = fn.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        name = _declarator_name(decl.child_by_field_name("declarator"), src) if decl is not None else None
        body = fn.child_by_field_name("body")
        if name != keep_kernel and body is not None and body.end_byte - body.start_byte > 2:
            spans.append((body.start_byte + 1, body.end_byte - 1))

    device_words = device_qualifiers(source)

    def host_members(cls) -> None:
        """Member functions of a class that are neither __device__ nor constexpr (an allocation helper calling the
        driver API, a printer): device code cannot call them, and the file's host helpers they call are blanked."""
        body = cls.child_by_field_name("body")
        if body is None:
            return
        for m in body.children:
            fn = m if m.type == "function_definition" else next(
                (x for x in m.children if x.type == "function_definition"), None) if m.type == "template_declaration" \
                else None
            if fn is None or fn.child_by_field_name("body") is None:
                continue
            head = _head(fn, src)
            if _is_device_fn(head) or re.search(r"\bconstexpr\b", head) or set(re.findall(r"\w+", head)) & device_words:
                continue
            spans.append((m.start_byte, m.end_byte))

    def visit(node):
        for c in node.children:
            t = c.type
            for cls in [c] + list(c.children):
                if cls.type in ("class_specifier", "struct_specifier"):
                    host_members(cls)
            if t == "function_definition":
                if re.match(r"\s*(struct|class|union|enum|typedef)\b", _head(c, src)):
                    continue   # `struct __align__(8) P { ... };` parses as a function: it is a type
                if not _is_device_fn(_head(c, src)):
                    spans.append((c.start_byte, c.end_byte))
                else:
                    other_kernel_body(c)
            elif t == "template_declaration":
                fn = next((x for x in c.children if x.type == "function_definition"), None)
                if fn is not None and not _is_device_fn(_head(fn, src)):
                    spans.append((c.start_byte, c.end_byte))
                elif fn is not None:
                    other_kernel_body(fn)
                elif any(x.type == "declaration" and host_prototype(x) for x in c.children):
                    spans.append((c.start_byte, c.end_byte))
            elif t == "declaration" and host_prototype(c):
                spans.append((c.start_byte, c.end_byte))
            elif t == "template_instantiation" and not _is_device_fn(src[c.start_byte:c.end_byte].decode(
                    "utf-8", "replace")):   # `template void host_fn<float>(...);`: its template is blanked
                spans.append((c.start_byte, c.end_byte))
            elif t == "linkage_specification" and any(
                    (x.type == "function_definition" and not _is_device_fn(_head(x, src)))
                    or (x.type == "declaration" and host_prototype(x)) for x in c.children):
                spans.append((c.start_byte, c.end_byte))   # `extern "C" void host() {...}`: all of it, or the
                # `extern "C"` left behind would apply to whatever follows
            elif t in ("namespace_definition", "declaration_list", "linkage_specification",
                       "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif",
                       "preproc_elifdef"):
                visit(c)

    visit(tree.root_node)
    out = bytearray(src)
    for a, b in spans:
        out[a:b] = re.sub(rb"[^\n]", b" ", bytes(out[a:b]))
    return out.decode("utf-8")


def _declarator_name(node, src: bytes) -> str | None:
    if node is None:
        return None
    if node.type in ("identifier", "field_identifier"):
        return src[node.start_byte:node.end_byte].decode()
    d = node.child_by_field_name("declarator")
    if d is not None:
        return _declarator_name(d, src)
    for c in reversed(node.children):
        n = _declarator_name(c, src) if c.type not in ("parameter_list", "type_qualifier") else None
        if n:
            return n
    return None


def find_kernel(source: str, kernel: str) -> KernelInfo | None:
    """The ``__global__`` function called `kernel`: its parameters and enclosing namespaces."""
    src = source.encode("utf-8")
    tree = _parser().parse(src)
    found: list[KernelInfo] = []
    directives: list[str] = []   # kernels with preprocessor lines in their parameter list

    def visit(node, ns: list[str], templ: bool):
        for c in node.children:
            t = c.type
            if t == "function_definition":
                head = _head(c, src)
                if "__global__" not in head:
                    continue
                decl = c.child_by_field_name("declarator")
                while decl is not None and decl.type != "function_declarator":
                    decl = decl.child_by_field_name("declarator")
                if decl is None:
                    continue
                name = _declarator_name(decl.child_by_field_name("declarator"), src)
                if name != kernel:
                    continue
                params = []
                plist = decl.child_by_field_name("parameters")
                for p in plist.children if plist is not None else []:
                    if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
                        continue
                    text = src[p.start_byte:p.end_byte].decode()
                    pname = _declarator_name(p.child_by_field_name("declarator"), src) or ""
                    ptype = re.sub(rf"\b{re.escape(pname)}\b", "", text, count=1).strip() if pname else text
                    params.append(KernelParam(pname, ptype))
                found.append(KernelInfo(name, "::".join(ns + [name]), params, templ))
                if plist is not None and "#" in src[plist.start_byte:plist.end_byte].decode("utf-8", "replace"):
                    directives.append(name)
            elif t == "template_declaration":
                visit(c, ns, True)
            elif t == "namespace_definition":
                nm = c.child_by_field_name("name")
                body = c.child_by_field_name("body")
                if body is not None:
                    visit(body, ns + ([src[nm.start_byte:nm.end_byte].decode()] if nm else []), templ)
            elif t in ("linkage_specification", "declaration_list", "preproc_if", "preproc_ifdef",
                       "preproc_else", "preproc_elif", "ERROR"):
                # ERROR: a stretch the grammar could not read whole (a long program text with host C++ it
                # misreads) still holds the function definitions it did read
                visit(c, ns, templ)

    visit(tree.root_node, [], False)
    if found and directives:
        # `#if` inside the parameter list: the parameters the compiler sees (source/conditionals.py)
        from ..source.conditionals import has_conditionals, resolve_conditionals
        if has_conditionals(source):
            resolved = resolve_conditionals(source)[0]
            if resolved != source:
                again = find_kernel(resolved, kernel)
                if again is not None:
                    return again
    return found[0] if found else None


def list_kernels(source: str) -> list[str]:
    names = re.findall(r"__global__[^(;{]*?\b([A-Za-z_]\w*)\s*\(", source)
    return [n for n in names if n != "__launch_bounds__"]
