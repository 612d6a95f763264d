"""Compiles a generated translation unit into a shared library, cached by the hash of its text.

Compiler diagnostics are mapped back to the kernel's own lines: the generated text marks each part
with ``#line N "name"`` (``source``, ``header``, the ``.cu`` file name), so g++ reports those names.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from .errors import SimError

HEADER = Path(__file__).with_name("ksim.h")
FLAGS = ["-std=c++17", "-O1", "-g", "-fPIC", "-shared", "-w", "-fno-strict-aliasing",
         "-fno-omit-frame-pointer", "-fvisibility=hidden", "-fvisibility-inlines-hidden"]
GCC_FLAGS = ["-fstack-clash-protection"]  # stack probes: a huge local array cannot skip a guard page
GENERATED = {"ksim-signature", "ksim-launch", "ksim-prelude"}
_DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$")
_CONTEXT = re.compile(r"^(?:In file included from |\s+from )?(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)?\s+(?:required from|required by|In instantiation).*$")


def flags() -> list[str]:
    """FLAGS (+ GCC_FLAGS with GCC), and -DKSIM_USE_UCONTEXT when KSEARCH_SIM_UCONTEXT=1 (the
    portable context switch)."""
    extra = GCC_FLAGS if _is_gcc(compiler()) else []
    if os.environ.get("KSEARCH_SIM_UCONTEXT") == "1":
        extra = extra + ["-DKSIM_USE_UCONTEXT"]
    return FLAGS + extra


def unique_suffix() -> str:
    """A name part no other process or thread writing the same cache file uses at the same time (captures of one
    program run side by side in threads)."""
    return f"{os.getpid()}-{threading.get_ident()}"


def cache_dir() -> Path:
    d = os.environ.get("KSEARCH_SIM_CACHE")
    path = Path(d) if d else Path(tempfile.gettempdir()) / f"ksearch-sim-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


# Read once, when the simulator is imported: inside the evaluator that is before any candidate runs, so a
# candidate that sets CXX cannot make the trusted compile step start a program of its choosing.
_CXX_AT_IMPORT = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def compiler() -> str:
    cxx = _CXX_AT_IMPORT
    if not cxx:
        raise SimError("no C++ compiler found: install g++ (the CPU simulator compiles kernels with it)",
                       kind="usage")
    return cxx


@functools.lru_cache(maxsize=8)
def _is_gcc(cxx: str) -> bool:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "clang" not in out.lower() and ("g++" in out or "gcc" in out.lower() or "free software" in out.lower())


# the whole-file CUDA entry with the CPU runtime's host API (cuda_source.py), and the headers it reads
HOST_ENTRY = "ksim_cuda_host.h"
HOST_HEADERS = ("ksim_host.h", "ksim_tex.h", "ksim_curand.h", "ksim_gl.h", HOST_ENTRY)


def pch_dir(cxx: str, host: bool = False) -> Path | None:
    """A directory holding precompiled ksim_metal.h / ksim_cuda.h (built once per header version); with `host`,
    ksim_cuda_host.h (the CUDA dialect with the host runtime API).

    Only for GCC. If a precompiled header is missing or does not match, g++ reads the real header,
    so this only ever saves time (about a third of each compile)."""
    if os.environ.get("KSEARCH_SIM_NO_PCH") or not _is_gcc(cxx):
        return None
    names = ("ksim.h", "ksim_metal.h", "ksim_cuda.h", "ksim_wmma.h") + (HOST_HEADERS if host else ())
    texts = b"".join(HEADER.with_name(n).read_bytes() for n in names)
    key = hashlib.sha256(texts + " ".join([cxx] + flags()).encode()).hexdigest()[:16]
    d = cache_dir() / f"pch-{'host-' if host else ''}{key}"
    d.mkdir(exist_ok=True)
    for dialect in (("cuda_host",) if host else ("metal", "cuda")):
        gch = d / f"ksim_{dialect}.h.gch"
        if gch.exists():
            continue
        tmp = d / f"ksim_{dialect}.h.{unique_suffix()}.tmp"
        cmd = [cxx, *[f for f in flags() if f != "-shared"], "-x", "c++-header", str(HEADER.with_name(f"ksim_{dialect}.h")), "-o", str(tmp)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if r.returncode != 0:
            tmp.unlink(missing_ok=True)
            return None
        os.replace(tmp, gch)
    return d


def _user_files(extra: set[str]) -> set[str]:
    return {"source", "header"} | extra


def map_diagnostics(stderr: str, user_files: set[str]) -> tuple[str, int | None, str | None]:
    """(message, line, file) for the first error, located in the kernel's own text when possible."""
    lines = stderr.splitlines()
    first_err = None
    for i, ln in enumerate(lines):
        m = _DIAG.match(ln)
        if m and m.group("sev") in ("error", "fatal error"):
            first_err = i
            break
    if first_err is None:
        tail = "\n".join(lines[-15:])
        return f"the kernel did not compile:\n{tail}", None, None
    m = _DIAG.match(lines[first_err])
    msg = m.group("msg")
    name = os.path.basename(m.group("file"))
    line, file = None, None
    if name in user_files:
        line, file = int(m.group("line")), name
    else:
        # an error inside ksim.h: the kernel line that led there is in the context lines around it
        for j in list(range(first_err - 1, -1, -1)) + list(range(first_err + 1, len(lines))):
            mm = _CONTEXT.match(lines[j]) or _DIAG.match(lines[j])
            if mm and os.path.basename(mm.group("file")) in user_files:
                line, file = int(mm.group("line")), os.path.basename(mm.group("file"))
                break
    # a short excerpt of the diagnostics, with cache paths removed
    keep = []
    for ln in lines[first_err:first_err + 12]:
        mm = _DIAG.match(ln)
        if mm and mm.group("sev") == "error" and keep and len(keep) > 1:
            if sum(1 for k in keep if " error: " in k) >= 3:
                break
        ln = re.sub(r"[^\s:]*/ksearch-sim-[^/\s]*/", "", ln)
        keep.append(ln.replace(str(HEADER.parent) + os.sep, ""))
    hint = ""
    if line is None and name in GENERATED:
        hint = ("\n(the error is in the call the simulator generates for the kernel: check the kernel's "
                "parameter types and template arguments)")
    return f"compile error: {msg}\n" + "\n".join(keep) + hint, line, file


MAX_CACHED = 2000  # compiled kernels kept; the least recently built beyond that are removed


def prune(d: Path, keep: int = MAX_CACHED) -> None:
    """Remove the oldest libraries (and their sources) when the cache holds more than `keep`."""
    try:
        libs = [e for e in os.scandir(d) if e.name.endswith(".so") and ".tmp" not in e.name]
        if len(libs) <= keep:
            return
        libs.sort(key=lambda e: e.stat().st_mtime)
        for e in libs[: len(libs) - keep // 2]:
            for p in (Path(e.path), Path(e.path).with_suffix(".cpp")):
                p.unlink(missing_ok=True)
    except OSError:
        pass  # another process pruned at the same time


def build(code: str, what: str, user_files: set[str] | None = None, host: bool = False) -> Path:
    """Compile `code` (a full C++ translation unit) to a cached ``.so``; raise SimError on errors. `host`: the code
    includes ksim_cuda_host.h (the host runtime API), whose headers are part of the cache key then."""
    names = ("ksim.h", "ksim_metal.h", "ksim_cuda.h", "ksim_wmma.h", "ksim_cub.h") + (HOST_HEADERS if host else ())
    header_text = b"".join(HEADER.with_name(n).read_bytes() for n in names)
    cxx = compiler()
    key = hashlib.sha256(code.encode() + header_text + " ".join([cxx] + flags()).encode()).hexdigest()[:24]
    d = cache_dir()
    so = d / f"k{key}.so"
    if so.exists():
        try:
            os.utime(so)  # recently used: kept by prune()
        except OSError:
            pass
        return so
    src = d / f"k{key}.{unique_suffix()}.cpp"
    src.write_text(code)
    tmp = d / f"k{key}.{unique_suffix()}.tmp.so"
    pch = pch_dir(cxx, host)
    cmd = [cxx, *flags(), *([f"-I{pch}"] if pch else []), f"-I{HEADER.parent}", str(src), "-o", str(tmp)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        raise SimError(f"compiling {what} took more than 180 s", kind="compile") from None
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        src.unlink(missing_ok=True)
        msg, line, file = map_diagnostics(r.stderr, _user_files(user_files or set()))
        # local headers the source includes that are not here (preprocess.inline_local_includes left them out):
        # most likely what the error is about
        missing = list(dict.fromkeys(re.findall(r"/\* ksearch: header (\S+) not found: left out \*/", code)))
        if missing:
            msg = (f"the file includes {', '.join(missing[:3])}, which {'is' if len(missing) == 1 else 'are'} not "
                   f"here (pass its folder with -I, or copy it beside the file); " + msg)
        raise SimError(f"{what}: {msg}", line, file=file, kind="compile", details=r.stderr)
    os.replace(tmp, so)
    os.replace(src, d / f"k{key}.cpp")  # kept next to the library for debugging
    prune(d)
    return so


def source_line_of_pc(so: Path, pc_offset: int) -> tuple[int | None, str | None]:
    """Kernel source line of a code address, through addr2line (None when unknown).

    With inlining the address may sit in ksim.h code inlined into the kernel: the innermost
    frame outside the simulator's own headers is the kernel's line."""
    tool = shutil.which("addr2line")
    if not tool or not pc_offset:
        return None, None
    try:
        r = subprocess.run([tool, "-i", "-e", str(so), hex(pc_offset)], capture_output=True, text=True, timeout=20)
    except (subprocess.TimeoutExpired, OSError):
        return None, None
    for ln in r.stdout.splitlines():
        m = re.match(r"^(.*):(\d+)", ln.strip())
        if not m or m.group(1) in ("??", "") or m.group(2) == "0":
            continue
        name = os.path.basename(m.group(1))
        if name.startswith("ksim") and (name.endswith(".h") or name in GENERATED):
            continue
        return int(m.group(2)), name
    return None, None
