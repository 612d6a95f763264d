"""Port a whole CUDA file: capture its program's launches, translate every kernel, check every port, report.

For each `__global__` kernel the verdict is one of
* `verified` — the Metal port and the CUDA-backend port both reproduce what the original left in memory on the
  launches checked (captured from the user's program, or found by running the kernel: `workload` says which);
* `ported, unverified` — a port was written but could not be checked, or did not match (the reason says where);
* `not ported` — the translator stopped on a construct (named, with its line).
One kernel's failure never stops the others. The report is what `ksearch port FILE --all` prints, as HIPIFY prints
its statistics, and what `--json` gives per kernel.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, Field

from .sim.capture_models import Capture, LaunchRecord
from .sim.host_source import SOURCE_EXT

Status = Literal["verified", "unverified", "not_ported"]
Workload = Literal["captured", "inferred", "none"]
MAX_CHECKED_LAUNCHES = 3
_MAIN = re.compile(r"\bint\s+main\s*\(")
_SOURCE_EXT = SOURCE_EXT


class KernelVerdict(BaseModel):
    kernel: str
    line: int                                   # 1-based line of the kernel's definition
    status: Status
    workload: Workload = "none"
    launches_checked: int = 0
    reason: str | None = None                   # one line: the construct and its line, or why unverified
    module_path: str | None = None
    dialects: dict[str, str] = {}               # "metal"/"cuda" -> passed / mismatch / sim_error / ...
    messages: dict[str, str] = {}               # per dialect: what went wrong, one line
    notes: list[str] = []                       # translation notes (dropped printf, ...)
    module_text: str | None = Field(default=None, exclude=True)   # the port module (not in the JSON report)
    checked: list = Field(default_factory=list, exclude=True)    # [(LaunchRecord, {param: value})] checked

    @property
    def label(self) -> str:
        if self.status == "verified":
            return f"verified ({self.workload})"
        return "ported, unverified" if self.status == "unverified" else "not ported"


class CaptureSummary(BaseModel):
    program: str | None = None                  # the file whose main() ran
    status: str = "none"                        # ok / partial / failed / none (no program)
    launches: int = 0
    error: str | None = None
    notes: list[str] = []
    seconds: float = 0.0


class PortReport(BaseModel):
    file: str
    kernels: list[KernelVerdict] = []
    capture: CaptureSummary = CaptureSummary()
    seconds: float = 0.0
    error: str | None = None                    # the file could not be ported at all
    others: list[str] = []                      # the file's other CUDA kernels, not asked for in this run ("name (line N)")

    def counts(self) -> dict[str, int]:
        c = {"kernels": len(self.kernels), "verified": 0, "unverified": 0, "not_ported": 0}
        for k in self.kernels:
            c[k.status] += 1
        return c

    def text(self) -> str:
        """The coverage table a person reads."""
        lines = [f"{self.file}"]
        cap = self.capture
        if cap.program:
            lines.append(f"  program: {cap.program} ({cap.status}, {cap.launches} launches recorded, "
                         f"{cap.seconds:.1f} s)" + (f": {cap.error}" if cap.error else ""))
        elif self.error and not self.kernels:
            pass   # nothing was ported: no program was looked for
        else:
            lines.append("  program: none (no main() here or including this file): workloads are found by "
                         "running each kernel")
        for n in cap.notes[:8]:
            lines.append(f"  note: {n}")
        if self.error:
            lines.append(f"  {self.error}")
        w = max([len(k.kernel) for k in self.kernels] + [6])
        for k in self.kernels:
            why = f"  {k.reason}" if k.reason else \
                next((f"  {n}" for n in k.notes if n.startswith("checked on the instantiation")), "")
            checked = f"  {k.launches_checked} launch{'es' if k.launches_checked != 1 else ''}" \
                if k.status == "verified" else ""
            lines.append(f"  {k.kernel:<{w}}  line {k.line:<5} {k.label}{checked}{why}")
        c = self.counts()
        n = max(c["kernels"], 1)
        lines.append(f"  total: {c['kernels']} kernels: {c['verified']} verified ({100 * c['verified'] // n}%), "
                     f"{c['unverified']} ported but unverified, {c['not_ported']} not ported")
        if self.others:
            lines.append(f"  not ported in this run: {', '.join(self.others)}; `ksearch port {Path(self.file).name} "
                         f"--all` ports every kernel of the file, `--kernel NAME` one of them")
        return "\n".join(lines)


def module_path_for(source: str | Path, kernel: str, n_kernels: int) -> Path:
    """Each kernel's port has its own module: `x_mlx.py` for a one-kernel file, else `x_<kernel>_mlx.py`."""
    p = Path(source)
    return p.with_name(f"{p.stem}_mlx.py" if n_kernels <= 1 else f"{p.stem}_{kernel}_mlx.py")


def find_program(path: Path) -> Path | None:
    """The file whose main() launches this file's kernels: the file itself, a source in the same folder (or its
    parent) that #includes it (directly or through other local files), or a sibling with a main() that calls a
    host function this file defines (a program of several translation units, linked as nvcc would)."""
    return find_program_and_sources(path)[0]


def _read(f: Path) -> str:
    try:
        return f.read_text(errors="replace")
    except OSError:
        return ""


_HOST_FN = re.compile(r"^[ \t]*(?:extern\s+\"C\"\s+)?(?:template\s*<[^;{}]*>\s*)?(?P<head>[A-Za-z_][\w:<>,\s\*&]*?)"
                      r"\b(?P<name>[A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{", re.M)
_NOT_FN = {"if", "for", "while", "switch", "return", "sizeof", "main"}


_TRANSPARENT_OPEN = re.compile(r'(?:\bextern\s*(?:"[^"\n]*")?|\bnamespace\b[\s\w:]*)\s*$')


def _scope_depths(code: str) -> Callable[[int], int]:
    """depth(pos): how many blocks enclose pos in `code` (comments masked), not counting `extern "C" {` and
    `namespace X {`, whose functions are still top-level ones (Rodinia's wrappers, dwt2d's namespace)."""
    marks: list[tuple[int, int]] = []   # (position after a brace, depth from there on)
    stack: list[bool] = []
    depth = 0
    for m in re.finditer(r"[{}]", code):
        if m.group(0) == "{":
            opaque = not _TRANSPARENT_OPEN.search(code[max(0, m.start() - 120):m.start()])
            stack.append(opaque)
            depth += opaque
        elif stack:
            depth -= stack.pop()
        marks.append((m.end(), depth))
    starts = [p for p, _ in marks]

    def depth_at(pos: int) -> int:
        import bisect
        i = bisect.bisect_right(starts, pos) - 1
        return marks[i][1] if i >= 0 else 0
    return depth_at


def host_functions(text: str) -> list[str]:
    """Names of host functions defined at the top level of `text` (not __global__/__device__ ones)."""
    from .sim.preprocess import mask_comments

    code = mask_comments(text)
    depth_at = _scope_depths(code)
    out = []
    for m in _HOST_FN.finditer(code):
        head = m.group("head")
        if depth_at(m.start()) != 0 or m.group("name") in _NOT_FN or \
                re.search(r"__global__|__device__|\bstruct\b|\bclass\b", head):
            continue
        if m.group("name") not in out:
            out.append(m.group("name"))
    return out


_ROOT_MARKS = ("Makefile", "makefile", "GNUmakefile", "CMakeLists.txt", ".git", "setup.py", "pyproject.toml")
_UP_LEVELS = 3            # folders above the file's own searched for its program (fewer at a project root)
_MAX_FOLDER_FILES = 400   # a folder holding more entries than this (a temp or home folder) is no project's
_MAX_BESIDE = 12          # folders beside the file's own that are searched (inc/ src/ kernels/ of one project)


def _program_folders(path: Path) -> list[Path]:
    """The file's folder and those above it, up to its project's root (a folder with a Makefile, CMakeLists.txt
    or .git) or _UP_LEVELS above: where the program that runs a kernel file's kernels lives (an SGEMM ladder's
    src/kernels/k.cuh is included by src/kernels.cuh, itself by src/runner.cu, linked with ./sgemm.cu's main)."""
    out, f = [], path.parent
    for _ in range(_UP_LEVELS + 1):
        if not f.is_dir():
            break
        if out:
            try:
                if sum(1 for _x in f.iterdir()) > _MAX_FOLDER_FILES:
                    break
            except OSError:
                break
        out.append(f)
        if any((f / m).exists() for m in _ROOT_MARKS) or f.parent == f:
            break
        f = f.parent
    return out


def find_program_and_sources(path: Path) -> tuple[Path | None, list[Path]]:
    """(the program whose main() runs this file's kernels, other sources to link with it)."""
    text = _read(path)
    if not text:
        return None, []
    if _MAIN.search(text):
        return path, []
    folders = _program_folders(path)
    # and the folders beside the file's own (a header in inc/ included from src/, kernels in dwt_cuda/ called
    # from the parent's sources)
    beside = [d for d in (sorted(folders[1].iterdir()) if len(folders) > 1 else [])
              if d.is_dir() and not d.is_symlink() and d != folders[0] and not d.name.startswith(".")]
    if len(beside) > _MAX_BESIDE:   # a folder of many projects (or of test runs), not one project's parts
        beside = []
    files = [c for folder in folders + beside for c in sorted(folder.iterdir())
             if c.is_file() and c != path and c.suffix in _SOURCE_EXT + (".h", ".cuh", ".hpp", ".inl")]
    texts = {c: _read(c) for c in files}
    near = set(folders[:2] + beside)   # an includer with a main(): next to the file, one folder up, or beside it
    # includers, breadth first: a main() that #includes the file, or includes a file that includes it
    units = [path]              # the file, and the sources (no main) that include it: what gets linked
    frontier, seen = [path.name], {path.name}
    for _depth in range(3):
        nxt = []
        for name in frontier:
            inc = re.compile(r'#\s*include\s*["<]([^">]*\b' + re.escape(name) + r')[">]')
            for c in files:
                if not inc.search(texts[c]):
                    continue
                if c.suffix in _SOURCE_EXT and _MAIN.search(texts[c]):
                    if c.parent in near:
                        return c, []
                    continue
                if c.name not in seen:
                    seen.add(c.name)
                    nxt.append(c.name)
                    if c.suffix in _SOURCE_EXT:
                        units.append(c)
        frontier = nxt
    # a program of several translation units: a main() of the file's folder (or one above it, up to the project's
    # root) calling (maybe through other sources) a host function defined in the file or in a source that
    # includes it, as a linker would join them
    texts[path] = text
    unit_dirs = {u.parent for u in units} | set(near)
    sources = [c for c in files if c.parent in unit_dirs and c.suffix in _SOURCE_EXT and not _MAIN.search(texts[c])]
    sources = list(dict.fromkeys(units + sources))
    calls = {}
    for u in sources:
        fns = host_functions(texts[u])
        calls[u] = re.compile(r"\b(?:" + "|".join(map(re.escape, fns)) + r")\s*(?:<[^;()]*>)?\s*\(") if fns else None
    for m in files:
        if m.suffix not in _SOURCE_EXT or not _MAIN.search(texts[m]):
            continue
        reached, todo = [], [m]
        while todo:
            caller = todo.pop()
            for u in sources:
                if u not in reached and u != caller and calls[u] is not None and calls[u].search(texts[caller]):
                    reached.append(u)
                    todo.append(u)
        if any(u in reached for u in units):
            return m, sorted(reached)
    # a kernel file the program loads at run time (a driver API module built from it, or its source read for NVRTC):
    # a main() next to it (or one folder up, or beside) that names it, or such a module, in a string
    # (sim/host_driver.py); it is compiled into the program as a unit of its own
    for m in files:
        if m.suffix in _SOURCE_EXT and m.parent in near and _MAIN.search(texts[m]) and loaded_as(m, path):
            return m, [path]
    return None, []


def loaded_as(prog: Path, kernel_file: Path) -> str | None:
    """The name by which `prog` (its text, or a local header it includes: `#define MODULE "x64.ptx"`) spells
    `kernel_file` or a module built from it in a string, to load its kernels at run time; None where it does not."""
    from .sim.host_driver import names_kernel_file

    text = _read(prog)
    heads = [prog.parent / n for n in re.findall(r'^[ \t]*#\s*include\s*"([^"]+)"', text, re.M)]
    for t in [text] + [_read(h) for h in heads if h.suffix not in _SOURCE_EXT and h.is_file()]:
        spelled = names_kernel_file(t, kernel_file)
        if spelled:
            return spelled
    return None


def sim_source(p: Path, include_dirs=()) -> str:
    """The text the simulator runs `p`'s kernels from, standing alone: its program's prefix (when a program
    includes it) and every local header inlined, so it needs no folder of the user's (the sandbox shows none)."""
    from .sim.preprocess import _CURRENT, inline_local_includes

    p = Path(p)
    text = with_program_prefix(p, p.read_text(errors="replace"))
    dirs = [str(p.parent)] + [str(d) for d in include_dirs if str(d) != str(p.parent)]
    return inline_local_includes(text, dirs).replace(_CURRENT, p.name)


def with_program_prefix(p: Path, text: str) -> str:
    """`text` (the file `p`) as its program's kernels see it: the program's text before the #include first."""
    prefix = program_prefix(find_program(p), p)
    return prefix + f'\n#line 1 "{p.name}"\n' + text if prefix else text


def program_prefix(prog: Path | None, target: Path) -> str:
    """The program's text before the line that #includes `target` (what the kernels of `target` see first)."""
    if prog == target:
        return ""
    if prog is None:   # no main() found (a C main elsewhere): a source unit that #includes the file still decides
        prefix = next((t[:mm.start()] for x, t in _includers(target) if x.suffix in _SOURCE_EXT   # what it sees
                       for mm in [_include_of(target).search(t)]), "")
        return _close_linkage(prefix) + "#endif\n" * _open_conditionals(prefix)
    try:
        text = prog.read_text(errors="replace")
    except OSError:
        return ""
    m = _include_of(target).search(text)
    prefix = text[:m.start()] if m else _chain_prefix(prog, target)
    if prefix is None:
        # a unit of its own program includes the file (hybridsort's bucketsort.cu #includes bucketsort_kernel.cu
        # after bucketsort.cuh, and main.cu calls into it): that unit's text before the #include
        prefix = next((t[:mm.start()] for x, t in _includers(target) if x.suffix in _SOURCE_EXT
                       for mm in [_include_of(target).search(t)]), "")
    return _close_linkage(prefix) + "#endif\n" * _open_conditionals(prefix)


def _include_of(target: Path):
    return re.compile(r'^[ \t]*#\s*include\s*["<][^">]*\b' + re.escape(target.name) + r'[">]', re.M)


def _includers(target: Path) -> list[tuple[Path, str]]:
    """(file, text) of the files next to `target` that #include it."""
    try:
        files = sorted(c for c in target.parent.iterdir() if c.is_file() and c != target
                       and c.suffix in _SOURCE_EXT + (".h", ".cuh", ".hpp", ".inl"))
    except OSError:
        return []
    inc = _include_of(target)
    return [(c, t) for c in files for t in [_read(c)] if inc.search(t)]


def _chain_prefix(prog: Path, target: Path, depth: int = 0, seen: tuple = ()) -> str | None:
    """What `target`'s kernels see first when `prog` includes it through other files (myocyte's main.cu includes
    define.c, then work_2.cu, which includes solver_2.cu): each includer's text before its #include, outermost
    first; None when `prog` does not reach `target` that way."""
    if depth > 3:
        return None
    for x, t in _includers(target):
        if x == prog or x in seen:
            continue
        mm = _include_of(target).search(t)
        top = _read(prog)
        m = _include_of(x).search(top)
        up = top[:m.start()] if m else _chain_prefix(prog, x, depth + 1, seen + (target,))
        if up is not None:
            return up + f'\n#line 1 "{x.name}"\n' + t[:mm.start()]
    return None


LOCAL_INCLUDE = re.compile(r'^[ \t]*#\s*include\s*"([^"]+)"', re.M)


def _cuda_kernels_on_disk(f: Path) -> tuple[str, list[str]]:
    from .source import find_kernels

    body = _read(f)
    return body, [k.name for k in find_kernels(body, str(f)).kernels if k.language == "cuda"]


def included_kernels(p: Path, text: str, include_dirs=(), through: int = 3,
                     kernels_of: Callable[[Path], tuple[str, list[str]]] = _cuda_kernels_on_disk
                     ) -> list[tuple[int, Path, list[str]]]:
    """The local files `text` (the file `p`) #includes, directly or through up to `through` levels of local
    headers, that define CUDA kernels: (the 0-based line of the #include in `text` that leads there, the file, its
    kernels' names), in include order. `kernels_of(file)` gives a file's text and CUDA kernels (the editor passes
    its index's)."""
    out: list[tuple[int, Path, list[str]]] = []
    seen: set[Path] = {Path(os.path.normpath(p.absolute()))}
    todo: list[tuple[Path, str, int, int | None]] = [(p.parent, text, 0, None)]
    while todo:
        here, t, depth, top = todo.pop(0)
        for m in LOCAL_INCLUDE.finditer(t):
            for d in [here, *map(Path, include_dirs)]:
                f = (d / m.group(1))
                if f.is_file():
                    break
            else:
                continue
            f = Path(os.path.normpath(f.absolute()))
            if f in seen:
                continue
            seen.add(f)
            line = t.count("\n", 0, m.start()) if top is None else top
            body, names = kernels_of(f)
            if names:
                out.append((line, f, names))
            if depth < through:
                todo.append((f.parent, body, depth + 1, line))
    return out


def unit_chain(unit: Path, target: Path, depth: int = 0, seen: tuple = ()) -> tuple[str, list[Path]] | None:
    """How a source unit of the program reaches `target` through local #includes in other folders (runner.cu
    includes kernels.cuh, which includes kernels/11_x.cuh): the text each file on the way has before the #include
    that leads on, outermost first, and those files' folders (where the includes that text names are found).
    None where `unit` does not reach `target`."""
    if depth > 4 or unit in seen:
        return None
    text = _read(unit)
    for m in LOCAL_INCLUDE.finditer(text):
        inc = (unit.parent / m.group(1))
        try:
            inc = inc.resolve()
        except OSError:
            continue
        if inc == target.resolve():
            return text[:m.start()], [unit.parent]
        if inc.is_file():
            got = unit_chain(inc, target, depth + 1, seen + (unit,))
            if got is not None:
                return text[:m.start()] + f'\n#line 1 "{inc.name}"\n' + got[0], [unit.parent] + got[1]
    return None


def _close_linkage(text: str) -> str:
    """`text` (a program cut at its #include) without the `extern "C" {` it leaves open (a wrapper that wraps its
    includes in `#ifdef __cplusplus extern "C" { #endif`): the block's `}` is past the cut."""
    from .sim.preprocess import mask_comments

    code = mask_comments(text)
    out = text
    for m in reversed(list(re.finditer(r'\bextern\s+"C"\s*\{', text))):
        if code[m.start()] != "e":
            continue     # inside a comment
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        if depth:    # never closed before the cut
            out = out[:m.start()] + " " * (m.end() - m.start()) + out[m.end():]
    return out


def _open_conditionals(text: str) -> int:
    """How many #if/#ifdef/#ifndef are still open at the end of `text` (a program cut at its #include)."""
    from .sim.preprocess import mask_comments

    depth = 0
    for ln in mask_comments(text).splitlines():
        d = re.match(r"\s*#\s*(if|ifdef|ifndef|endif)\b", ln)
        if d:
            depth = depth + 1 if d.group(1) != "endif" else max(0, depth - 1)
    return depth


def _first_error(tr) -> str | None:
    errs = [i for i in tr.report if i.severity == "error" and getattr(i, "scope", "kernel") == "kernel"]
    if not errs:
        return None
    e = errs[0]
    line = f"line {e.line + 1}: " if isinstance(e.line, int) else ""
    return f"{line}{e.construct}: {e.message}"


def port_file(path: str | Path, *, kernels: list[str] | None = None, argv: list[str] | tuple = (),
              defines: dict[str, str] | None = None, include_dirs: list[str] | tuple = (),
              capture_timeout: float = 60.0, write: bool = True, overwrite: bool = True,
              progress: Callable[[str], None] | None = None) -> PortReport:
    """Ports every kernel of `path` (or those named in `kernels`) and checks each port. Never raises for a
    kernel's failure: each gets its verdict."""
    from .source import find_kernels
    from .translate import TranslateError, translate_kernel

    say = progress or (lambda _m: None)
    t0 = time.monotonic()
    p = Path(path)
    report = PortReport(file=str(p))
    try:
        source = p.read_text(errors="replace")
    except OSError as e:
        report.error = f"{p}: cannot read the file ({e.strerror})"
        return report
    own = source      # the file's own text (source gets the program's prefix below)
    parsed = find_kernels(source, str(p))
    errors = [d for d in parsed.diagnostics if d.severity == "error"]
    cuda = [k for k in parsed.kernels if k.language == "cuda"]
    if not cuda:
        why = f" (line {errors[0].line + 1}: {errors[0].message})" if errors else ""
        report.error = f"{p}: nothing to port: no CUDA kernel (__global__ function) found{why}"
        held = included_kernels(p, source, include_dirs)
        if held:   # a program whose kernels live in the files it #includes (main.cu including kernel.cu)
            files = "; ".join(f"{f.name} ({', '.join(ks)})" for _, f, ks in held)
            report.error = (f"{p}: nothing to port in this file: its CUDA kernels are in the files it includes: "
                            f"{files}. Port those (`ksearch port {held[0][1].name} --all`); this file's main() is "
                            f"the program that gives them their launches")
        return report
    chosen = [k for k in cuda if kernels is None or k.name in kernels]
    report.others = [f"{k.name} (line {k.range.start.line + 1})" for k in cuda if k not in chosen]
    missing = [n for n in (kernels or []) if n not in {k.name for k in cuda}]
    if missing:
        report.error = f"{p}: no CUDA kernel named {', '.join(missing)} (found: {', '.join(k.name for k in cuda)})"
        if not chosen:
            return report

    include_dirs = [str(p.parent)] + [str(d) for d in include_dirs if str(d) != str(p.parent)]
    capture = _capture(p, argv, defines or {}, include_dirs, capture_timeout, report, say)
    prefix = program_prefix(find_program(p), p)
    chain_dirs: list[str] = []
    if not prefix:   # a header a unit of the program reaches through headers in other folders (kernels.cuh)
        for unit in find_program_and_sources(p)[1]:
            got = unit_chain(unit, p)
            if got is not None:
                prefix = _close_linkage(got[0]) + "#endif\n" * _open_conditionals(got[0])
                chain_dirs = [str(d) for d in got[1]]
                break
    if defines:   # -D NAME=VALUE: the program was built with them, and so is the kernel the ports are checked against
        prefix = "".join(f"#define {n} {v}\n" for n, v in defines.items()) + (prefix or "")
    if prefix:   # a kernel file included by its program sees the program's #defines and types first
        parsed.preamble = find_kernels(prefix, str(p)).preamble + parsed.preamble
        from .translate.headers import prefix_helpers   # and its __device__ helpers (myocyte's solver_2)
        parsed.helpers = prefix_helpers(prefix, include_dirs, parsed.helpers)
        source = prefix + f'\n#line 1 "{p.name}"\n' + source
    from .translate.headers import header_preamble   # the local headers' macros and types reach both ports
    parsed.preamble = [e for e in header_preamble(source, include_dirs + [d for d in chain_dirs if d not in include_dirs])
                       if e not in parsed.preamble] + parsed.preamble
    define_ints = int_defines(parsed.preamble, defines or {})
    by_mode = _mode_captures(p, capture, chosen, argv, defines or {}, include_dirs, capture_timeout, say, report)
    left_out = _branches_not_taken(own, [prefix or ""] + [e for e in parsed.preamble if e.lstrip().startswith("#")],
                                   defines or {})
    for k in chosen:
        say(f"{k.name}: translating")
        v = KernelVerdict(kernel=k.name, line=k.range.start.line + 1, status="not_ported")
        report.kernels.append(v)
        out = left_out(k)
        if out and not any(o.name == k.name and o is not k and not left_out(o) for o in cuda):
            v.reason = (f"{k.name} is not compiled as {p.name} is built: its definition sits in a branch the "
                        f"preprocessor does not take ({out}); change that condition, or the #define it tests (or pass "
                        f"-D NAME=VALUE), to port it")
            continue
        twins = [o for o in cuda if o.name == k.name and o is not k and not left_out(o)]
        if twins:   # overloads: launches, modules and verdicts go by the kernel's name
            lines = sorted({k.range.start.line + 1, *(o.range.start.line + 1 for o in twins)})
            v.reason = (f"{k.name} is overloaded (kernels of that name at lines {', '.join(map(str, lines))}): ksearch "
                        f"tells kernels apart by name, so it cannot say which launch ran which; rename the overloads "
                        f"(one name each) to port them")
            continue
        cap_k, mode = by_mode.get(k.name, (capture, None))
        launches = with_deduced_template_args(k, _launches_for(cap_k, k.name))
        fn_args, launches, fn_note = function_instantiation(k, parsed, launches, cap_k.launches_of(k.name)
                                                            if cap_k is not None else [])
        if fn_note:
            v.notes.append(fn_note)
        try:
            tr = translate_kernel(parsed, k.name, str(p), function_args=fn_args)
        except TranslateError as e:
            v.reason = str(e)
            continue
        except Exception as e:  # a translator bug must not stop the other kernels
            v.reason = f"the translator failed on this kernel ({type(e).__name__}: {str(e)[:200]}); please report it"
            continue
        v.notes = v.notes + [f"line {i.line + 1 if isinstance(i.line, int) else '?'}: {i.construct}: {i.message}"
                             for i in tr.report if i.severity != "error"][:12]
        err = _first_error(tr)
        if err:
            v.reason = err
            continue
        mpath = module_path_for(p, k.name, len(cuda))
        v.module_path = str(mpath)
        v.status = "unverified"
        if mode:
            v.notes.insert(0, f"launched when its program runs with `{mode}` (the program's own option; the bare run "
                              f"did not launch it)")
        say(f"{k.name}: checking the port on {len(launches) or 'a found'} launch(es)")
        _check_kernel(v, tr, source, k, p, cap_k, launches, define_ints, include_dirs)
        v.module_text = tr.module_text
        if write and (overwrite or not mpath.exists()):
            mpath.write_text(tr.module_text)
    report.seconds = time.monotonic() - t0
    return report


# options a program reads to choose which kernel (or variant) to run, as NVIDIA's samples spell them with
# helper_string.h (`getCmdLineArgumentInt(argc, argv, "kernel")`) or a plain strcmp on "-method=..."
_OPTION_READ = re.compile(r'\bgetCmdLineArgument(Int|Float|String|Value)?\s*\([^;"]*"(\w+)"|"-{1,2}(\w+)=')
_MODE_WORD = re.compile(r"(?i)^(kernel|method|mode|type|variant|version|alg\w*|impl\w*|test|which|k)$")
MODE_VALUES = 12          # option values tried, 0..MODE_VALUES-1
MODE_BUDGET_S = 120.0     # wall time spent on such runs per file (each runs the whole program on the CPU)


# a positional argument read as an integer: `kernel_num = atoi(argv[1])`, `std::stoi(argv[1])`, `strtol(argv[2], ...)`,
# `sscanf(argv[1], "%d", &k)`
_POS_READ = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*(?:[^;=?]*\?\s*)?(?:\(\s*\w+\s*\)\s*)?(?:std\s*::\s*)?"
                       r"(?:atoi|atol|atoll|stoi|stol|stoll|stoul|strtol|strtoul|strtoll|strtoull)"
                       r"\s*\(\s*argv\s*\[\s*(\d+)\s*\]")
# (the format is read from the unmasked text: masking blanks string literals)
_POS_SCANF = re.compile(r"\bsscanf\s*\(\s*argv\s*\[\s*(\d+)\s*\]\s*,\s*\"%l{0,2}[diu]\"\s*,\s*&\s*([A-Za-z_]\w*)")
_SELECTOR_WORD = re.compile(r"(?i)^(?:kernel\w*|\w*_?kernel|k_?num|kid|method\w*|mode|variant|version|alg\w*|"
                            r"impl\w*|which|choice|select\w*|test_?\w*|id|k)$")


def positional_selectors(texts: list[str]) -> list[tuple[int, str, list[int]]]:
    """Integer positional arguments a program reads to choose its kernel: (argv index, variable, values to try).
    The values are the case labels of a `switch` on that variable (or on the parameter it is passed as) and the
    literals it is compared with (`kernel_num == 2`), else 0..MODE_VALUES for a variable named like a selector;
    the value it starts with (`int kernel_num = 1;`, what the bare run chose) comes last."""
    from .sim.preprocess import mask_comments, split_top

    codes = [mask_comments(t) for t in texts]
    out: list[tuple[int, str, list[int]]] = []
    for code, raw in zip(codes, texts):
        reads = [(int(m.group(2)), m.group(1)) for m in _POS_READ.finditer(code)]
        reads += [(int(m.group(1)), m.group(2)) for m in _POS_SCANF.finditer(raw)
                  if code[m.start()] == "s"]   # not inside a comment
        for idx, var in reads:
            if idx < 1 or any(o[0] == idx for o in out):
                continue
            names = {var}
            # the variable passed on to a function: the name its parameter has there (run_kernel(kernel_num, ...))
            for c in codes:
                for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*)\)\s*;", c):
                    args = [a.strip() for a in split_top(m.group(2))]
                    if var not in args:
                        continue
                    i = args.index(var)
                    for c2 in codes:
                        for d in re.finditer(r"\b" + re.escape(m.group(1)) + r"\s*\(([^;{}()]*)\)\s*\{", c2):
                            params = split_top(d.group(1))
                            if i < len(params):
                                pm = re.search(r"([A-Za-z_]\w*)\s*(?:\[\s*\])?\s*$", params[i].split("=")[0])
                                if pm:
                                    names.add(pm.group(1))
            values: list[int] = []
            for c in codes:
                for n in names:
                    for m in re.finditer(r"\bswitch\s*\(\s*" + re.escape(n) + r"\s*\)\s*\{", c):
                        depth, j = 0, m.end() - 1
                        while j < len(c):
                            depth += {"{": 1, "}": -1}.get(c[j], 0)
                            if depth == 0:
                                break
                            j += 1
                        values += [int(v) for v in re.findall(r"\bcase\s+\(?\s*(-?\d+)\s*\)?\s*:", c[m.end():j])]
                    values += [int(v) for v in re.findall(r"\b" + re.escape(n) + r"\s*[=!]=\s*(-?\d+)\b", c)]
                    values += [int(v) for v in re.findall(r"\b(-?\d+)\s*[=!]=\s*" + re.escape(n) + r"\b", c)]
            if not values:
                if not _SELECTOR_WORD.match(var):
                    continue   # a size or a count read from the command line, not a choice
                values = list(range(MODE_VALUES + 1))
            else:   # the value no case or comparison names (a `default:` or an `else` branch) after them
                values = list(dict.fromkeys(values + [v for v in (0, max(values) + 1) if v >= 0]))
            start = [int(v) for v in re.findall(r"\b" + re.escape(var) + r"\s*=\s*(-?\d+)\s*;", code)]
            values = [v for v in values if v not in start[:1]] + [v for v in values if v in start[:1]]
            out.append((idx, var, values))
    return sorted(out)


def _brace_end(code: str, open_at: int) -> int:
    depth, j = 0, open_at
    while j < len(code):
        depth += {"{": 1, "}": -1}.get(code[j], 0)
        if depth == 0:
            return j
        j += 1
    return len(code)


def _launching_values(texts: list[str], var: str, values: list[int], kernels: set[str], *,
                      switch_vars: set[str] | None = None, only_hits: bool = False) -> list[int]:
    """`values` with those first whose `case N:` branch (of a switch on `var` or a parameter named alike) reaches one
    of `kernels`: names it, or calls a function whose body does (two calls deep), so that a ladder of a dozen
    kernels runs the program once for the one wanted rather than once for each kernel before it. `switch_vars`:
    only switches on a variable whose name contains one of these; `only_hits`: the reaching values alone."""
    from .sim.preprocess import mask_comments

    codes = [mask_comments(t) for t in texts]
    bodies: dict[str, str] = {}
    for c in codes:
        for d in re.finditer(r"\b([A-Za-z_]\w*)\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)\s*(?:const\s*)?\{", c):
            if d.group(1) not in _NOT_FN:
                bodies.setdefault(d.group(1), c[d.end() - 1:_brace_end(c, d.end() - 1)])

    def reaches(text: str, depth: int) -> bool:
        if any(re.search(r"\b" + re.escape(k) + r"\b", text) for k in kernels):
            return True
        return depth > 0 and any(reaches(bodies[f], depth - 1) for f in set(re.findall(r"\b([A-Za-z_]\w*)\s*[(<]", text))
                                 if f in bodies)
    hits: list[int] = []
    for c in codes:
        for m in re.finditer(r"\bswitch\s*\(\s*([A-Za-z_]\w*)\s*\)\s*\{", c):
            if switch_vars is not None and not any(v.lower() in m.group(1).lower() for v in switch_vars):
                continue
            block = c[m.end():_brace_end(c, m.end() - 1)]
            # this switch's own labels: a nested switch's (`case 9: switch (threads) { case 1024: ...`) stay in
            # the branch they belong to
            cases = [cm for cm in re.finditer(r"\bcase\s+\(?\s*(-?\d+)\s*\)?\s*:", block)
                     if block.count("{", 0, cm.start()) == block.count("}", 0, cm.start())]
            for i, cm in enumerate(cases):
                branch = block[cm.end():cases[i + 1].start() if i + 1 < len(cases) else len(block)]
                if int(cm.group(1)) in values and int(cm.group(1)) not in hits and reaches(branch, 2):
                    hits.append(int(cm.group(1)))
    return hits if only_hits else hits + [v for v in values if v not in hits]


def _option_values(texts: list[str], opt: str, missing: set[str]) -> list[int]:
    """The values of a numeric option (`-kernel=N`) to run the program with for `missing` kernels: those whose
    `case N:` of a switch on the option's variable (the one assigned from the option's read, or one named like the
    option: `whichKernel` for -kernel) reaches a missing kernel, first; the other values of 0..MODE_VALUES-1 only
    where some missing kernel is reached by no case (each run is the whole program on the CPU)."""
    from .sim.preprocess import mask_comments

    names = {opt}
    for t in texts:
        for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=\s*getCmdLineArgument\w*\s*\([^;]*\"" + re.escape(opt) + r"\"",
                             mask_comments(t)):
            names.add(m.group(1))
    values = list(range(MODE_VALUES))
    per = {k: _launching_values(texts, opt, values, {k}, switch_vars=names, only_hits=True) for k in missing}
    hits = list(dict.fromkeys(v for k in sorted(per) for v in per[k]))
    if all(per.values()):
        return hits
    return hits + [v for v in values if v not in hits]


def _mode_captures(p: Path, capture: Capture | None, chosen, argv, defines, include_dirs, timeout,
                   say, report: PortReport | None = None) -> dict[str, tuple[Capture, str]]:
    """Kernels the bare run did not launch, launched by re-running the program with its own kernel-choosing
    option (`-kernel=N`, `-method=N`, ...) or positional kernel number (`kernel_num = atoi(argv[1])`) at the values
    it distinguishes: kernel -> (that capture, the command line used). A program that refused to run without its
    kernel number (`if (argc != 2) { usage; exit(1); }`) is run with each of them."""
    if capture is None or argv:
        return {}
    from .sim.capture import _needs_arguments
    refused = capture.status == "failed" and _needs_arguments(capture)
    if capture.status == "failed" and not refused:
        return {}
    missing = {k.name for k in chosen if not capture.launches_of(k.name)}
    prog, units = find_program_and_sources(p)
    if not missing or prog is None:
        return {}
    try:
        text = prog.read_text(errors="replace")
    except OSError:
        return {}
    found: dict[str, tuple[Capture, str]] = {}
    t0 = time.monotonic()
    from .sim.preprocess import mask_comments
    others = [_read(u) for u in units if u != prog] + ([_read(p)] if p != prog else [])
    selectors = positional_selectors([text] + others)
    base = [] if refused else list(capture.argv)
    tried: list[str] = []
    tried_lines: set[str] = set()
    for idx, var, values in selectors[:1]:
        if len(base) < idx - 1:
            continue   # the arguments before it are not known
        values = _launching_values([text] + others, var, values, missing)
        lines = [base[:idx - 1] + [str(n)] + base[idx:] for n in values]
        lines = [ln for ln in lines if not (ln == list(capture.argv) and not refused)]
        tried_lines.update(" ".join(ln) for ln in lines)
        for line, cap in _runs(p, lines, defines, include_dirs, timeout, lambda: missing, t0, lambda ln: say(
                f"running the program as `{prog.stem} {' '.join(ln)}` ({var} = argv[{idx}]) for "
                f"{', '.join(sorted(missing))}")):
            tried.append(line[idx - 1])
            if cap is None or cap.status == "failed" and not cap.launches:
                continue
            _take(found, missing, cap, " ".join(line))
        if report is not None and refused and found:
            first = next(iter(found.values()))[0]
            loc = next((f"{prog.name}:{text.count(chr(10), 0, m.start()) + 1}" for m in re.finditer(
                r"\bargv\s*\[\s*" + str(idx) + r"\s*\]", mask_comments(text))), prog.name)
            report.capture.status, report.capture.error = first.status, first.error
            report.capture.seconds = round(sum(c.seconds for c in {id(c): c for c, _l in found.values()}.values()), 1)
            report.capture.launches = sum(len(c.launches) for c in {id(c): c for c, _l in found.values()}.values())
            report.capture.notes = [n for n in report.capture.notes if "may need input files or arguments" not in n]
            report.capture.notes.insert(0, (
                f"{prog.name} needs its kernel number as argument {idx} ({var}, read at {loc}): ran it as "
                f"`{prog.stem} N` with N = {', '.join(tried)}, as its code tells kernels apart; pass --arg to choose"))
    if refused:
        return found
    opts = []
    # an option read as a word (-type=float) anywhere: N = 0, 1, ... means nothing to it, also where its usage text
    # ("-type=<T>") is what names it
    words = {m.group(2) for m in _OPTION_READ.finditer(text) if m.group(1) == "String"}
    for m in _OPTION_READ.finditer(text):
        name = m.group(2) or m.group(3)
        if m.group(1) == "String" or name in words:
            continue
        if _MODE_WORD.match(name) and name not in opts:
            opts.append(name)
    # a kernel-choosing name first: it names what is wanted (-kernel= before -type=)
    opts.sort(key=lambda o: 0 if re.match(r"(?i)kernel|method|alg|impl", o) else 1)
    # a command line the capture took from the program's documentation (`myocyte 100 100 1`): its one-digit
    # arguments are the program's modes (0 or 1, which solver); the other values launch the other kernels
    base = list(capture.argv)
    for pos in [i for i, a in enumerate(base) if re.fullmatch(r"\d", a)][-2:]:
        lines = [base[:pos] + [str(n)] + base[pos + 1:] for n in range(4) if str(n) != base[pos]]
        lines = [ln for ln in lines if " ".join(ln) not in tried_lines]
        for line, cap in _runs(p, lines, defines, include_dirs, timeout, lambda: missing, t0, lambda ln: say(
                f"running the program as `{' '.join(ln)}` for {', '.join(sorted(missing))}")):
            if cap is None or cap.status == "failed":
                continue
            _take(found, missing, cap, " ".join(line))
    # a kernel the program uses only at small sizes (a small-matrix path below a threshold): the run's size
    # arguments of three digits or more (`--matrix-size=1024`, `solver 4096`) an eighth as large
    smaller = [re.sub(r"(^|=)(\d{3,})$", lambda m: m.group(1) + str(max(16, int(m.group(2)) // 8)), a) for a in base]
    if missing and smaller != base and " ".join(smaller) not in tried_lines:
        for line, cap in _runs(p, [smaller], defines, include_dirs, timeout, lambda: missing, t0, lambda ln: say(
                f"running the program as `{' '.join(ln)}` (smaller sizes) for {', '.join(sorted(missing))}")):
            if cap is None or cap.status == "failed":
                continue
            _take(found, missing, cap, " ".join(line))
    for opt in opts[:2]:
        if not missing:
            break
        values = _option_values([text] + others, opt, missing)
        for line, cap in _runs(p, [[f"-{opt}={n}"] for n in values], defines, include_dirs, timeout,
                               lambda: missing, t0, lambda ln: say(
                                   f"running the program with {ln[0]} for {', '.join(sorted(missing))}")):
            if cap is None:
                continue
            _take(found, missing, cap, line[0])
    return found


def _take(found: dict[str, tuple[Capture, str]], missing: set[str], cap: Capture, line: str) -> None:
    """The missing kernels `cap` launched: found (with the command line that launched them), no longer missing."""
    for name in sorted(missing):
        if _launches_for(cap, name):
            found[name] = (cap, line)
            missing.discard(name)


def _runs(p: Path, lines: list[list[str]], defines, include_dirs, timeout, missing, t0: float, announce):
    """(command line, its capture or None) for each of `lines` in order, while `missing()` names kernels and the
    file's mode budget lasts: the runs go side by side, as many as the machine has cores (up to 4; each is one
    program on the CPU), a batch at a time, so that no more are started once every kernel is found. `announce`
    (a command line) says each run as it starts."""
    from concurrent.futures import ThreadPoolExecutor

    width = max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=width) as pool:
        for at in range(0, len(lines), width):
            if not missing() or time.monotonic() - t0 > MODE_BUDGET_S:
                return
            batch = lines[at:at + width]
            for line in batch:
                announce(line)
            futs = [pool.submit(_capture, p, line, defines, include_dirs, timeout, PortReport(file=str(p)),
                                lambda _m: None) for line in batch]
            for line, fut in zip(batch, futs):
                yield line, fut.result()


def capture_for(p: Path, argv=(), defines=None, include_dirs=(), timeout: float = 60.0,
                progress: Callable[[str], None] | None = None) -> Capture | None:
    """The launches of the program that runs `p`'s kernels (cached by program text, headers, argv and defines);
    None when no program runs them."""
    p = Path(p)
    dirs = [str(p.parent)] + [str(d) for d in include_dirs if str(d) != str(p.parent)]
    return _capture(p, argv, defines or {}, dirs, timeout, PortReport(file=str(p)), progress or (lambda _m: None))


def _capture(p: Path, argv, defines, include_dirs, timeout, report: PortReport, say) -> Capture | None:
    prog = find_program(p)
    if prog is None:
        return None
    report.capture.program = str(prog)
    try:
        from .sim.capture import capture_program
    except ImportError:
        report.capture.status = "failed"
        report.capture.error = "launch capture is not available in this version"
        return None
    sources = find_program_and_sources(p)[1]
    spelled = loaded_as(prog, p) if sources == [p] else None
    if spelled:
        how = "reads it for NVRTC" if spelled == p.name else f"loads the module {spelled} built from it"
        report.capture.notes.append(f"{prog.name} {how} at run time: {p.name} is compiled into the capture, and "
                                    f"its kernels run through the capture's CPU stand-in of the driver API / NVRTC")
    elif sources and p in sources:
        report.capture.notes.append(f"{prog.name} calls host functions of {p.name}: both compiled and linked "
                                    f"as one program")
    elif sources:   # the file is a header reached through a source that #includes it (runner.cu -> kernels.cuh)
        names = ", ".join(_shown(s, prog) for s in sources)
        verb = "#includes" if len(sources) == 1 else "#include"
        report.capture.notes.append(f"{prog.name} calls host functions of {names}, which {verb} {p.name} (directly or "
                                    f"through other headers): compiled and linked with it as one program")
    key = _capture_key(prog, p, argv, defines, include_dirs, sources)
    cached = _capture_cache() / key
    cap = _read_cached(cached)
    if cap is not None:
        say(f"using the capture of {prog.name} made earlier (same program, arguments and headers)")
    else:
        say(f"running {prog.name}'s main() on the CPU to capture its launches")
        # each process captures into a folder of its own and publishes it with one rename: a reader never sees a
        # half-written capture, and a capture in use (a scaled re-run's files) is never replaced under it
        cached.parent.mkdir(parents=True, exist_ok=True)
        for old in cached.parent.glob(key + ".tmp*"):   # failed captures of this key kept an hour (their notes)
            try:
                if time.time() - old.stat().st_mtime > 3600:
                    shutil.rmtree(old, ignore_errors=True)
            except OSError:
                pass
        tmp = Path(tempfile.mkdtemp(prefix=key + ".tmp", dir=cached.parent))
        cap = capture_program(prog, argv=list(argv), defines=dict(defines), include_dirs=list(include_dirs),
                              timeout_s=timeout, workdir=str(tmp), sources=sources)
        if cap.status != "failed":   # a failure may be the machine's (a busy CPU): try again next time
            cap = _publish(cap, tmp, cached)
    report.capture.status = cap.status
    report.capture.launches = len(cap.launches)
    report.capture.error = cap.error
    report.capture.seconds = cap.seconds
    report.capture.notes = (report.capture.notes + [n.message for n in cap.notes])[:20]
    return cap


def _branches_not_taken(text: str, before: list[str], defines: dict) -> Callable[[object], str | None]:
    """For a kernel of `text`: where its definition is left out by a preprocessor branch the build does not take
    (`#ifndef X` where the file defines X, `#if 0`), as `line N: #ifndef X`; None where it is compiled, or where that
    cannot be decided here: the condition names a macro nothing visible defines (a -D flag or a header not read here
    could). `before`: the texts the file is compiled after (its program's prefix, its local headers' directives).
    The file's conditionals are resolved once; each kernel is a lookup."""
    from .source.conditionals import PREDEFINED, has_conditionals, known_macros, resolve_conditionals

    if not has_conditionals(text):
        return lambda _k: None
    macros = known_macros([t for t in before if t], dict(PREDEFINED))
    macros.update({n: str(v) for n, v in defines.items()})
    resolved, after = resolve_conditionals(text, macros)
    kept, orig = resolved.split("\n"), text.split("\n")

    def where(k) -> str | None:
        line = k.range.start.line
        if line >= len(orig) or line >= len(kept) or not orig[line].strip() or kept[line].strip():
            return None
        depth = 0
        for i in range(line - 1, -1, -1):   # the innermost conditional around the definition
            m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", orig[i])
            if not m:
                continue
            if m.group(1) == "endif":
                depth += 1
            elif depth == 0:
                cond = " ".join(m.group(2).split("//")[0].split())
                names = set(re.findall(r"[A-Za-z_]\w*", cond)) - {"defined"}
                unknown = sorted(n for n in names if n not in macros and n not in after)
                at = f"line {i + 1}: #{m.group(1)}{' ' + cond if cond else ''}"
                # a macro nothing visible defines is undefined as the file is built without -D flags (a Makefile's
                # flag or a header not read here could define it: the reason says so)
                return at + (f", and nothing here defines {', '.join(unknown)}" if unknown else "")
            elif m.group(1) in ("if", "ifdef", "ifndef"):
                depth -= 1
        return None
    return where


def _shown(f: Path, prog: Path) -> str:
    """`f` as a person finds it from the program's folder (src/runner.cu)."""
    try:
        return str(f.relative_to(prog.parent))
    except ValueError:
        return str(f)


def _read_cached(cached: Path) -> Capture | None:
    """The capture published at `cached`, or None (none yet, or unreadable)."""
    if not (cached / "capture.json").is_file():
        return None
    try:
        cap = Capture.read(cached)
    except (ValueError, OSError):
        return None
    cap.dir = str(cached)
    return cap


def _publish(cap: Capture, tmp: Path, cached: Path) -> Capture:
    """Moves the capture made in `tmp` to `cached` in one rename (capture.json written first, so the folder is
    whole when it appears). Where another process published the same capture first, its copy is kept (it may be in
    use) and this one is dropped; a stale folder without a readable capture.json is moved aside, then removed."""
    cap.dir = str(cached)
    try:
        (tmp / "capture.json").write_text(cap.model_dump_json(indent=1))
    except OSError:
        cap.dir = str(tmp)
        return cap
    for _attempt in range(3):
        try:
            os.rename(tmp, cached)
            return cap
        except OSError:
            pass
        other = _read_cached(cached)
        if other is not None:            # the same program, arguments and headers, published by another process
            shutil.rmtree(tmp, ignore_errors=True)
            return other
        aside = cached.with_name(f"{cached.name}.stale{os.getpid()}.{time.monotonic_ns()}")
        try:
            os.rename(cached, aside)     # a folder left by an older version, or a crashed writer
            shutil.rmtree(aside, ignore_errors=True)
        except OSError:
            pass
    cap.dir = str(tmp)
    return cap


def _capture_cache() -> Path:
    root = os.environ.get("KSEARCH_CAPTURE_CACHE") or str(Path(tempfile.gettempdir()) / f"ksearch-capture-{os.getuid()}")
    return Path(root)


def _capture_key(prog: Path, target: Path, argv, defines, include_dirs, sources=()) -> str:
    """Same program text, headers next to it, arguments and defines: the same capture."""
    h = hashlib.sha256()
    folders = {prog.parent, target.parent, *(s.parent for s in sources)}
    heads = {x for d in folders for x in d.iterdir() if x.suffix in (".h", ".cuh", ".hpp")}
    for f in sorted({prog, target, *sources} | heads):
        try:
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        except OSError:
            pass
    from .sim import build as _build, capture as _cap
    for n in _cap._HOST_HEADERS:   # a new runtime (ksim_host.h, ksim_cub.h, ...) records differently: capture again
        try:
            h.update(_build.HEADER.with_name(n).read_bytes())
        except OSError:
            pass
    # and so do new capture code and new stand-ins for the libraries a program includes
    from .sim import capture_scale as _cs, host_driver as _hd, host_headers as _hh, host_helpers as _hp, \
        host_source as _hs, host_thrust as _ht
    for mod in (_cap, _cs, _hd, _hs, _hh, _hp, _ht):
        try:
            h.update(Path(mod.__file__).read_bytes())
        except OSError:
            pass
    h.update(json.dumps([str(prog), list(argv), dict(defines), list(include_dirs)], sort_keys=True).encode())
    return h.hexdigest()[:24]


def function_instantiation(k, parsed, launches: list[LaunchRecord], seen: list[LaunchRecord] = ()
                           ) -> tuple[dict[str, str], list[LaunchRecord], str]:
    """A kernel templated on a function (`template <fn_ptr F>`): MLX kernels take no function as a template
    argument, so the port is for the function the first captured launch passes (of those to check on, else of
    every launch `seen`, recorded or not), and is checked on the launches that pass the same. Returns
    ({parameter: function}, those launches, a note); nothing to do otherwise."""
    from .translate.translator import _function_pointer_kind, function_name

    idx = [i for i, tp in enumerate(k.template_params) if _function_pointer_kind(tp, parsed.source)]
    named = [ln for ln in launches if len(ln.template_args) > max(idx, default=-1)]
    pool = named or [ln for ln in seen if len(ln.template_args) > max(idx, default=-1)]
    if not idx or not pool:
        return {}, launches, ""

    def fns(ln: LaunchRecord) -> dict[str, str]:
        return {k.template_params[i].name: function_name(ln.template_args[i]) or ln.template_args[i].strip()
                for i in idx}

    chosen = fns(pool[0])
    same = [ln for ln in named if fns(ln) == chosen]
    others = sorted({", ".join(f"{a} = {b}" for a, b in fns(ln).items()) for ln in named if fns(ln) != chosen})
    what = ", ".join(f"{a} = {b}" for a, b in chosen.items())
    note = (f"the port is for {what}, the function the program's launch passes (MLX kernels take no function as "
            "a template argument)" + (f"; launches with {'; '.join(others)} need a port of their own "
                                      "(port again with that function written in its place)" if others else ""))
    return chosen, same, note


def with_deduced_template_args(k, launches: list[LaunchRecord]) -> list[LaunchRecord]:
    """Launches of a template kernel that name no template arguments (`norm<<<g, b>>>(out, x, n)` with `const T* x`:
    C++ deduces T from the arguments) get them as the compiler deduced them: each typename parameter from the
    recorded element type of a pointer parameter written in terms of it (`T*`, `const T*`), defaults for the rest.
    A launch whose arguments do not decide every parameter stays as recorded."""
    if not k.template_params:
        return launches
    from .sim.mlx_kernels import CUDA_TYPES

    out = []
    typenames = {tp.name for tp in k.template_params if tp.kind == "typename"}
    for ln in launches:
        if len(ln.template_args) >= len(k.template_params):
            out.append(ln)
            continue
        # the leading arguments the launch writes (`k<256><<<...>>>(payoff, ...)`), the rest deduced
        got: dict[str, str] = {tp.name: v for tp, v in zip(k.template_params, ln.template_args)}
        for p, a in zip(k.params, ln.args):
            base = re.sub(r"\b(?:const|volatile|__restrict__|restrict)\b|[*&\s]", "", p.type)
            if p.pointer and a.dtype in CUDA_TYPES and base in typenames:
                got.setdefault(base, CUDA_TYPES[a.dtype])
            elif not p.pointer and base in typenames and a.kind in ("struct", "scalar") and (a.arg_type or a.ctype):
                # a functor or payoff passed by value (`Payoff payoff`): the type of the argument passed
                actual = " ".join(re.sub(r"\b(?:const|volatile|struct|class)\b|&", " ", a.arg_type or a.ctype).split())
                if re.fullmatch(r"[\w:<>, ]+", actual):
                    got.setdefault(base, actual)
            elif not p.pointer and a.kind == "struct" and a.arg_type:   # std::bool_constant<B>{}: B from its type
                for n, v in _deduced_from_type(p.type, a.arg_type, {tp.name for tp in k.template_params}).items():
                    got.setdefault(n, v)
        values = [got.get(tp.name, tp.default) for tp in k.template_params]
        out.append(ln.model_copy(update={"template_args": values}) if all(values) else ln)
    return out


def _type_args(t: str) -> tuple[str, list[str]] | None:
    """`ns::Name<a, b<c>>` -> ("Name", ["a", "b<c>"]); std::bool_constant<X> as what it stands for,
    integral_constant<bool, X>; None where `t` is no template-id."""
    from .sim.preprocess import split_top

    t = " ".join(re.sub(r"\b(?:const|volatile|struct|class)\b", " ", t).split())
    m = re.fullmatch(r"(?:[\w:]*::)?\s*(\w+)\s*<(.*)>", t)
    if not m:
        return None
    name, args = m.group(1), [x.strip() for x in split_top(m.group(2))]
    if name == "bool_constant" and len(args) == 1:
        return "integral_constant", ["bool", args[0]]
    return name, args


def _deduced_from_type(declared: str, actual: str, names: set[str]) -> dict[str, str]:
    """Template parameters `names` that a by-value parameter of type `declared` (`std::bool_constant<Atomic>`,
    `Tag<N>`) takes from the type of the argument passed (`std::integral_constant<bool, true>`): {name: value}."""
    d, a = _type_args(declared), _type_args(actual)
    if d is None or a is None or d[0] != a[0] or len(d[1]) != len(a[1]):
        return {}
    out = {}
    for x, v in zip(d[1], a[1]):
        if x in names:
            v = re.sub(r"^\((?:unsigned |signed )?\w+(?: \w+)*\)\s*(-?\d+)$", r"\1", v)   # "(char)3" -> "3"
            out[x] = v
    return out


def _launches_for(capture: Capture | None, kernel: str) -> list[LaunchRecord]:
    if capture is None:
        return []
    usable = [ln for ln in capture.launches_of(kernel) if not ln.too_large and not ln.sim_error]
    # launches quick to replay first (the checks run each six times: the original and two ports, races twice);
    # one slower than the capture's limit only where there is no other
    from .sim.capture import SLOW_S
    quick = [ln for ln in usable if (ln.seconds or 0.0) <= SLOW_S]
    usable = quick or sorted(usable, key=lambda ln: ln.seconds or 0.0)[:1]
    # a launch passing a null (or unknown) pointer cannot be given to the port as an array: others first
    whole = [ln for ln in usable if not any(a.kind in ("null", "unknown_pointer") for a in ln.args)]
    usable = whole or usable
    # distinct geometries first: they exercise the port more than repeats of one launch
    seen, first, rest = set(), [], []
    for ln in usable:
        key = (ln.grid, ln.block, ln.shared_mem, tuple(a.value for a in ln.args if a.kind == "scalar"))
        (rest if key in seen else first).append(ln)
        seen.add(key)
    return (first + rest)[:MAX_CHECKED_LAUNCHES]


def _why_no_launch(capture: Capture | None, kernel: str) -> str | None:
    """Why a kernel has no captured launch to be checked on, in the user's words."""
    if capture is None:
        return None
    mine = capture.launches_of(kernel)
    # the simulator stopping in the kernel says more than its size (the capture already tried smaller sizes)
    failed = [ln for ln in mine if ln.sim_error]
    from .sim.capture import DEVICE_SIZES
    fixed = next((n.message.split(": ", 1)[1] for n in capture.notes
                  if DEVICE_SIZES in n.message and kernel in n.message.split(": ", 1)[0].split(", ")), None)
    if failed:
        return f"its launches stopped in the simulator ({failed[0].sim_error})" + (f"; {fixed}" if fixed else "")
    if fixed:
        return f"the program launched it {len(mine)} time(s): {fixed}"
    big = [ln for ln in mine if ln.too_large]
    if big:
        return (f"the program launched it {len(mine)} time(s), each with more data than the capture records "
                f"(its byte budget): run the program at smaller sizes (-D NAME=VALUE or --arg) to check it on them")
    if capture.status == "failed" and capture.launches and capture.error:
        # the program ran, launched other kernels, and stopped before this one (its time budget ran out in one)
        return f"its program stopped before launching it ({capture.error})"
    return "the program never launched it" if capture.status != "failed" else "its program did not run"


def int_defines(preamble: list[str], given: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in preamble:
        m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)\s+\(?\s*(\d+)\s*\)?\s*$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    for n, v in given.items():
        if str(v).isdigit():
            out[n] = int(v)
    return out


def _check_kernel(v: KernelVerdict, tr, source: str, k, p: Path, capture: Capture | None,
                  launches: list[LaunchRecord], define_ints: dict[str, int], include_dirs) -> None:
    from .portcheck import check_captured, check_inferred

    if launches:
        v.workload = "captured"
        res = check_captured(tr.module_text, source, k, p, capture, launches, include_dirs)
    else:
        why_none = _why_no_launch(capture, k.name)
        res = check_inferred(tr.module_text, source, k, p, define_ints, include_dirs)
        v.workload = "inferred" if res.launches else "none"
        if not res.launches and why_none:
            res.reason = f"{why_none}; {res.reason}" if res.reason else why_none
    v.notes = list(res.notes) + v.notes
    v.dialects = res.dialects
    v.messages = res.messages
    v.launches_checked = res.launches
    v.checked = res.checked
    if res.passed:
        v.status = "verified"
    else:
        v.reason = res.reason
