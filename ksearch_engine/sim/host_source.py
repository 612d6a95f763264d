"""Turns a whole CUDA program into one g++ translation unit for launch capture (capture.py).

* Local ``#include``s are inlined (each marked with ``#line`` so diagnostics, faults and launches keep the
  user's file and line), resolved like ``nvcc -I``: the including file's folder, then the user's include
  folders, then (a heuristic for sample trees such as cuda-samples' ``Common/``) the ancestor folders of the
  main file and their ``Common/``, ``common/``, ``include/``, ``inc/`` subfolders. CUDA's own headers and
  stubbed libraries come from host_headers.py; a library the CPU cannot run becomes an ``#error`` that
  names it. The CUDA samples' helper headers (helper_cuda.h, helper_functions.h, ...: host_helpers.py) are
  stood in for only where that search finds no file of their name.
* ``k<<<g, b, smem, stream>>>(args)`` (template arguments and several lines allowed) becomes a call of
  ksim_host::launch, which runs the grid with ksim.h's scheduler and records it.
* ``__shared__`` declarations get ksim's rewrites (preprocess.py); file-scope ``__device__`` /
  ``__constant__`` variables are registered so pointers into them are recognised and their contents recorded.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from . import host_headers
from .preprocess import find_kernel, mask_comments, rewrite_block_shared, rewrite_extern_shared, split_top

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"][^\n]*$', re.M)
_HEURISTIC_SUBDIRS = ("", "Common", "common", "include", "inc", "src")
_ANCESTORS = 4


@dataclass
class Program:
    """The translation unit and what was learnt while building it."""
    text: str
    files: list[Path] = field(default_factory=list)       # every user file inlined, main file first
    notes: list[dict] = field(default_factory=list)       # CaptureNote fields
    kernels: dict[str, object] = field(default_factory=dict)  # name -> preprocess.KernelInfo (or None)
    display: dict[str, str] = field(default_factory=dict)  # name used in #line -> path shown to users
    left_out: list[str] = field(default_factory=list)      # unsupported headers left out (leave_out_unsupported)
    linked: list["Program"] = field(default_factory=list)  # the program's other translation units (capture.py)
    helper_stand_ins: list[str] = field(default_factory=list)  # CUDA samples' helper headers ours stand in for
    language: str = "c++"   # "c": a .c unit without CUDA, compiled as C the way its Makefile's gcc would


# the extensions of a program's source files (what a linker joins), one home for the capture and port_file
SOURCE_EXT = (".cu", ".cpp", ".cc", ".cxx", ".c")
# what makes a .c file need the CUDA runtime (then it is compiled as C++ with the runtime's stand-in)
_CUDA_IN_C = re.compile(r"__global__|__device__|__host__|<<<|\bcuda[A-Z]\w*\s*\(|^[ \t]*#[ \t]*include[ \t]*<(?:cuda|cu|nv|thrust|cub)",
                        re.M)


@functools.lru_cache(maxsize=1)
def _system_dirs() -> tuple[str, ...]:
    from .build import compiler
    try:
        r = subprocess.run([compiler(), "-xc++", "-E", "-v", "/dev/null"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ("/usr/include",)
    dirs, on = [], False
    for ln in r.stderr.splitlines():
        if ln.startswith("#include <...>"):
            on = True
            continue
        if ln.startswith("End of search list"):
            break
        if on:
            dirs.append(ln.strip())
    return tuple(dirs) or ("/usr/include",)


def _is_system(name: str) -> bool:
    return any(os.path.isfile(os.path.join(d, name)) for d in _system_dirs())


def _find(name: str, quoted: bool, cur_dir: Path, include_dirs: list[Path], root: Path) -> tuple[Path | None, bool | str]:
    """(path, found_by_heuristic) of a local header, or (None, False); the heuristic is a str where it has a name
    (a folder the project's CMakeLists.txt or Makefile names)."""
    cands = ([cur_dir] if quoted else []) + include_dirs
    for d in cands:
        p = d / name
        if p.is_file():
            return p.resolve(), False
    if not quoted and _is_system(name):
        return None, False
    for d, build in _declared_dirs(root):
        p = d / name
        if p.is_file():
            return p.resolve(), f"a folder {build} names"
    d = root
    for _ in range(_ANCESTORS + 1):
        for sub in _HEURISTIC_SUBDIRS:
            p = (d / sub / name) if sub else (d / name)
            if p.is_file():
                return p.resolve(), d != root or sub != ""
        if d.parent == d:
            break
        d = d.parent
    return None, False


_CMAKE_INC = re.compile(r"\b(?:target_)?include_directories\s*\(([^)]*)\)", re.I)
_MAKE_INC = re.compile(r"(?:^|\s)-I\s*([^\s$()]+|\$\((?:CURDIR|PWD)\)/[^\s]+)")


def _declared_dirs(root: Path) -> tuple[tuple[Path, str], ...]:
    """Include folders the project's build files name (`include_directories(${PROJECT_SOURCE_DIR}/src)` in a
    CMakeLists.txt, `-Isrc` in a Makefile), looked for in the main file's folder and _ANCESTORS above it."""
    out: list[tuple[Path, str]] = []
    d = root
    for _ in range(_ANCESTORS + 1):
        for build in ("CMakeLists.txt", "Makefile", "makefile", "GNUmakefile"):
            f = d / build
            try:
                text = f.read_text(errors="replace") if f.is_file() else ""
            except OSError:
                continue
            words: list[str] = []
            if build == "CMakeLists.txt":
                for m in _CMAKE_INC.finditer(re.sub(r"#[^\n]*", "", text)):
                    words += [w.strip('"') for w in m.group(1).split()
                              if w.upper() not in ("PUBLIC", "PRIVATE", "INTERFACE", "SYSTEM", "BEFORE", "AFTER")]
            else:
                words = [m.group(1) for m in _MAKE_INC.finditer(text)]
            for w in words:
                w = re.sub(r"\$\{(?:PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR|CMAKE_CURRENT_SOURCE_DIR|CMAKE_CURRENT_LIST_DIR)\}"
                           r"|\$\((?:CURDIR|PWD)\)", str(d), w)
                if "$" in w:
                    continue   # another variable: not known here
                p = Path(w) if os.path.isabs(w) else d / w
                if p.is_dir() and all(p.resolve() != o for o, _b in out):
                    out.append((p.resolve(), str(f.relative_to(root)) if f.is_relative_to(root) else str(f)))
        if d.parent == d:
            break
        d = d.parent
    return tuple(out)


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _all_targs(code: str, kernel: str, targs: str) -> bool:
    """Whether `targs` gives every template parameter of kernel `kernel` (`apply<128>` of `template <int BS, class
    Op>` leaves Op to be deduced from the arguments: `&apply<128>` names no one function)."""
    m = re.search(rf"template\s*<((?:[^<>]|<[^<>]*>)*)>\s*(?:static\s+|inline\s+)*__global__\s+(?:[\w:]+\s+)*?void\s+"
                  rf"(?:__launch_bounds__\s*\([^)]*\)\s*)?{re.escape(kernel)}\s*\(", code)
    if m is None:
        return True
    params = [t for t in split_top(m.group(1)) if t.strip()]
    required = [t for t in params if "=" not in t]
    return len(split_top(targs)) >= len(required)


def _postfix_back(code: str, j: int) -> int:
    """Start of the postfix expression that ends at code[j] (`fpDeriv[fp]`, `(*fp)`, `ops.table[2]`), else -1."""
    while j >= 0:
        c = code[j]
        if c in "])":
            k = _match_back(code, j, "[" if c == "]" else "(", c)
            if k < 0:
                return -1
            j = k - 1
        elif c.isalnum() or c in "_:.":
            j -= 1
        elif c == ">" and j > 0 and code[j - 1] == "-":
            j -= 2
        else:
            break
    return j + 1


def _match_back(code: str, end: int, open_c: str, close_c: str) -> int:
    """Index of the `open_c` matching the `close_c` at code[end]."""
    depth = 0
    i = end
    while i >= 0:
        c = code[i]
        if c == close_c:
            depth += 1
        elif c == open_c:
            depth -= 1
            if depth == 0:
                return i
        i -= 1
    return -1


def _match_fwd(code: str, start: int, open_c: str, close_c: str) -> int:
    depth = 0
    for i in range(start, len(code)):
        c = code[i]
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i
    return -1


_UNRUNNABLE = [(re.compile(r"\basm\s*(?:volatile\s*)?\("), "inline PTX (asm)"),
               (re.compile(r"\b__nv_[a-z0-9_]*tma|\bcp\.async"), "Hopper async copies")]
_GLOBAL_HEAD = re.compile(r"__global__[^;{]*?\b([A-Za-z_]\w*)\s*\(")


def stub_unrunnable_kernels(text: str, shown: str) -> str:
    """Kernels whose code only a GPU runs (inline PTX, Hopper async copies; wmma runs: ksim_wmma.h) get a body that stops the capture when launched,
    naming the construct and its line; the rest of the program (and its other kernels) still compiles and runs.
    Line numbers are kept: the removed body's newlines stay."""
    code = mask_comments(text)
    out, pos = [], 0
    for m in _GLOBAL_HEAD.finditer(code):
        paren = m.end() - 1
        close = _match_fwd(code, paren, "(", ")")
        if close < 0:
            continue
        brace = code.find("{", close)
        if brace < 0 or code[close + 1:brace].strip(" \t\n\r").endswith(";") or ";" in code[close + 1:brace]:
            continue
        end = _match_fwd(code, brace, "{", "}")
        if end < 0 or brace < pos:
            continue
        body = code[brace:end]
        hit = next(((rx.search(body), what) for rx, what in _UNRUNNABLE if rx.search(body)), None)
        if hit is None:
            continue
        line = text.count("\n", 0, brace + hit[0].start()) + 1
        msg = f"kernel {m.group(1)}: {hit[1]}"
        out.append(text[pos:brace + 1])
        out.append(f' ksim_host::gpu_only("{_escape(msg)}", "{_escape(shown)}", {line}); '
                   + "\n" * text.count("\n", brace, end))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _targs_expr(targs: str, resolve: bool = True) -> str:
    """The launch's template arguments as a C++ expression: each resolved where the launch is instantiated
    (`T` inside a host template names the type it stands for), else the text as written."""
    parts = [p.strip() for p in split_top(targs)] if targs.strip() else []
    if not resolve or not parts or any("..." in p or not p for p in parts):
        return f'"{_escape(targs)}"'
    each = ", ".join(f'ksim_host::targ<{p}>("{_escape(p)}")' for p in parts)
    return f"[]() -> const char* {{ static const std::string s = ksim_host::join_targs({{{each}}}); return s.c_str(); }}()"


def rewrite_launches(text: str, kernels: dict[str, object], resolve_targs: bool = True) -> str:
    """``k<<<cfg>>>(args)`` -> ``ksim_host::launch(site, ksim_host::cfg(cfg), &k, args)``; lines are kept."""
    code = mask_comments(text)
    out, pos = [], 0
    # <<< and >>> (nvcc also takes "<< <" / ">> >"), but not two shift operators around a masked string
    opens = re.compile(r"(?<!<)(?:<<[ \t]*<|<[ \t]*<<)(?!<)")
    closes = re.compile(r"(?<!>)(?:>>[ \t]*>|>[ \t]*>>)(?!>)")

    def find_open(at: int) -> tuple[int, int]:
        m = opens.search(code, at)
        return (m.start(), m.end()) if m else (-1, -1)

    # kernels that share their name with a host function (a launcher `void k(..., int block_size)` around the
    # kernel `__global__ void k(...)`): `&k` names an overload set, so the launch goes the generic way, where the
    # call's arguments pick the kernel as nvcc's overload resolution does
    host_named = {n for n in kernels if re.search(
        rf"(?m)^[ \t]*(?:(?:static|inline|extern|__host__)\s+)*(?!__global__\b)[A-Za-z_][\w:<>]*[\s*&]+{re.escape(n)}"
        rf"\s*\([^;{{}}]*\)\s*\{{", code)}
    # kernels overloaded on their parameters (`__global__ void k(uchar4*, ...)` beside `k(unsigned char*, ...)`):
    # the same, the arguments pick the overload
    host_named |= {n for n in kernels if len(re.findall(rf"\b__global__\b[^;{{}}()]*?\b{re.escape(n)}\s*\(", code)) > 1}
    i, iend = find_open(0)
    while i >= 0:
        # the kernel expression before <<<: name, optional ::, optional <template args>
        j = i - 1
        while j >= 0 and code[j] in " \t\n":
            j -= 1
        targs = ""
        # a kernel reached through an expression: a table of kernel pointers (`fpDeriv[fp]<<<...>>>`), `(*fp)`
        expr_start = _postfix_back(code, j) if j >= 0 and code[j] in "])" else -1
        if expr_start >= 0:
            pass
        elif j >= 0 and code[j] == ">":
            k = _match_back(code, j, "<", ">")
            if k < 0:
                i, iend = find_open(iend)
                continue
            targs = text[k + 1:j]
            j = k - 1
            while j >= 0 and code[j] in " \t":
                j -= 1
        e = j + 1
        if expr_start >= 0:
            j = expr_start - 1
        while j >= 0 and (code[j].isalnum() or code[j] in "_:") and expr_start < 0:
            j -= 1
        start = j + 1
        name = text[start:e].strip()
        cm = closes.search(code, iend)
        if not name or cm is None or start < pos:
            i, iend = find_open(iend)
            continue
        close, close_end = cm.start(), cm.end()
        cfg = text[iend:close]
        p = close_end
        while p < len(code) and code[p] in " \t\n":
            p += 1
        if p >= len(code) or code[p] != "(":
            i, iend = find_open(close_end)
            continue
        q = _match_fwd(code, p, "(", ")")
        if q < 0:
            break
        args = text[p + 1:q]
        # (an expression's launch is named by the kernel it points to at run time; until then by its words)
        short = name.split("::")[-1] if expr_start < 0 else re.sub(r"\W+", "_", name).strip("_")
        info = kernels.get(short)
        targs_flat = " ".join(targs.split())
        # recorded under the kernel's own name (`ops::bump<<<...>>>` launches the kernel `bump` of namespace ops)
        site = f'ksim_host::Site{{"{_escape(short)}", {_targs_expr(targs_flat, resolve_targs)}, __FILE__, __LINE__}}'
        kexpr = name + (f"<{targs}>" if targs else "")
        nparams = len(info.params) if info is not None else -1
        nargs = 0 if not args.strip() else len(split_top(args))
        typed = info is not None and (not info.is_template or (targs and _all_targs(code, short, targs))) \
            and nparams == nargs and short not in host_named
        if info is not None and nparams == nargs and nargs:
            # a literal 0 / NULL for a pointer parameter: nullptr, so that it still converts once forwarded
            parts = split_top(args)
            fixed = [re.sub(r"^(\s*)(?:0L?|NULL)(\s*)$", r"\1nullptr\2", a) if "*" in prm.type else a
                     for a, prm in zip(parts, info.params)]
            args = ",".join(fixed)
        generic = f"[&](auto&&... ksim_a) {{ {kexpr}(ksim_a...); }}"
        if typed:  # the kernel's own parameter types when the arguments convert to them, else generic
            fn = f"&{kexpr}, {generic}"
            call = "ksim_host::launch"
        elif short not in kernels and not targs and (re.fullmatch(r"[A-Za-z_]\w*", name) or expr_start >= 0):
            # not a kernel's name: a function-pointer variable (kernel = &copy; kernel<<<..>>>): the runtime
            # names the launch by the kernel it points to
            fn = f"{name}, {generic}"
            call = "ksim_host::launch_ptr"
        else:
            fn = generic
            call = "ksim_host::launch_g"
        ws = text[close_end:p]
        rest = (", " + args) if args.strip() else args
        out.append(text[pos:start])
        out.append(f"{call}({site}, ksim_host::cfg({cfg}), {fn}{ws}{rest})")
        pos = q + 1
        i, iend = find_open(pos)
    out.append(text[pos:])
    return "".join(out)


_SYMBOL = re.compile(r"\b(?:__device__|__constant__|__managed__)\b(?P<rest>[^;(){}]*?)(?=[;=])")


def file_symbols(text: str) -> list[str]:
    """Names of file-scope __device__/__constant__/__managed__ variables (not in namespaces or functions)."""
    code = mask_comments(text)
    names, depth, last = [], 0, 0
    for m in _SYMBOL.finditer(code):
        depth += code.count("{", last, m.start()) - code.count("}", last, m.start())
        last = m.start()
        if depth != 0:
            continue
        line_start = code.rfind("\n", 0, m.start()) + 1
        if code[line_start:m.start()].lstrip().startswith("#") or re.search(r"\btemplate\b|\bextern\b", code[line_start:m.end()]):
            continue
        rest = m.group("rest")
        if "(" in rest or "operator" in rest:
            continue
        for part in split_top(rest):
            nm = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", part.split("=")[0].strip())
            if nm and nm.group(1) not in ("const", "volatile", "static"):
                names.append(nm.group(1))
    return names


_EXTERN_T_SHARED = re.compile(r"\bextern(\s+)((?:const\s+|volatile\s+|unsigned\s+|signed\s+)*[A-Za-z_][\w:]*(?:<[^;<>]*>)?)(\s+)__shared__\b")
_EXTERN_SHARED_2D = re.compile(r"\bextern\s+__shared__\s+((?:__align__\s*\(\s*\d+\s*\)\s*)*)([A-Za-z_][\w:]*(?:<[^;<>]*>)?)\s+"
                               r"([A-Za-z_]\w*)\s*\[\s*\]\s*((?:\[[^\[\];]+\]\s*)+);")


def normalize_extern_shared(text: str) -> str:
    """`extern T __shared__ a[]` (nvcc takes the qualifier after the type) as `extern __shared__ T a[]`, and
    `extern __shared__ T a[][N]` as a pointer to rows of the dynamic shared memory; lines are kept."""
    text = _EXTERN_T_SHARED.sub(lambda m: f"extern{m.group(1)}__shared__{m.group(3)}{m.group(2)}", text)

    from .preprocess import at_file_scope, dynamic_shared_view
    masked = mask_comments(text) if _EXTERN_SHARED_2D.search(text) else text

    def rows(m: re.Match) -> str:
        typ, name, dims = m.group(2), m.group(3), m.group(4).strip()
        return dynamic_shared_view(typ, name, dims, at_file_scope(text, m.start(), masked)) \
            + "\n" * m.group(0).count("\n")
    return _EXTERN_SHARED_2D.sub(rows, text)


_SHARED_ALIGNAS = re.compile(r"\b__shared__\s+((?:alignas\s*\((?:[^()]|\([^()]*\))*\)\s*)+)")
_HOST_ONLY_EXT = (".cpp", ".cc", ".cxx", ".c")
# headers of what the CPU cannot run that programs often include without using them on the compute path
# (display, platform): left out first; a library such as Thrust is refused at its #include
_OFTEN_UNUSED = ("OpenGL interop", "Direct3D interop", "Vulkan interop", "Windows")
_VOID_KERNEL = re.compile(r"(\bcudaLaunch(?:Cooperative)?Kernel\s*\(\s*)\(\s*(?:const\s+)?void\s*\*\s*\)\s*")
_STATIC_FN = re.compile(r"^[ \t]*(?:static|inline)\b[^;{}()=]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{", re.M)


@functools.lru_cache(maxsize=1)
def _ksim_function_names() -> frozenset[str]:
    from .build import HEADER
    names = set()
    for n in ("ksim.h", "ksim_cuda.h", "ksim_host.h"):
        try:
            names |= set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", HEADER.with_name(n).read_text()))
        except OSError:
            pass
    return frozenset(names)


def host_only_clashes(text: str) -> list[str]:
    """Names of static/inline functions a host-only file (.cpp) defines that the simulator's CUDA headers also
    define (CUDA's device `umin`, `umax`, ...): nvcc's host compiler never sees those, so the file's own win."""
    ks = _ksim_function_names()
    out = []
    for m in _STATIC_FN.finditer(mask_comments(text)):
        if m.group(1) in ks and m.group(1) not in out and m.group(1) not in ("main", "if", "for", "while"):
            out.append(m.group(1))
    return out


def build_program(path: Path, include_dirs: list[Path], resolve_targs: bool = True,
                  leave_out_unsupported: bool = False, texts: dict[Path, str] | None = None,
                  allow_c: bool = True) -> Program:
    """The whole program as one translation unit (see the module's docstring). `texts`: files' contents to use
    instead of what is on disk (by resolved path: a run at smaller sizes, capture_scale.py). A .c file that uses
    no CUDA is kept as C (allow_c): K&R definitions, implicit declarations and C linkage, as gcc builds it."""
    root = path.parent.resolve()
    prog = Program(text="")
    seen_once: set[Path] = set()
    raw: dict[Path, str] = {}

    def read(p: Path) -> str:
        if p not in raw:
            raw[p] = texts[p] if texts and p in texts else p.read_text(errors="replace")
        return raw[p]

    def shown(p: Path) -> str:
        try:
            rel = os.path.relpath(p, root)
        except ValueError:
            rel = str(p)
        return rel if not rel.startswith("../../../") else str(p)

    def expand(p: Path, stack: tuple[Path, ...]) -> str:
        name = shown(p)
        text = stub_unrunnable_kernels(read(p), name)
        if p not in prog.files:
            prog.files.append(p)
        prog.display[os.path.basename(name)] = name
        code = mask_comments(text)
        out, pos = [], 0
        for m in _INCLUDE.finditer(text):
            if code[m.start():m.end()].strip()[:1] != "#":
                continue  # inside a comment
            quoted, hname = m.group(1) == '"', m.group(2).strip()
            line = text.count("\n", 0, m.start()) + 1
            out.append(text[pos:m.start()])
            pos = m.end()
            # a vendored CUB checkout (`#include "cub/cub/cub.cuh"`, a git submodule the sources do not carry):
            # the stand-in's own header, as nvcc finds the toolkit's CUB
            vend = re.fullmatch(r"(?:\.\./)*(?:[\w.-]+/)*?cub/(cub/[\w./]+)", hname)
            if vend and vend.group(1) in host_headers.FILES and _find(hname, quoted, p.parent, include_dirs, root)[0] is None:
                hname = vend.group(1)
            what = host_headers.unsupported(hname)
            if what and leave_out_unsupported and what in _OFTEN_UNUSED:   # included, maybe unused: try without
                prog.left_out.append(f"{hname} ({what})")
                prog.notes.append(dict(kind="include", file=name, line=line,
                                       message=f"{hname} ({what}) left out: the program compiles without it"))
                continue
            if what:
                out.append(f'#error "ksim-capture: {_escape(hname)} ({what}) cannot run in the CPU capture"')
                continue
            if hname in host_headers.FILES:
                from .cub import includes_cub, reason, unsupported_uses   # a part of CUB the stand-in lacks
                bad = unsupported_uses(text) if hname.startswith("cub/") and includes_cub(text) else []
                if bad:
                    out.append(f'#error "ksim-capture: {_escape(bad[0][0])} (line {bad[0][1]}): '
                               f'{_escape(reason(bad[0][0]))}"')
                    continue
                out.append(f"#include <{hname}>")
                continue
            found, heur = _find(hname, quoted, p.parent, include_dirs, root)
            if found is None and hname in host_headers.FALLBACK:   # NVIDIA samples' helper_cuda.h, ...: ours
                if hname not in prog.helper_stand_ins:
                    prog.helper_stand_ins.append(hname)
                    prog.notes.append(dict(kind="include", file=name, line=line,
                                           message=f"{hname} not found: the capture's stand-in for the CUDA samples' "
                                                   f"header is used (pass its folder in include_dirs to use the real one)"))
                out.append(f"#include <{hname}>")
                continue
            if found is None:
                out.append(m.group(0))
                continue
            if found in stack or found in seen_once:
                out.append("")
                continue
            if heur:
                prog.notes.append(dict(kind="include", file=name, line=line,
                                       message=f"{hname} found at {shown(found)} "
                                               f"({heur if isinstance(heur, str) else 'searched ancestor folders'}); "
                                               f"pass include_dirs to choose another"))
            body = expand(found, stack + (found,))
            if re.search(r"^\s*#\s*pragma\s+once", read(found), re.M):
                seen_once.add(found)
            out.append(f'#line 1 "{_escape(shown(found))}"\n{body}\n#line {line + 1} "{_escape(name)}"')
        out.append(text[pos:])
        return "".join(out)

    body = expand(path.resolve(), (path.resolve(),))
    if allow_c and path.suffix == ".c" and not _CUDA_IN_C.search(mask_comments(body)):
        prog.language = "c"
        prog.text = f'#line 1 "{_escape(shown(path.resolve()))}"\n{body}\n'
        return prog
    # kernels of every inlined file (parameter names, and whether the launch can use their types)
    for f in prog.files:
        txt = read(f)
        code = _without_launch_bounds(mask_comments(txt))
        for kname in set(re.findall(r"__global__[^(;{]*?\b([A-Za-z_]\w*)\s*\(", code)):
            try:
                info = find_kernel(txt, kname)
            except Exception:  # noqa: BLE001 - a parser failure only loses parameter names
                info = None
            if kname in prog.kernels and prog.kernels[kname] is not None and info is not None:
                if [p.type for p in prog.kernels[kname].params] != [p.type for p in info.params]:
                    prog.kernels[kname] = None  # overloads: launches use the generic path
                continue
            prog.kernels.setdefault(kname, info)
    # cudaLaunchKernel((void*)k, ...): the runtime needs k's own type to read its argument slots
    body = _VOID_KERNEL.sub(lambda m: m.group(1) + " " * (len(m.group(0)) - len(m.group(1))), body)
    body = rewrite_launches(body, prog.kernels, resolve_targs)
    # `__shared__ alignas(16) float a[..]`: the alignment first, where g++ takes it once __shared__ is `static`
    body = _SHARED_ALIGNAS.sub(lambda m: m.group(1) + "__shared__ ", body)
    body = rewrite_block_shared(rewrite_extern_shared(normalize_extern_shared(body)), ("__shared__",), 0)
    syms = []
    for s in file_symbols(body):
        if s not in syms:
            syms.append(s)
    reg = "\n".join(f'static ksim_host::SymReg ksim_symreg_{i}("{s}", (void*)&{s}, sizeof({s}));'
                    for i, s in enumerate(syms))
    main_name = shown(path.resolve())
    renames = ""
    if path.suffix in _HOST_ONLY_EXT:   # g++ sees no CUDA device functions in a .cpp: the user's own umin, ...
        renames = "".join(f"#define {n} ksim_hostcpp_{n}\n" for n in host_only_clashes(read(path.resolve())))
    prog.text = (f'#include "ksim_host.h"\n{renames}#line 1 "{_escape(main_name)}"\n{body}\n'
                 f'#line 1 "ksim-launch"\n{reg}\n')
    return prog


def _without_launch_bounds(code: str) -> str:
    """`code` with each `__launch_bounds__(...)` blanked (balanced parentheses: `__launch_bounds__((BM * BN) / (TM *
    TN), 1)` between `__global__ void` and the kernel's name hid the name from the kernel search)."""
    out, pos = [], 0
    for m in re.finditer(r"\b__launch_bounds__\s*\(", code):
        if m.start() < pos:
            continue
        depth, i = 0, m.end() - 1
        while i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            if depth == 0:
                break
            i += 1
        out.append(code[pos:m.start()])
        out.append(" " * (i + 1 - m.start()))
        pos = i + 1
    out.append(code[pos:])
    return "".join(out)
