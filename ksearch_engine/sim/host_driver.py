"""Kernels a program loads at run time, for the launch capture: modules (the CUDA driver API's cuModuleLoad /
cuModuleLoadData of a .ptx, .cubin or .fatbin built from a kernel file) and NVRTC programs (the kernel file's source
compiled while the program runs).

Such a kernel file has no includer: the program names it in a string literal instead, by its own name
("vectorAdd_kernel.cu", read and given to NVRTC) or by a module built from it (the same stem with .ptx, .cubin or
.fatbin, maybe with a 64/32 suffix: "vectorAdd_kernel64.fatbin"). ``names_kernel_file`` is that rule, used by the
program search (portfile.find_program_and_sources) and by the capture (``loaded_kernel_files``).

The capture compiles each such kernel file into the program as a translation unit of its own (capture._run), and
``prepare`` adds what the CPU stand-in of the driver API and NVRTC (ksim_driver.h) needs:

* in each unit of a program that uses them, one registration per kernel (``ksim_drv::add``) under the name of the
  file defining it: the kernel's declared name (extern "C" or not), or for a template kernel each name expression
  the program spells ("scale<float>"); its trampoline, instantiated from the kernel's own type, reads
  cuLaunchKernel's parameter slots as the declared parameter types and launches through the same path as <<<>>>;
* one more unit: the table of kernel files and the module names each may be opened by, and the fopen/fopen64 that
  open the capture's marker file where such a module (or a CUDA header such a kernel file includes) is not there.
"""

from __future__ import annotations

import re
from pathlib import Path

from .preprocess import mask_comments

MODULE_EXT = (".ptx", ".cubin", ".fatbin")
_MODULE_SUFFIX = ("", "64", "32", "_64", "_32")
# a program that loads kernels itself (directly or through a helper header such as the samples' nvrtc_helper.h)
_LOADS = re.compile(r"\b(?:cuModuleLoad(?:Data|DataEx|FatBinary)?|cuModuleGetFunction|cuLaunchKernel|"
                    r"cuLaunchCooperativeKernel|nvrtcCreateProgram)\s*\(")
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_STRING_OR_COMMENT = re.compile(r'"((?:[^"\\\n]|\\.)*)"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
# directives whose strings name files the compiler reads, not the program (`#line 1 "x.cu"`, `#include "x.h"`)
_NOT_NAMES = re.compile(r'^[ \t]*#[ \t]*(?:line|include|\d)[^\n]*', re.M)
_GLOBAL = re.compile(r"__global__[^(;{]*?\b([A-Za-z_]\w*)\s*\(")
_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)
KERNEL_FILE_EXT = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".cxx")


def module_names(kernel_file: Path) -> list[str]:
    """The names a program may open `kernel_file` by: its own first, then the modules built from it."""
    stem = kernel_file.stem
    return [kernel_file.name] + [f"{stem}{s}{ext}" for s in _MODULE_SUFFIX for ext in MODULE_EXT]


def loads_kernels(text: str) -> bool:
    """Whether `text` (a program, its helper headers inlined) loads kernels through the driver API or NVRTC."""
    return bool(_LOADS.search(mask_comments(text)))


def string_names(text: str) -> set[str]:
    """The file names the string literals of `text`'s code spell (the last part of a path)."""
    out = set()
    text = _NOT_NAMES.sub("", text)
    for m in _STRING_OR_COMMENT.finditer(text):
        if m.group(1) is None:
            continue   # a comment or a character literal
        s = m.group(1).strip()
        if s and len(s) < 512:
            out.add(re.split(r"[/\\]", s)[-1])
    return out


def names_kernel_file(text: str, kernel_file: Path) -> str | None:
    """The name by which `text` spells `kernel_file` in a string literal (its own, or a module built from it);
    None where it does not."""
    return _spelled(string_names(text), kernel_file)


def _spelled(names: set[str], kernel_file: Path) -> str | None:
    return next((n for n in module_names(kernel_file) if n in names), None)


def kernel_names(text: str) -> list[str]:
    """Names of the __global__ functions `text` defines."""
    return list(dict.fromkeys(_GLOBAL.findall(mask_comments(text))))


def loaded_kernel_files(texts: list[str], folders: list[Path], exclude: set[Path]) -> list[tuple[Path, str]]:
    """(kernel file of `folders`, the name the program gives it) for each file with kernels that the program texts
    name in a string literal and that is not already part of it (`exclude`: the files it inlines or links)."""
    if not any(loads_kernels(t) for t in texts):
        return []
    names = set().union(*(string_names(t) for t in texts))
    out = []
    for d in folders:
        try:
            files = sorted(d.iterdir())
        except OSError:
            continue
        for f in files:
            if not f.is_file() or f.suffix not in KERNEL_FILE_EXT or f.resolve() in exclude:
                continue
            hit = _spelled(names, f)
            if hit is None:
                continue
            try:
                text = f.read_text(errors="replace")
            except OSError:
                continue
            if kernel_names(text) and not re.search(r"^\s*(?:int|void)\s+main\s*\(", text, re.M):
                out.append((f.resolve(), hit))
    return out


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _name_expressions(texts: list[str], kernel: str) -> list[str]:
    """Strings of the program that name an instantiation of the template kernel `kernel` ("scale<float>")."""
    out = []
    rx = re.compile(rf"^\s*(?:::)?(?:\w+::)*{re.escape(kernel)}\s*<[^\"]*>\s*$")
    for t in texts:
        for m in _STRING.finditer(t):
            if rx.match(m.group(1)) and m.group(1).strip() not in out:
                out.append(m.group(1).strip())
    return out


def registrations(unit, program_texts: list[str]) -> str:
    """The registration lines of `unit`'s kernels (a host_source.Program), each under the file defining it."""
    lines = []
    seen: set[str] = set()
    for f in unit.files:
        try:
            own = f.read_text(errors="replace")
        except OSError:
            continue
        for name in kernel_names(own):
            info = unit.kernels.get(name)
            if info is None or name in seen:
                continue   # overloads: no single type to read the slots as
            seen.add(name)
            parts = info.qualified.split("::")
            if any(not p for p in parts):
                continue   # an anonymous namespace
            if info.is_template:
                for expr in _name_expressions(program_texts, name):
                    targs = expr[expr.index("<") + 1:expr.rindex(">")].strip()
                    lines.append(f'static int ksim_drv_reg_{len(lines)} = ksim_drv::add("{_escape(f.name)}", '
                                 f'"{_escape(expr)}", "{name}", "{_escape(targs)}", &{info.qualified}<{targs}>);')
            else:
                lines.append(f'static int ksim_drv_reg_{len(lines)} = ksim_drv::add("{_escape(f.name)}", "{name}", '
                             f'"{name}", "", &{info.qualified});')
    return "\n".join(lines)


def prepare(prog, extra: list, loaded: list[tuple[Path, str]]) -> tuple[list, list[dict]]:
    """For a program that loads kernels at run time: its units with their kernels registered, and one more unit
    (the kernel files' module names, the marker files' fopen); notes (CaptureNote fields) on the files compiled in.
    Other programs come back as they are."""
    from .host_source import Program
    from . import host_headers

    units = [prog, *extra]
    texts = [u.text for u in units]
    if not any(loads_kernels(t) for t in texts):
        return extra, []
    for u in units:
        if u.language == "c":
            continue
        reg = registrations(u, texts)
        if reg:
            u.text += f'\n#include <cuda.h>\n#line 1 "ksim-driver"\n{reg}\n'
    files: list[Path] = []
    for u in units:
        files += [f for f in u.files if f not in files and kernel_names(f.read_text(errors="replace"))]
    table = []
    for f in files:
        text = f.read_text(errors="replace")
        heads = [h for h in dict.fromkeys(_HEADER.findall(mask_comments(text))) if h in host_headers.FILES]
        shown = prog.display.get(f.name, f.name)
        table.append(f'static int ksim_drv_mod_{len(table)} = ksim_drv::add_module_file("{_escape(f.name)}", '
                     f'"{_escape(shown)}", {{{", ".join(chr(34) + _escape(n) + chr(34) for n in module_names(f))}}}, '
                     f'{{{", ".join(chr(34) + _escape(h) + chr(34) for h in heads)}}});')
    driver = Program(text='#include "ksim_host.h"\n#include <cuda.h>\n#line 1 "ksim-driver"\n' + "\n".join(table)
                     + "\nKSIM_DRIVER_OPEN_STAND_INS\n")
    notes = []
    main = prog.display.get(prog.files[0].name, prog.files[0].name) if prog.files else ""
    for f, spelled in loaded:
        shown = prog.display.get(f.name, f.name)
        how = "reads it for NVRTC" if spelled == f.name else f"loads the module {spelled} built from it"
        notes.append(dict(kind="module", file=main or None, message=(
            f"{shown} compiled into the capture as a unit of its own: the program {how} (a string names it), and its "
            f"kernels run through the capture's CPU stand-in of the driver API / NVRTC")))
    return [*extra, driver], notes


def drop_registrations(units: list, stderr: str) -> bool:
    """The registrations g++ rejected (`ksim-driver:N:` in its diagnostics: a kernel left out by the preprocessor, a
    name expression whose template arguments do not compile in the kernel's file) blanked in every unit; whether
    any was. Such a kernel is then unknown to cuModuleGetFunction, which says so if the program asks for it."""
    bad = {int(n) for n in re.findall(r"ksim-driver:(\d+):", stderr)}
    dropped = False
    for u in units:
        at = u.text.rfind('#line 1 "ksim-driver"\n')
        if at < 0 or not bad:
            continue
        head, body = u.text[:at], u.text[at:].split("\n")
        for n in bad:   # body[0] is the #line directive: the section's line N is body[N]
            if 0 < n < len(body) and body[n].startswith("static int ksim_drv_reg_"):
                body[n] = ""
                dropped = True
        u.text = head + "\n".join(body)
    return dropped
