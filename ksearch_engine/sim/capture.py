"""capture_program: runs a user's whole CUDA program on the CPU and records every kernel launch.

The program (host code and kernels, with its local headers) is compiled with g++ against ksim_host.h, a CUDA
runtime on the CPU (host_source.py builds the translation unit; host_headers.py provides CUDA's and the
libraries' headers), and runs as a child process in the file's folder, with the user's argv, a wall-time
limit and a byte budget for recorded contents. The runtime writes each launch to ``launches.jsonl`` and the
buffers' contents to ``.npy`` files in the capture folder; this module turns those into a ``Capture``
(capture_models.py). Kernel files the program loads at run time (driver API modules, NVRTC) are compiled in as
units of their own and run through ksim_driver.h (host_driver.py). Nothing raises: failures come back as
``Capture(status="failed", error="file:line: what — what to do")``.

Kernels whose launches are too big for the byte budget or too slow to check (over SLOW_S on the CPU) are
recorded from a second run of the program at smaller sizes: the host-side constants those launches show
(capture_scale.py) divided by a power of two. Where such constants exist, the first run stops at the first such
launch instead of running on at full size; where no smaller run records that kernel, the program runs again whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import build as _build
from . import host_headers
from .capture_models import ArgRecord, Capture, CaptureNote, LaunchRecord, SymbolRecord
from . import capture_argv, capture_scale
from . import host_driver
from .host_source import SOURCE_EXT, Program, build_program
from .preprocess import mask_comments

_TAIL = 8000
SLOW_S = 2.0   # a launch running longer on the CPU is too slow to check six times over: the program is run smaller
SCALE_BUILD_S = 60.0   # a program whose build took longer is not built a second time at smaller sizes
_HOST_HEADERS = ("ksim.h", "ksim_cuda.h", "ksim_host.h", "ksim_wmma.h", "ksim_curand.h", "ksim_tex.h",
                 "ksim_cub.h", "ksim_driver.h", "ksim_gl.h")


class CaptureFailed(Exception):
    """Internal: a step failed; message is the Capture's error."""

    def __init__(self, error: str, notes: list[CaptureNote] | None = None, undefined: list[str] | None = None):
        super().__init__(error)
        self.error = error
        self.notes = notes or []
        self.undefined = undefined or []  # functions the link did not find
        self.stderr = ""


def _flags() -> list[str]:
    # DWARF 4: with DWARF 5 line tables addr2line named the generated .cpp instead of the #line file
    return [f for f in _build.flags() if f not in ("-shared", "-fvisibility=hidden", "-fvisibility-inlines-hidden")] + ["-gdwarf-4"]


def _pch(cxx: str) -> Path | None:
    """A precompiled ksim_host.h (GCC only), built once per header version; None where unavailable."""
    if os.environ.get("KSEARCH_SIM_NO_PCH") or not _build._is_gcc(cxx):
        return None
    texts = b"".join(_build.HEADER.with_name(n).read_bytes() for n in _HOST_HEADERS)
    key = hashlib.sha256(texts + " ".join([cxx] + _flags()).encode()).hexdigest()[:16]
    d = _build.cache_dir() / f"pch-host-{key}"
    gch = d / "ksim_host.h.gch"
    if gch.exists():
        return d
    d.mkdir(exist_ok=True)
    tmp = d / f"ksim_host.h.{_build.unique_suffix()}.tmp"
    cmd = [cxx, *_flags(), "-x", "c++-header", str(_build.HEADER.with_name("ksim_host.h")), "-o", str(tmp)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        return None
    os.replace(tmp, gch)
    return d


_INTERNAL_DIAG = re.compile(r"In file included from|^\s*from |ksim[\w-]*\.h|ksearch_engine|/usr/(?:local/)?include/")


def _explain_compile(stderr: str, prog: Program) -> tuple[str, list[CaptureNote]]:
    """A one-line error (file:line: what — what to do) and notes, from g++'s diagnostics."""
    users = set(prog.display) | {"ksim-launch"}
    msg, line, file = _build.map_diagnostics(stderr, users)
    shown = prog.display.get(file or "", file or (prog.display and next(iter(prog.display.values()))) or "?")
    first = msg.split("\n")[0].removeprefix("compile error: ")
    m = re.search(r'#error "?ksim-capture: ([^"]*)"?', stderr)
    if m:
        what = m.group(1)
        ln = re.search(r"^([^:\n]+):(\d+):\d*:? *error: #error", stderr, re.M)
        f, l = (prog.display.get(os.path.basename(ln.group(1)), ln.group(1)), int(ln.group(2))) if ln else (shown, line)
        note = CaptureNote(kind="gpu_only", message=what, file=f, line=l)
        return f"{f}:{l}: {what} — the program needs it; port its kernels by hand or remove that part", [note]
    # a Thrust name the stand-in (host_thrust.py) does not declare
    m = re.search(r"^([^:\n]+):(\d+):\d*:? *error: [‘'`](?:thrust::)?(\w+)[’'] (?:is not a member of [‘'`]thrust"
                  r"|in namespace [‘'`]thrust[’'] does not name)", stderr, re.M)
    if not m:   # `using namespace thrust::placeholders;`
        m = re.search(r"^([^:\n]+):(\d+):\d*:? *error: [‘'`](\w+)[’'] is not a namespace-name", stderr, re.M)
        m = m if m and re.search(rf"\bthrust\s*::\s*{m.group(3)}\b", prog.text) else None
    if m:
        f, l = prog.display.get(os.path.basename(m.group(1)), m.group(1)), int(m.group(2))
        what = f"thrust::{m.group(3)} is not in the capture's Thrust stand-in (vectors, device_ptr and basic algorithms)"
        return (f"{f}:{l}: {what} — port its kernels by hand or capture a version without it",
                [CaptureNote(kind="gpu_only", message=what, file=f, line=l)])
    # a name of the CUDA samples' helper headers that our stand-ins (host_helpers.py) lack
    m = re.search(r"^([^:\n]+):(\d+):\d*:? *error: [‘'`](\w+)[’'] (?:was not declared|does not name a type"
                  r"|has not been declared)", stderr, re.M)
    heads = ", ".join(dict.fromkeys(h for p in [prog, *prog.linked] for h in p.helper_stand_ins))
    if m and heads:
        f, l = prog.display.get(os.path.basename(m.group(1)), m.group(1)), int(m.group(2))
        what = (f"{m.group(3)} is not declared: neither the capture's CUDA runtime nor its stand-ins for the CUDA "
                f"samples' {heads} (not found on the include path) have it")
        return (f"{f}:{l}: {what} — pass the folder of the real headers (the samples' Common/) in include_dirs",
                [CaptureNote(kind="include", message=what, file=f, line=l)])
    m = re.search(r"fatal error: ([^:\n]+): No such file or directory", stderr)
    if m:
        return (f"{shown}:{line}: header {m.group(1)} not found — pass its folder in include_dirs "
                f"(searched: the file's folder, include_dirs, ancestor folders and their Common/, include/)",
                [CaptureNote(kind="include", message=f"missing header {m.group(1)}", file=shown, line=line)])
    if "undefined reference" in stderr:
        names = sorted(set(re.findall(r"undefined reference to [`']([^'`]+)'", stderr)))[:5]
        return (f"{shown}: link error: undefined {', '.join(names)} — defined in another source file? "
                f"(capture compiles the file and its includes; pass sources=[...] with the other files)", [])
    # the compiler's own lines about the capture's headers and the system's are no help to the user
    excerpt = [ln for ln in msg.split("\n")[1:6] if ln.strip() and not _INTERNAL_DIAG.search(ln)][:3]
    where = f"{shown}:{line}" if line else shown
    if shown.endswith(".c"):   # C that calls the CUDA runtime: compiled as C++ against the capture's runtime
        return (f"{where}: {first} — {os.path.basename(shown)} is C and calls the CUDA runtime, whose CPU stand-in "
                f"is C++: the capture compiles it as C++, where this line of C does not compile; make the line valid "
                f"C++ (a cast) or port its kernels from a C++ host" + (" | " + " | ".join(excerpt) if excerpt else ""))[:900], []
    return f"{where}: {first} — does this compile with nvcc? " + " | ".join(excerpt)[:600], []


def _compile(prog: Program, defines: dict[str, str], extra: list[Program]) -> Path:
    cxx = _build.compiler()
    inc = host_headers.include_dir()
    dflags = [f"-D{k}" if v in (None, "") else f"-D{k}={v}" for k, v in sorted(defines.items())]
    texts = [prog.text] + [p.text for p in extra]
    header_text = b"".join(_build.HEADER.with_name(n).read_bytes() for n in _HOST_HEADERS)
    key = hashlib.sha256("\0".join(texts).encode() + header_text +
                         " ".join([cxx] + _flags() + dflags + [str(inc)]).encode()).hexdigest()[:24]
    d = _build.cache_dir()
    exe = d / f"cap{key}.exe"
    if exe.exists():
        return exe
    srcs, args = [], []
    for i, (t, unit) in enumerate(zip(texts, [prog, *extra])):
        c = unit.language == "c"
        s = d / f"cap{key}.{i}.{_build.unique_suffix()}.{'c' if c else 'cpp'}"
        s.write_text(t)
        srcs.append(s)
        args += ["-x", "c", str(s), "-x", "none"] if c else [str(s)]   # C units as C (the flags' -std is C++'s)
    tmp = d / f"cap{key}.{_build.unique_suffix()}.tmp"
    pch = _pch(cxx)
    started = time.monotonic()
    # OpenMP host code (omp.h, #pragma omp): built with -fopenmp, as the program's Makefile would
    omp = ["-fopenmp"] if any(re.search(r"#\s*include\s*<omp\.h>|#\s*pragma\s+omp\b", t) for t in texts) else []
    cmd = [cxx, *_flags(), *omp, *([f"-I{pch}"] if pch else []), f"-I{_build.HEADER.parent}", "-isystem", str(inc),
           *dflags, *args, "-o", str(tmp), "-lm", "-lpthread",
           # failed opens of input files are noted (ksim_host.h's __wrap_fopen)
           "-Wl,--wrap=fopen", "-Wl,--wrap=fopen64",
           # time() is one fixed instant (ksim_host.h's __wrap_time): clock-seeded programs capture alike every run
           "-Wl,--wrap=time",
           # several translation units each carry ksim.h's context-switch routine (identical copies)
           *(["-Wl,--allow-multiple-definition"] if extra else [])]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise CaptureFailed(f"{prog.display.get('', '')}compiling the program took more than 300 s") from None
    finally:
        for s in srcs[1:]:
            s.unlink(missing_ok=True)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        srcs[0].unlink(missing_ok=True)
        err, notes = _explain_compile(r.stderr, prog)
        undefined = sorted(set(re.findall(r"undefined reference to [`']([^'`(]+)", r.stderr)))
        failed = CaptureFailed(err, notes, undefined)
        failed.stderr = r.stderr
        raise failed
    os.replace(tmp, exe)
    os.replace(srcs[0], d / f"cap{key}{srcs[0].suffix}")
    try:   # how long it took: a smaller run's second build is skipped where the first was slow (_smaller)
        exe.with_suffix(".secs").write_text(f"{time.monotonic() - started:.1f}")
    except OSError:
        pass
    return exe


def _tail(p: Path) -> str:
    try:
        with open(p, "rb") as f:
            f.seek(0, 2)
            n = f.tell()
            f.seek(max(0, n - _TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _line_of(exe: Path, text: str) -> tuple[str, int | None, str | None]:
    """Replace a [pc_offset=...] marker by the source line it names."""
    m = re.search(r"\s*\[(pc_offset|site)=0x([0-9a-f]+)\]", text)
    if not m:
        return text, None, None
    pc = int(m.group(2), 16) - (1 if m.group(1) == "site" else 0)
    line, file = _build.source_line_of_pc(exe, pc)
    return text[:m.start()] + text[m.end():], line, file


def _to_record(d: dict, prog: Program, recorded: bool) -> LaunchRecord:
    name = d["kernel"]
    info = prog.kernels.get(name.split("::")[-1])
    args, embedded = [], []
    for i, a in enumerate(d["args"]):
        p = info.params[i] if info is not None and i < len(info.params) else None
        kw = {k: a[k] for k in ("kind", "value", "raw_hex", "buffer", "offset_bytes", "dtype", "elem_bytes",
                                "nbytes", "memory", "before", "after", "written", "of_arg", "at", "head", "head_after")
              if k in a}
        if not recorded:
            for k in ("before", "after", "head", "head_after"):
                kw.pop(k, None)
        if a.get("kind") == "struct" and a.get("ctype"):   # (a tag's type decides a deduced template argument)
            kw["arg_type"] = a["ctype"]
        if a.get("of_arg") is not None:   # a buffer a struct argument points to
            embedded.append(ArgRecord(name=f"{args[a['of_arg']].name}@{a['at']}", ctype="void*", **kw))
            continue
        args.append(ArgRecord(name=p.name if p else f"arg{i}", ctype=p.type if p else a["ctype"], **kw))
    syms = [SymbolRecord(**s) for s in d.get("symbols", [])] if recorded else []
    return LaunchRecord(index=d["index"], kernel=name, template_args=[t.strip() for t in _split(d["targs"])],
                        line=d["line"], file=prog.display.get(os.path.basename(d["file"]), d["file"]),
                        grid=tuple(d["grid"]), block=tuple(d["block"]), shared_mem=d["shared_mem"], args=args,
                        embedded=embedded, symbols=syms, too_large=d["too_large"], seconds=d.get("seconds"))


def _split(s: str) -> list[str]:
    if not s.strip():
        return []
    parts, depth, cur = [], 0, ""
    for c in s:
        depth += c in "<([{"
        depth -= c in ">)]}"
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    return parts + [cur]


def _read_log(cap: Capture, workdir: Path, prog: Program, exe: Path) -> tuple[dict | None, dict | None]:
    """Fill cap.launches/notes from launches.jsonl; returns (the launch running when the program stopped, stop)."""
    begun: dict[int, dict] = {}
    ended: dict[int, dict] = {}
    stop = None
    counts: dict[str, int] = {}
    try:
        lines = (workdir / "launches.jsonl").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    fn_names = _fn_names(exe, _POINTED.findall("\n".join(lines)))
    for ln in lines:
        try:
            ev = json.loads(ln)
        except json.JSONDecodeError:
            continue
        kind = ev.get("ev")
        if "launch" in ev:
            _name_pointed(ev["launch"], fn_names)
        if kind == "counts":
            ev["counts"] = {(fn_names[k][0] + (f"<{fn_names[k][1]}>" if fn_names[k][1] else "") if k in fn_names else k): v
                            for k, v in ev["counts"].items()}
        if kind == "note":
            for k, (nm, ta) in fn_names.items():
                ev["message"] = ev["message"].replace(k, nm + (f"<{ta}>" if ta else ""))
        if kind == "begin":
            begun[ev["launch"]["index"]] = ev["launch"]
        elif kind == "end":
            ended[ev["launch"]["index"]] = ev["launch"]
        elif kind == "counts":
            counts = ev["counts"]
        elif kind == "note":
            cap.notes.append(CaptureNote(kind=ev["kind"], message=ev["message"],
                                         file=prog.display.get(os.path.basename(ev["file"] or ""), ev["file"]),
                                         line=ev["line"]))
        elif kind == "stop":
            stop = ev
    running = None
    try:
        cur = (workdir / "current.json").read_bytes()
        if cur[:1] == b"{":
            running = json.loads(cur[1:].split(b"\0")[0].decode("utf-8", "replace"))
            _name_pointed(running, fn_names if set(_pointed(running)) <= set(fn_names)
                          else _fn_names(exe, _pointed(running)))
            begun.setdefault(running["index"], running)
    except (OSError, ValueError, KeyError):
        running = None
    for idx in sorted(begun):
        if idx in ended:
            cap.launches.append(_to_record(ended[idx], prog, True))
        elif running is not None and idx == running["index"]:
            cap.launches.append(_to_record(begun[idx], prog, begun[idx]["recorded"]))
    cap.launch_counts = {k: int(v) for k, v in counts.items()}
    return running, stop


_POINTED = re.compile(r"[\w:]+@fn=0x[0-9a-f]+")


def _pointed(launch: dict) -> list[str]:
    """The code-offset marks in a launch record: its kernel named through a pointer ("k@fn=0x1a2b"), a function
    passed as a template argument ("fnarg@fn=0x2c3d")."""
    return _POINTED.findall(launch.get("kernel", "") + " " + launch.get("targs", ""))


def _name_pointed(launch: dict, fn_names: dict[str, tuple[str, str]]) -> None:
    """Replace the launch's marks by the functions they point to (see _fn_names)."""
    if "@fn=" in launch.get("kernel", ""):
        launch["kernel"], launch["targs"] = fn_names.get(launch["kernel"], (launch["kernel"], ""))
    if "@fn=" in launch.get("targs", ""):
        launch["targs"] = _POINTED.sub(lambda m: fn_names.get(m.group(0), (m.group(0),))[0], launch["targs"])


def _fn_names(exe: Path, marked: list[str]) -> dict[str, tuple[str, str]]:
    """Launches through a function pointer ("kernel@fn=0x1a2b"): the kernel each points to, as (name, template
    arguments), from the executable's symbols; the name as written where unknown."""
    out: dict[str, tuple[str, str]] = {}
    tool = shutil.which("addr2line")
    todo = sorted(set(marked))
    if not todo or not tool:
        return {m: (m.split("@fn=")[0], "") for m in todo}
    try:
        r = subprocess.run([tool, "-f", "-C", "-e", str(exe), *[m.split("@fn=")[1] for m in todo]],
                           capture_output=True, text=True, timeout=30)
        funcs = r.stdout.splitlines()[0::2]
    except (OSError, subprocess.TimeoutExpired):
        funcs = []
    for i, m in enumerate(todo):
        f = funcs[i] if i < len(funcs) else "??"
        head = f.split("(")[0].strip()
        name, targs = head, ""
        if "<" in head and head.endswith(">"):
            name, targs = head[:head.index("<")], head[head.index("<") + 1:-1]
        name = name.split("::")[-1].split()[-1] if name.strip() else ""
        out[m] = (name, targs) if name and name != "??" else (m.split("@fn=")[0], "")
    return out


_SOURCE_EXT = SOURCE_EXT


def _defining_siblings(path: Path, prog: Program, extra: list[Program], undefined: list[str]) -> list[Path]:
    """Source files next to the program's files (not inlined, without a main) that define `undefined`."""
    used = {f.resolve() for f in prog.files} | {f.resolve() for p in extra for f in p.files}
    dirs = {f.parent for f in used}
    # "int nStage2dDWT<float>" (a function template's instantiation) -> nStage2dDWT
    names = [re.split(r"[\s:*&]+", re.sub(r"<.*$", "", u).strip())[-1] for u in undefined]
    found = []
    for d in sorted(dirs):
        for f in sorted(d.iterdir()):
            if f.suffix not in _SOURCE_EXT or f.resolve() in used or not f.is_file():
                continue
            try:
                text = mask_comments(f.read_text(errors="replace"))   # `) /* out: [n] */ {` between them
            except OSError:
                continue
            if re.search(r"^\s*(?:int|void)\s+main\s*\(", text, re.M):
                continue
            # a function's definition (K&R parameter declarations allowed), or a variable's with its initializer
            # (`const struct primitive sobol_primitives[] = {...}`: a table the program's other file defines)
            if any(re.search(rf"\b{re.escape(n)}\s*\([^;{{}}]*\)\s*(?:const\s*)?(?:[^;{{}}()]*;\s*)*\{{", text)
                   or re.search(rf"^[^;#{{}}()]*[\w*&\s]\b{re.escape(n)}\s*(?:\[[^\]]*\]\s*)*=", text, re.M)
                   for n in names if n):
                found.append(f)
    return found[:8]


def _merge_kernels(prog: Program, extra: list[Program]) -> None:
    """Kernels and file names of the other translation units, so their launches get parameter names."""
    for e in extra:
        for name, info in e.kernels.items():
            prog.kernels.setdefault(name, info)
        for k, v in e.display.items():
            prog.display.setdefault(k, v)


def capture_program(path, *, argv=(), defines=None, include_dirs=(), timeout_s: float = 60.0,
                    byte_budget: int = 64 << 20, max_per_kernel: int = 4, workdir=None, entry: str = "main",
                    sources=()) -> Capture:
    """Run the CUDA program at `path` on the CPU and record its kernel launches (see the module docstring).

    argv: the program's arguments; defines: ``-D`` macros (a scaled-down run); include_dirs: like nvcc -I;
    timeout_s: wall time for the run (launches so far are kept: status "partial"); byte_budget: bytes of
    recorded contents (bigger launches get too_large=True); max_per_kernel: launches recorded per kernel (the
    first 2, then new geometries/scalars); workdir: where .npy files go; entry: the function to run instead of
    main (called with argc, argv or with no arguments); sources: other files of the program to compile with it.
    """
    t0 = time.monotonic()
    path = Path(path)
    defines = {str(k): ("" if v is None else str(v)) for k, v in (defines or {}).items()}
    wd = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ksearch-capture-"))
    wd.mkdir(parents=True, exist_ok=True)
    cap = Capture(file=str(path), dir=str(wd.resolve()), argv=[str(a) for a in argv], defines=defines)
    dirs, srcs = [Path(d).resolve() for d in include_dirs], [Path(s) for s in sources]
    try:
        exe, prog = _run(cap, path, wd, dirs, defines, timeout_s, byte_budget, max_per_kernel, entry, srcs,
                         execute=False)
        texts = _user_texts(prog)
        quick_build = _build_seconds(exe) <= SCALE_BUILD_S   # a smaller run is built again: not where that is slow
        sites = capture_scale.host_sites(texts) if quick_build else []

        def early(args) -> bool:   # stop at an oversized launch only where a smaller run can be made
            return quick_build and bool(sites or capture_scale.host_sites({}, list(args)))
        known = _FIRST_PLANS.get(_program_key(path, texts, defines)) if quick_build and argv else None
        done = False
        if known is not None:   # this program, run before with other arguments, needed smaller sizes at once
            quick = _smaller(cap, path, wd, exe, prog, texts, dirs, defines, timeout_s, byte_budget,
                             max_per_kernel, entry, srcs, t0, first_plan=known)
            done = any(_usable(ln) for ln in quick.launches)
            cap = quick if done else Capture(file=str(path), dir=str(wd.resolve()), argv=[str(a) for a in argv],
                                             defines=defines)
        if not done:
            _execute(cap, path, wd, exe, prog, timeout_s, byte_budget, max_per_kernel, early(cap.argv))
        if not done and not argv and entry == "main" and _needs_arguments(cap):
            cap = _with_documented_argv(cap, path, wd, exe, prog, timeout_s, byte_budget, max_per_kernel, early,
                                        texts)
        if not done and not argv and entry == "main" and not cap.launches and cap.status == "failed" \
                and any(n.kind == "input" for n in cap.notes):
            cap = _with_size_option(cap, path, wd, exe, prog, texts, timeout_s, byte_budget, max_per_kernel, early)
        if not done and (sites or cap._stopped or
                         (quick_build and capture_scale.device_plan(_evidence(cap, timeout_s)))):
            cap = _smaller(cap, path, wd, exe, prog, texts, dirs, defines, timeout_s, byte_budget, max_per_kernel,
                           entry, srcs, t0)
        if quick_build:
            _note_device_sizes(cap, texts, timeout_s, byte_budget, prog)
    except CaptureFailed as e:
        cap.status = "failed"
        cap.error = e.error
        cap.notes.extend(e.notes)
    except Exception as e:  # noqa: BLE001 - a capture never raises; say what broke
        cap.status = "failed"
        cap.error = f"{path}: the capture itself failed ({type(e).__name__}: {e}) — please report this"
    cap.seconds = round(time.monotonic() - t0, 3)
    try:
        cap.save()
    except OSError:
        pass
    return cap


def _build_seconds(exe: Path) -> float:
    """How long building `exe` took (0 where not known)."""
    try:
        return float(exe.with_suffix(".secs").read_text())
    except (OSError, ValueError):
        return 0.0


def _user_texts(prog: Program) -> dict[Path, str]:
    """The program's own files: those in its translation units' folders and below, and in folders beside them
    (a project's inc/ beside its src/), not helpers found elsewhere (a samples tree's Common/)."""
    units = [prog, *prog.linked]
    dirs = {u.files[0].parent for u in units if u.files}
    parents = {d.parent for d in dirs}
    out: dict[Path, str] = {}
    for u in units:
        for f in u.files:
            if f not in out and (f.parent in dirs or any(d in f.parents for d in dirs) or f.parent.parent in parents):
                try:
                    out[f] = f.read_text(errors="replace")
                except OSError:
                    pass
    return out


def _usable(ln: LaunchRecord) -> bool:
    return not ln.too_large and not ln.sim_error and (ln.seconds or 0.0) <= SLOW_S


def _evidence(cap: Capture, timeout_s: float) -> list[capture_scale.Evidence]:
    """The launches that show the program is too big or too slow to record: where the run stopped, and every
    launch of a kernel with no launch recorded within the budgets."""
    evs = []
    stop = cap._stopped
    if stop:
        secs = None
        if stop["kind"] == "slow":
            secs = float(stop.get("seconds") or SLOW_S) * max(int(stop.get("total") or 1), 1) / max(int(stop.get("done") or 1), 1)
        evs.append(capture_scale.evidence_of(stop["launch"], stop["kind"], secs))
    for k in cap.kernels():
        mine = cap.launches_of(k)
        if any(_usable(ln) for ln in mine):
            continue
        for ln in mine:
            out_of_time = bool(ln.sim_error and "time budget" in ln.sim_error)
            if ln.too_large or out_of_time or (ln.seconds or 0.0) > SLOW_S:
                evs.append(capture_scale.evidence_of(ln.model_dump(), "oversize" if ln.too_large else "slow",
                                                     timeout_s if out_of_time else ln.seconds))
    return evs


DEVICE_SIZES = "constants the kernel's own device code reads"


def _note_device_sizes(cap: Capture, texts: dict[Path, str], timeout_s: float, byte_budget: int,
                       prog: Program) -> None:
    """Kernels still too big or too slow to record (after any smaller run) whose sizes come from constants their
    own device code reads (`#define K_GLOBAL 4096` in the kernel's index arithmetic): a smaller run cannot change
    those without recording another kernel than the one ported; a note says which constants, for the verdict."""
    evs = _evidence(cap, timeout_s)
    if not evs:
        return
    try:
        dev_names = capture_scale.device_names(texts)
        dev = [s for s in capture_scale.size_sites(texts, list(cap.argv))
               if s.kind in ("define", "var") and s.name in dev_names and not s.local]
        pl = capture_scale.plan(dev, evs, byte_budget, SLOW_S / 4)
    except Exception:   # noqa: BLE001 - a reading this does not follow: no note
        return
    if pl is None:
        return
    shown = lambda f: prog.display.get(f.name, f.name)   # noqa: E731
    sizes = ", ".join(f"{s.name} = {s.value} ({s.where(shown)})" for s, _new in pl.changes[:4])
    cap.notes.append(CaptureNote(kind="limit", message=(
        f"{', '.join(pl.kernels)}: {pl.why} at the program's sizes, which come from {sizes}: {DEVICE_SIZES}, so "
        f"no run at smaller sizes can record it without changing the kernel that was ported (make them kernel "
        f"arguments, or check the kernel on a GPU)")))


_FACTORS: dict[tuple, int] = {}   # (program, attempt, sites changed) -> the factor chosen last
# (program, its texts, defines) -> the plan of the first smaller run of an earlier run of it (host constants only):
# the same program run again with another kernel-choosing argument (portfile._mode_captures) starts at those sizes
# rather than spending its time on a run at the program's own sizes that stops at the same oversized launch
_FIRST_PLANS: dict[tuple, capture_scale.ScalePlan] = {}


def _program_key(path: Path, texts: dict[Path, str], defines: dict[str, str]) -> tuple:
    return (str(path.resolve()), hashlib.sha256("\0".join(texts[f] for f in sorted(texts)).encode()).hexdigest(),
            tuple(sorted(defines.items())))


def _smaller(cap: Capture, path: Path, wd: Path, exe: Path, prog: Program, texts: dict[Path, str], dirs, defines,
             timeout_s: float, byte_budget: int, max_per_kernel: int, entry: str, sources, t0: float,
             first_plan: capture_scale.ScalePlan | None = None) -> Capture:
    """Kernels whose launches were too big or too slow to record: the program run again with the host-side sizes
    those launches show divided by a power of two (capture_scale.py), at most twice; their launches from that
    run join the capture. A run stopped early for it, where no smaller run gives its kernel, runs again whole."""
    deadline = t0 + 2.5 * timeout_s

    def budget() -> float:
        return max(10.0, min(timeout_s, deadline - time.monotonic()))
    smaller: list[tuple[Capture, capture_scale.ScalePlan]] = []
    cur_texts, cur_argv, latest = texts, list(cap.argv), cap
    cur_device: tuple[capture_scale.SizeSite, int] | None = None
    original: dict[str, tuple[int, str]] = {}
    no_launch = not cap.launches and cap.status == "failed" and "time budget" in (cap.error or "")
    for attempt in (1, 2):
        evs = _evidence(latest, timeout_s)
        sites = capture_scale.host_sites(cur_texts, cur_argv)
        if attempt == 1 and first_plan is not None:   # an earlier run of this program chose it (_FIRST_PLANS)
            pl = first_plan
        elif evs:
            pl = capture_scale.plan(sites, evs, byte_budget, SLOW_S / 4)
            if pl is None and attempt == 1:   # no host size shows: a grid sized from the SM count may
                pl = capture_scale.device_plan(evs)
        elif attempt == 1 and no_launch:
            # the time ran out before the program's first launch (a CPU reference at the program's own sizes):
            # no launch says which size matters, so the program's plain sizes shrink together
            pl = capture_scale.before_first_launch(sites)
        else:
            break
        if pl is None:
            break
        # the same program run again (its kernel-choosing options, portfile._mode_captures) at the factor an
        # earlier run of it chose, where that is larger: one smaller executable for all, not one per timing
        memo = (str(path.resolve()), attempt, tuple(sorted((s.name, s.value) for s, _ in pl.changes)))
        if _FACTORS.get(memo, 0) > pl.factor:
            pl = capture_scale.plan(sites, evs, byte_budget, SLOW_S / 4, min_factor=_FACTORS[memo]) or pl
        if len(_FACTORS) > 256:
            _FACTORS.clear()
        _FACTORS[memo] = pl.factor
        if attempt == 1 and first_plan is None and all(site.kind != "argv" for site, _ in pl.changes):
            if len(_FIRST_PLANS) > 64:
                _FIRST_PLANS.clear()
            _FIRST_PLANS[_program_key(path, texts, defines)] = pl
        for site, _new in pl.changes:
            original.setdefault(site.name, (site.value, site.where(lambda f: prog.display.get(f.name, f.name))))
        new_texts, new_argv = capture_scale.apply(pl, cur_texts, cur_argv)
        sub = wd / f"smaller{attempt}"
        sub.mkdir(exist_ok=True)
        att = Capture(file=cap.file, dir=str(sub.resolve()), argv=new_argv, defines=cap.defines)
        try:
            exe2, prog2 = _run(att, path, sub, dirs, defines, budget(), byte_budget, max_per_kernel, entry, sources,
                               texts=new_texts, execute=False)
        except CaptureFailed:
            break
        device = next(((site, new) for site, new in pl.changes if site.kind == "device"), None)
        if device is None and cur_device is not None:   # a smaller device stays smaller in the next run
            pl.changes.append(cur_device)
        cur_device = device or cur_device
        _execute(att, path, sub, exe2, prog2, budget(), byte_budget, max_per_kernel, early=True,
                 sms=cur_device[1] if cur_device else None)
        smaller.append((att, pl))
        cur_texts, cur_argv, latest = new_texts, new_argv, att
        if att._stopped is None:
            break
    stop = cap._stopped
    if stop is not None:
        stopped_at = stop["launch"].get("kernel")
        if not any(_usable(ln) for att, _ in smaller for ln in att.launches if ln.kernel == stopped_at):
            # no smaller run records that kernel: the run at the program's own sizes, whole, as before
            full = Capture(file=cap.file, dir=cap.dir, argv=cap.argv, defines=cap.defines,
                           notes=[n for n in cap.notes if n.kind in ("include", "argv")])
            _execute(full, path, wd, exe, prog, budget(), byte_budget, max_per_kernel, early=False)
            cap, stop = full, None
    if not smaller:
        return cap
    wanted = [k for k in dict.fromkeys([*cap.kernels(), *(ln.kernel for att, _ in smaller for ln in att.launches)])
              if not any(_usable(ln) for ln in cap.launches_of(k))]
    # the last smaller run that recorded a kernel gives its launches
    base_index = max([ln.index for ln in cap.launches] + [-1]) + 1
    added: dict[str, list[str]] = {}
    for att, pl in reversed(smaller):
        rel = os.path.relpath(att.dir, cap.dir)
        desc = ", ".join(f"{s.name} = {new} (was {original.get(s.name, (s.value, ''))[0]})" for s, new in pl.changes[:4])
        take = [ln for ln in att.launches if ln.kernel in wanted and ln.kernel not in added and _usable(ln)]
        remap = {}
        for ln in take:
            new = ln.model_copy(deep=True)
            new.index = base_index + ln.index
            remap[ln.index] = new.index
            new.scaled = desc
            for a in [*new.args, *new.embedded]:
                a.before = f"{rel}/{a.before}" if a.before else None
                a.after = f"{rel}/{a.after}" if a.after else None
                a.head = f"{rel}/{a.head}" if a.head else None
                a.head_after = f"{rel}/{a.head_after}" if a.head_after else None
            for sy in new.symbols:
                sy.before = f"{rel}/{sy.before}"
                sy.after = f"{rel}/{sy.after}" if sy.after else None
            cap.launches.append(new)
        _merge_textures(Path(att.dir), Path(cap.dir), rel, remap)
        for k in dict.fromkeys(ln.kernel for ln in take):
            added[k] = [desc]
        base_index += max([ln.index for ln in att.launches] + [0]) + 1
    if not added:
        return cap
    if stop is not None or no_launch or first_plan is not None:
        # the smaller run ran the whole program (the run at its own sizes stopped early, or was not made): its
        # ending is the capture's
        last = smaller[-1][0]
        cap.status, cap.error, cap.exit_code = last.status, last.error, last.exit_code
        cap.stdout_tail, cap.launch_counts = last.stdout_tail, last.launch_counts
        seen = {n.message for n in cap.notes}
        cap.notes += [n for n in last.notes if n.message not in seen and n.kind != "argv"]
        cap._stopped = None
    first = smaller[0][1]
    site = first.changes[0][0]
    sizes = ", ".join(f"{name} from {v} to {new}" for name, (v, _w) in original.items()
                      for s, new in smaller[-1][1].changes if s.name == name)
    why = "too big for the capture's byte budget" if first.why.startswith("over") else "too slow to check on the CPU"
    cap.notes.append(CaptureNote(
        kind="scaled", file=prog.display.get(site.file.name, site.file.name) if site.file else None,
        line=site.line or None,
        message=f"{', '.join(added)}: recorded in a second run of the program with {sizes} (its launches at the "
                f"program's own sizes were {why}); pass -D NAME=VALUE or --arg to choose the sizes"))
    return cap


def _merge_textures(src: Path, dst: Path, rel: str, remap: dict[int, int]) -> None:
    """The textures a smaller run's launches read (textures.jsonl), under the launches' new indices."""
    try:
        lines = (src / "textures.jsonl").read_text(errors="replace").splitlines()
    except OSError:
        return
    out = []
    for ln in lines:
        try:
            d = json.loads(ln)
        except json.JSONDecodeError:
            continue
        if int(d.get("launch", -1)) in remap:
            d["launch"] = remap[int(d["launch"])]
            for f in ("file", "after"):   # (a surface's contents after the launch: "after")
                if d.get(f):
                    d[f] = f"{rel}/{d[f]}"
            out.append(json.dumps(d))
    if out:
        with open(dst / "textures.jsonl", "a") as f:
            f.write("\n".join(out) + "\n")


_STOPPED_EARLY = ("before any kernel launch", "without launching a kernel", "killed by signal", "host program crashed")


def _needs_arguments(cap: Capture) -> bool:
    """The run stopped before its first launch for want of arguments or input (not a GPU-only construct)."""
    return (cap.status == "failed" and not cap.launches and cap.exit_code is not None
            and any(w in (cap.error or "") for w in _STOPPED_EARLY))


_DOC_NAME = re.compile(r"^(readme|run|usage|howto)([._-].*)?$|\.sh$|^makefile$|^gnumakefile$", re.I)
_SHELL_OPS = re.compile(r"^(?:\d?>>?|<|\||\|\||&&?|;|//|#).*")
_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fF]?$")
_PLACEHOLDER_WORD = re.compile(r"(?i)file|name|size|len|num|dim|path|input|output|value|count|iter|rows|cols|^n$")
_MAX_ARG_INT = 4096   # documented sizes above this are scaled down for a run on the CPU


@dataclass
class DocumentedRun:
    """A command line the program's folder documents (README, run script, Makefile recipe)."""
    argv: list[str]
    where: str                                   # "README:3"
    name: str = ""                               # the binary as the line names it ("./needle")
    missing: list[str] = field(default_factory=list)   # files it names that are not there


def _binary_names(path: Path, docs: list[Path], output: str) -> set[str]:
    names = {path.stem, path.parent.name}
    for d in docs:
        text = _read_text(d)
        if d.name.lower() in ("makefile", "gnumakefile") or d.suffix == ".mk":
            names |= set(re.findall(r"(?:^|\s)-o\s+([A-Za-z_][\w.+-]*)", text))
            names |= set(re.findall(r"^\s*(?:EXE|EXECUTABLE|TARGET\w*|PROG\w*|BIN\w*|APP\w*)\s*[:?]?=\s*([A-Za-z_][\w.+-]*)",
                                    text, re.M))
    names |= set(re.findall(r"[Uu]sage:\s*(?:\./)?([A-Za-z_][\w.+-]*)", output))
    return {n.removesuffix(".exe") for n in names if n and not n.startswith("$")}


def _read_text(p: Path) -> str:
    try:
        return p.read_text(errors="replace")[:200_000]
    except OSError:
        return ""


def documented_command_lines(path: Path, output: str = "") -> list[DocumentedRun]:
    """Command lines that run the program at `path` with arguments, as its folder documents them: run scripts,
    READMEs ("Usage: needle 32 10", "$ ./prog -n 64") and Makefile recipes. Lines whose arguments are
    placeholders (<rows>, [-v], row_len) are left out; files they name that are absent are listed in
    `missing` (such a line is not run: input data is never made up)."""
    import shlex
    folder = path.parent
    docs = [f for f in sorted(folder.iterdir()) if f.is_file() and _DOC_NAME.search(f.name)]
    if folder.parent != folder:   # a program in a subfolder (lud/cuda/lud.cu): the benchmark's README
        docs += [f for f in sorted(folder.parent.iterdir()) if f.is_file() and f.name.lower().startswith("readme")]
    names = _binary_names(path, docs, output)
    runs: list[DocumentedRun] = []
    sources = [(d, _read_text(d)) for d in docs[:12]] + [(None, output)]   # last: the program's usage message
    for d, text in sources:
        script = d is not None and (d.suffix == ".sh" or d.name.lower() in ("run", "makefile", "gnumakefile"))
        for i, raw in enumerate(text.splitlines()[:2000], 1):
            line = raw.strip()
            if line.startswith("#") and (script or line[1:2] in (" ", "#")):
                continue   # a comment, or a markdown heading
            line = re.sub(r"^(?:(?:[#>*`$-]+|//)\s*)+", "", line)
            line = re.sub(r"^(?:usage|example|e\.g\.|run|command)\s*:?\s*", "", line, flags=re.I).strip("` ")
            try:
                toks = shlex.split(line, comments=False)
            except ValueError:
                toks = line.split()
            # the program's own usage message: an example starting ./X runs the program itself
            if not toks or not (_names_program(toks[0], names) or (d is None and toks[0].startswith("./"))):
                continue
            start = 0
            args = []
            for t in toks[start + 1:]:
                if _SHELL_OPS.match(t):
                    break
                args.append(t)
            run = _check_args(args, folder, f"{os.path.relpath(d, folder)}:{i}" if d else "its usage message")
            if run is not None:
                run.name = toks[0]
            if run is not None and all(r.argv != run.argv for r in runs):
                runs.append(run)
    return runs


def _names_program(tok: str, names: set[str]) -> bool:
    """`tok` (a line's first word) invokes the program: its binary's name, or ./X with X close to it
    (./gaussianElimination for gaussian.cu)."""
    base = os.path.basename(tok).removesuffix(".exe")
    if base in names:
        return True
    if not tok.startswith("./") or re.search(r"\.(sh|py|pl)$", base):
        return False
    return any(len(os.path.commonprefix([base.lower(), n.lower()])) >= 4 for n in names)


def _check_args(args: list[str], folder: Path, where: str) -> DocumentedRun | None:
    if not args or any(re.search(r"[<>\[\]{}$|]|\.\.\.|%[sd]", a) for a in args):
        return None
    if any(re.search(r"\.(cu|cuh|c|cc|cpp|cxx|h|hpp|o)$", a) for a in args):
        return None   # a compile line
    run = DocumentedRun(argv=list(args), where=where)
    for k, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        if _NUMBER.match(value) or (re.match(r"^--?[A-Za-z]", a) and "=" not in a):
            continue
        if (folder / value).exists():
            continue
        if "/" in value or re.search(r"\.[A-Za-z]\w{0,4}$", value):
            run.missing.append(value)
            continue
        if k > 0 and re.match(r"^--?[A-Za-z]", args[k - 1]):
            continue   # a flag's word value: --type float
        if re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,7}", value) and not _PLACEHOLDER_WORD.search(value):
            continue   # a short literal word: `hybridsort r`
        return None    # a placeholder such as row_len
    return run


def _scaled(argv: list[str]) -> list[str]:
    """Integer arguments above _MAX_ARG_INT divided by a power of two (a multiple of 16 stays one)."""
    out = []
    for a in argv:
        head, _, val = a.rpartition("=") if a.startswith("-") and "=" in a else ("", "", a)
        if re.fullmatch(r"\d+", val) and int(val) > _MAX_ARG_INT:
            v, k = int(val), 1
            while v // k > _MAX_ARG_INT:
                k *= 2
            nv = v // k
            if v % 16 == 0 and nv % 16:
                nv = max(16, nv // 16 * 16)
            val = str(nv)
        out.append(f"{head}={val}" if head else val)
    return out


# a size option the program reads (helper_string.h's `getCmdLineArgumentInt(argc, argv, "matrix-size")`, or a
# `"--n="` it compares argv with): given one, many programs generate their input instead of reading a file
_SIZE_OPTION_READ = re.compile(r'\bgetCmdLineArgument(?:Int|Value)?\s*(?:<[^<>;]*>)?\s*\([^;"]*"([A-Za-z][\w-]*)"'
                               r'|"(-{1,2}[A-Za-z][\w-]*)="')
_SIZE_OPTION_NAME = re.compile(r"(?i)size|width|height|length|^len|elements|^dim|^n$|^num_?elements|rows|cols")
_NOT_SIZE_OPTION = re.compile(r"(?i)block|thread|warp|tile|iter|log|device|gpu|seed|file|kernel|repeat|run")
_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
SIZE_OPTION_VALUE = 1024   # what a size option is given: small for the CPU, large enough for a program's big path


def size_options(texts: dict[Path, str]) -> list[tuple[str, Path, int]]:
    """(command-line argument form "--name", file, line) of the integer size options the program reads."""
    out: list[tuple[str, Path, int]] = []
    for f, text in texts.items():
        # comments blanked (their newlines kept), string literals kept: the option names are strings
        code = _COMMENT_OR_STRING.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else
                                      re.sub(r"[^\n]", " ", m.group(0)), text)
        for m in _SIZE_OPTION_READ.finditer(code):
            name = (m.group(1) or m.group(2)).lstrip("-")
            if not _SIZE_OPTION_NAME.search(name) or _NOT_SIZE_OPTION.search(name):
                continue
            form = m.group(2) or f"--{name}"
            if all(o[0] != form for o in out):
                out.append((form, f, code.count("\n", 0, m.start()) + 1))
    return out


def _with_size_option(cap: Capture, path: Path, wd: Path, exe: Path, prog: Program, texts: dict[Path, str],
                      timeout_s: float, byte_budget: int, max_per_kernel: int, early=lambda _argv: False) -> Capture:
    """The bare run stopped for an input file that is not there: run it with a size option it reads (a program
    given its size generates its input), and keep the first run that launches a kernel. Otherwise as it was."""
    for form, f, line in size_options(texts)[:2]:
        argv = [f"{form}={SIZE_OPTION_VALUE}"]
        att = Capture(file=cap.file, dir=cap.dir, argv=argv, defines=cap.defines,
                      notes=[n for n in cap.notes if n.kind == "include"])
        _execute(att, path, wd, exe, prog, timeout_s, byte_budget, max_per_kernel, early(argv))
        if not (att.launches or att._stopped):
            continue
        shown = prog.display.get(f.name, f.name)
        missing = ", ".join(dict.fromkeys(os.path.basename(_opened(n)) for n in cap.notes if n.kind == "input"))
        att.notes.append(CaptureNote(kind="argv", file=shown, line=line, message=(
            f"ran as `{path.stem} {' '.join(argv)}`: without arguments the program needs {missing}, which is not "
            f"there; given the size option it reads at {shown}:{line}, it makes its own input; pass --arg to give "
            f"your own")))
        return att
    return cap


def _with_documented_argv(cap: Capture, path: Path, wd: Path, exe: Path, prog: Program, timeout_s: float,
                          byte_budget: int, max_per_kernel: int, early=lambda _argv: False,
                          texts: dict[Path, str] | None = None) -> Capture:
    """The bare run stopped before its first launch: run the command lines its folder documents (sizes scaled
    down where large), then sizes made up from what its code and usage message say it reads (capture_argv.py),
    and keep the first that launches a kernel. Otherwise say what the program needs."""
    runs = documented_command_lines(path, cap.stdout_tail or "")
    tries: list[tuple[list[str], DocumentedRun | capture_argv.MadeUpRun]] = []
    for r in runs:
        if r.missing:
            continue
        s = _scaled(r.argv)
        for a in ([s, r.argv] if s != r.argv else [r.argv]):
            if all(a != t[0] for t in tries):
                tries.append((a, r))
    tries = tries[:3]
    scratch = wd.resolve() / "argv-files"
    scratch.mkdir(exist_ok=True)
    for m in capture_argv.made_up_runs(texts or {}, cap.stdout_tail or "", scratch):
        if all(m.argv != t[0] for t in tries):
            tries.append((m.argv, m))
    last: tuple[Capture, DocumentedRun | capture_argv.MadeUpRun] | None = None
    for argv, r in tries[:5]:
        att = Capture(file=cap.file, dir=cap.dir, argv=argv, defines=cap.defines,
                      notes=[n for n in cap.notes if n.kind == "include"])
        _execute(att, path, wd, exe, prog, timeout_s, byte_budget, max_per_kernel, early(argv))
        if isinstance(r, capture_argv.MadeUpRun):
            att.notes.append(CaptureNote(kind="argv", file=prog.display.get(path.name, path.name), message=(
                f"ran as `{path.stem} {' '.join(argv)}`: the program needs arguments and documents no command line "
                f"that runs here, so ksearch chose the sizes ({', '.join(r.sizes)}) from {r.why}; the program "
                f"makes its own input from them. Pass --arg to give your own")))
        else:
            scaled = " (its sizes scaled down from `" + " ".join(r.argv) + "`)" if argv != r.argv else ""
            file, _, line = r.where.rpartition(":")
            att.notes.append(CaptureNote(kind="argv", file=file or None, line=int(line) if line.isdigit() else None,
                                         message=(f"ran as `{r.name or path.stem} {' '.join(argv)}`, the command line "
                                                  f"documented at {r.where}{scaled}, since the program needs "
                                                  f"arguments; pass --arg to give your own")))
        if att.launches or att._stopped:
            return att
        last = (att, r) if last is None or isinstance(r, DocumentedRun) or not isinstance(last[1], DocumentedRun) \
            else last
    absent = [r for r in runs if r.missing]
    if last is not None and (isinstance(last[1], DocumentedRun) or not absent):
        att, r = last
        how = f"the command line documented at {r.where}" if isinstance(r, DocumentedRun) else \
            f"sizes chosen from {r.why}"
        att.error = f"with {how} (`{' '.join(att.argv)}`): {att.error}"
        return att
    if absent:
        r = absent[0]
        cap.error = (f"{r.where if r.where[-1:].isdigit() else Path(cap.file).name}: the program needs arguments, "
                     f"and the command line documented {'there' if r.where[-1:].isdigit() else 'in ' + r.where} "
                     f"(`{r.name or path.stem} {' '.join(r.argv)}`) names {', '.join(r.missing)}, which is not there — put "
                     f"the file there (relative to {path.parent}) or pass a command line naming your own input "
                     f"(--arg ...); ksearch never makes up input data. Without arguments: {cap.error}")
    return cap


def _run(cap: Capture, path: Path, wd: Path, include_dirs: list[Path], defines: dict[str, str],
         timeout_s: float, byte_budget: int, max_per_kernel: int, entry: str, sources: list[Path],
         texts: dict[Path, str] | None = None, execute: bool = True) -> tuple[Path, Program]:
    """Builds the program (texts: files' contents instead of the disk's) and, with execute, runs it once."""
    if not path.is_file():
        raise CaptureFailed(f"{path}: no such file — give the path of a .cu file with a main()")
    def make(resolve_targs: bool, more: list[Path]) -> tuple[Program, list[Program]]:
        prog = build_program(path, include_dirs, resolve_targs, leave_out, texts, allow_c=entry == "main")
        extra = [build_program(s, include_dirs, resolve_targs, leave_out, texts) for s in [*sources, *more]]
        # a source another unit already #includes (bucketsort.cu includes histogram1024_kernel.cu) is not
        # compiled again on its own
        units = [prog, *extra]
        extra = [e for e in extra if not any(u is not e and e.files and e.files[0] in u.files for u in units)]
        extra, drv_notes = _loaded_units(prog, extra, path, include_dirs, resolve_targs, leave_out, texts)
        prog.notes += drv_notes
        _merge_kernels(prog, extra)
        if entry != "main":
            prog.text += (f"\n#line 1 \"ksim-launch\"\nint main(int argc, char** argv) {{ "
                          f"return ksim_host_call_entry({entry}, argc, argv); }}\n")
            prog.text = prog.text.replace('#include "ksim_host.h"\n', '#include "ksim_host.h"\n'
                                          "template <class F> int ksim_host_call_entry(F f, int c, char** v) {\n"
                                          "  if constexpr (std::is_invocable<F, int, char**>::value) return (int)(f(c, v), 0);\n"
                                          "  else return (f(), 0); }\n", 1)
        return prog, extra

    leave_out = True   # headers of what the CPU cannot run: left out first (included but unused), else #error
    try:
        prog, extra = make(True, [])
    except OSError as e:
        raise CaptureFailed(f"{path}: cannot read ({e}) — check the path") from None
    cap.notes.extend(CaptureNote(**n) for n in prog.notes if "left out" not in n["message"])
    if entry != "main":
        defines = {**defines, "main": "ksim_user_main"}
    resolve_targs, linked = True, []
    for attempt in range(5):
        try:
            exe = _compile(prog, defines, extra)
            break
        except CaptureFailed as e:
            if attempt < 4 and leave_out and not e.undefined and (prog.left_out or any(x.left_out for x in extra)):
                leave_out = False   # it uses them: say so, naming the #include
                prog, extra = make(resolve_targs, linked)
                continue
            if attempt < 4 and "ksim-driver" in e.stderr and host_driver.drop_registrations([prog, *extra], e.stderr):
                continue   # a kernel's registration for the driver API that does not compile (host_driver.py)
            if attempt < 4 and ("ksim-launch" in e.error or "ksim_symreg" in e.error):
                prog.text = re.sub(r"^static ksim_host::SymReg .*$", "", prog.text, flags=re.M)
                continue
            if attempt < 4 and resolve_targs and re.search(r"\btarg<|join_targs", e.stderr):
                # a launch's template arguments that do not resolve where it is instantiated: as written
                resolve_targs = False
                prog, extra = make(False, linked)
                continue
            more = _defining_siblings(path, prog, extra, e.undefined) if e.undefined and attempt < 4 else []
            if not more:
                raise
            cap.notes.append(CaptureNote(kind="include", message="linked with " + ", ".join(
                os.path.relpath(m, path.parent) for m in more) + " (they define " + ", ".join(e.undefined[:4]) +
                "); pass sources=[...] to choose", file=prog.display.get(path.name, path.name)))
            linked += more
            extra += [build_program(m, include_dirs, resolve_targs, leave_out, texts) for m in more]
            _merge_kernels(prog, extra)
    left = {n["message"]: n for p in [prog, *extra] for n in p.notes if "left out" in n["message"]}
    cap.notes.extend(CaptureNote(**n) for n in left.values())
    prog.linked = extra
    if execute:
        _execute(cap, path, wd, exe, prog, timeout_s, byte_budget, max_per_kernel)
    return exe, prog


def _loaded_units(prog: Program, extra: list[Program], path: Path, include_dirs: list[Path], resolve_targs: bool,
                  leave_out: bool, texts: dict[Path, str] | None) -> tuple[list[Program], list[dict]]:
    """The kernel files the program loads at run time (driver API modules, NVRTC: host_driver.py) as units of their
    own, and what the driver API's stand-in needs; notes saying which files were compiled in."""
    own = {f.resolve() for f in prog.files}
    have = {f.resolve() for e in extra for f in e.files}
    folders = list(dict.fromkeys([path.parent.resolve(), *(e.files[0].parent.resolve() for e in extra if e.files)]))
    loaded = host_driver.loaded_kernel_files([u.text for u in [prog, *extra]], folders, own)
    extra = extra + [build_program(f, include_dirs, resolve_targs, leave_out, texts) for f, _ in loaded if f not in have]
    return host_driver.prepare(prog, extra, loaded)


def _limit(pid: int, file_bytes: int) -> None:
    """A started program's limits: files no larger than `file_bytes`, no core dumps (best effort: a program that
    already ended needs none)."""
    import resource
    for what, lim in ((resource.RLIMIT_FSIZE, file_bytes), (resource.RLIMIT_CORE, 0)):
        try:
            resource.prlimit(pid, what, (lim, lim))
        except (OSError, ValueError):
            pass


def _execute(cap: Capture, path: Path, wd: Path, exe: Path, prog: Program, timeout_s: float, byte_budget: int,
             max_per_kernel: int, early: bool = False, sms: int | None = None) -> None:
    """One run of the compiled program with cap.argv; fills cap (launches, notes, status, error). early: the
    program stops at the first launch of a kernel too big or too slow to record (cap._stopped says which), to be
    run again at smaller sizes. sms: the multiprocessor count the simulated device reports (a smaller device)."""
    for f in [*wd.glob("*.npy"), wd / "textures.jsonl"]:
        f.unlink(missing_ok=True)
    env = dict(os.environ, KSIM_CAPTURE_DIR=str(wd.resolve()), KSIM_CAPTURE_BUDGET=str(int(byte_budget)),
               KSIM_CAPTURE_MAX_PER_KERNEL=str(int(max_per_kernel)),
               KSIM_CAPTURE_TIMEOUT_MS=str(int(timeout_s * 1000)))
    if early:
        env.update(KSIM_CAPTURE_STOP_OVERSIZE="1", KSIM_CAPTURE_SLOW_MS=str(int(SLOW_S * 1000)))
    env["KSIM_CAPTURE_SMS"] = str(int(sms or capture_scale.device_sms()))
    out_p, err_p = wd / "stdout.txt", wd / "stderr.txt"

    timed_out = False
    with open(out_p, "wb") as out, open(err_p, "wb") as err:
        # argv[0] is the program's own name (usage lines, sample helpers that search data folders by it). No Python
        # runs between fork and exec (no preexec_fn): in a process holding other libraries' threads (gRPC's, under
        # Ray) a forked child that runs their fork handlers can abort before it ever execs (seen in CI: SIGABRT
        # from gRPC's epoll poller). The new session comes from subprocess itself, the limits right after.
        proc = subprocess.Popen([path.stem, *cap.argv], executable=str(exe), cwd=str(path.parent.resolve()), env=env,
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        _limit(proc.pid, max(byte_budget, 64 << 20) + (1 << 20))
        try:
            rc = proc.wait(timeout=timeout_s + 5)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            rc = proc.wait()
    cap.stdout_tail = _tail(out_p)
    err_tail = _tail(err_p)
    if err_tail.strip():
        cap.stdout_tail = (cap.stdout_tail + "\n[stderr]\n" + err_tail)[-_TAIL:]
    running, stop = _read_log(cap, wd, prog, exe)
    _place_input_notes(cap, exe, prog)
    cap.exit_code = rc
    if stop is not None and stop.get("kind") in ("oversize", "slow") and "launch" in stop:
        launch = stop["launch"]
        _name_pointed(launch, _fn_names(exe, _pointed(launch)))
        cap.launches = [ln for ln in cap.launches if ln.index != launch.get("index")]
        cap._stopped = stop
        cap.status = "partial"
        cap.error = (f"{path.name}: stopped at launch {launch.get('index')} of {launch.get('kernel')}, "
                     f"{'too big' if stop['kind'] == 'oversize' else 'too slow'} to record, to run at smaller sizes")
        return
    fault = ""
    try:
        raw = (wd / "fault.txt").read_bytes()
        fault = raw[:3072].split(b"\0")[0].decode("utf-8", "replace").strip()
        extra = raw[3072:].split(b"\0")[0].decode("utf-8", "replace").strip()
        if fault and extra:
            fault += "; " + extra
    except OSError:
        pass
    cap.exit_code = rc
    where_run = ""
    if running is not None:
        where_run = (f"kernel {running['kernel']} (launch {running['index']}, "
                     f"{prog.display.get(os.path.basename(running['file']), running['file'])}:{running['line']})")
    error = None
    if fault:
        text, line, file = _line_of(exe, fault)
        shown = prog.display.get(file or "", file)
        loc = f"{shown}:{line}" if line else (shown or str(path.name))
        am = re.search(r"allocation #(\d+)", text)
        if am and running is not None:
            info = prog.kernels.get(running["kernel"].split("::")[-1])
            for i, a in enumerate(running["args"]):
                if a.get("buffer") == int(am.group(1)):
                    nm = info.params[i].name if info is not None and i < len(info.params) else f"arg{i}"
                    text = text.replace(am.group(0), f"'{nm}' (allocation #{am.group(1)})")
                    break
        if running is not None and "in host code" not in text:
            error = f"{loc}: {text} in {where_run} — fix the kernel's indexing or the sizes it is launched with"
            cap.launches[-1].sim_error = f"{loc}: {text}"
        else:
            error = f"{loc}: {text} — the host program crashed"
    elif stop is not None and stop.get("kind") == "limit":
        error = (f"{path.name}: the time budget of {timeout_s:g} s ran out"
                 + (f" during {where_run}" if running else "") +
                 " — scale the program down (argv, defines) or raise timeout_s")
        if running is not None and cap.launches and cap.launches[-1].index == running["index"]:
            cap.launches[-1].sim_error = f"time budget of {timeout_s:g} s ran out during this launch"
    elif stop is not None:
        f, ln = stop.get("file"), stop.get("line")
        shown = prog.display.get(os.path.basename(f or ""), f)
        error = f"{shown}:{ln}: {stop['message']}" if shown else stop["message"]
        if stop["kind"] == "gpu_only":
            error += " — port the kernels that do not depend on it, or capture a version without it"
    elif timed_out:
        error = f"{path.name}: the program ran past its time budget of {timeout_s:g} s" + (
            f" during {where_run}" if running else "") + " — scale it down (argv, defines) or raise timeout_s"
    elif rc is not None and rc < 0:
        error = f"{path.name}: the program was killed by signal {-rc} ({signal.Signals(-rc).name}) — see stdout_tail"
    elif running is not None and rc != 0:
        error = f"{path.name}: the program exited with status {rc} during {where_run}"
    if running is not None and error is None and cap.launches and cap.launches[-1].index == running["index"]:
        cap.launches[-1].sim_error = "the program stopped during this launch"
    if error is not None:
        cap.error = error
        cap.status = "partial" if any(ln.sim_error is None for ln in cap.launches) else "failed"
    elif rc == 0 and not cap.launches:
        cap.status = "failed"
        cap.error = (f"{path.name}: the program finished without launching a kernel — it may need arguments or "
                     f"input files (argv=...); its output: " + " ".join((cap.stdout_tail or "").split())[-300:])
    elif rc != 0:
        cap.notes.append(CaptureNote(kind="program", message=f"the program exited with status {rc}"
                                     + (" (it may need input files or arguments: see stdout_tail)" if not cap.launches else "")))
        if not cap.launches:
            cap.status = "failed"
            cap.error = (f"{path.name}: the program exited with status {rc} before any kernel launch — it may "
                         f"need arguments or input files (argv=...); stdout/stderr: "
                         + " ".join((cap.stdout_tail or "").split())[-300:])
    if cap.status == "failed" and not cap.launches and any(w in (cap.error or "") for w in _STOPPED_EARLY):
        missing = _missing_input(cap)
        if missing:
            cap.error = missing


def _place_input_notes(cap: Capture, exe: Path, prog: Program) -> None:
    """Input notes ("could not open X [site=0x..]"): the source line of the fopen call instead of the marker."""
    lines: dict[str, tuple[str, int | None, str | None]] = {}
    for n in cap.notes:
        if n.kind != "input":
            continue
        m = re.search(r"\[site=0x[0-9a-f]+\]", n.message)
        if not m:
            continue
        if m.group(0) not in lines:
            lines[m.group(0)] = _line_of(exe, m.group(0))
        _, line, file = lines[m.group(0)]
        n.message = (n.message[:m.start()] + n.message[m.end():]).rstrip()
        if line:
            n.file, n.line = prog.display.get(file or "", file), line
    # a helper that searches many folders for one file (sdkFindFilePath): one note for the file
    inputs = [n for n in cap.notes if n.kind == "input"]
    by_name: dict[str, list[CaptureNote]] = {}
    for n in inputs:
        by_name.setdefault(os.path.basename(_opened(n)), []).append(n)
    drop = set()
    for name, group in by_name.items():
        if len(group) > 3:
            first = group[0]
            first.message = (f"could not open {name} for reading (looked for at {len(group)} paths, such as "
                             f"{_opened(first)})")
            drop |= {id(g) for g in group[1:]}
    cap.notes = [n for n in cap.notes if id(n) not in drop]


def _opened(n: CaptureNote) -> str:
    m = re.match(r"^could not open (.*?)(?: for reading: .*| for reading \(looked for at .*)?$", n.message)
    return m.group(1) if m else n.message


def _missing_input(cap: Capture) -> str | None:
    """For a run that stopped before its first launch: the input file it could not open, and what to do."""
    opens = [n for n in cap.notes if n.kind == "input"]
    if not opens:
        return None
    last = opens[-1]
    where = f"{last.file}:{last.line}: " if last.file and last.line else f"{Path(cap.file).name}: "
    what = _opened(last) + (last.message.split(" for reading", 1)[1].split(":")[0] if "looked for" in last.message else "")
    run = " ".join(cap.argv)
    m = re.match(r".*/argv-files/argv(\d+)$", _opened(last))
    if m:   # a file-name argument the capture gave a new path (capture_argv.py): the program reads it
        return (f"{where}the program stopped before its first kernel launch: it reads argument {m.group(1)} as an "
                f"input file — pass a command line naming your own input (--arg ...); ksearch never makes up input "
                f"data")
    return (f"{where}the program stopped before its first kernel launch: it could not open the input file {what}"
            f"{f' (run as: {Path(cap.file).stem} {run})' if run else ''} — put the file there (relative paths are "
            f"from {Path(cap.file).parent}), or pass a command line naming your own input (--arg ...); "
            f"ksearch never makes up input data")
