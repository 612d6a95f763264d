"""Checks one kernel's port on real launches: those captured from the user's program, or one found by running
the kernel (portinfer). The comparison itself is translate.check.check_port (both dialects in the simulator, or
the real backend where a GPU is); this module turns launches into its calls and the results into one verdict.

What the port must reproduce is what the original left in memory: a captured launch's `after` contents where the
capture recorded them (the program's own run), else the original kernel re-run in the simulator on the same
inputs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from .sim.capture_models import Capture, LaunchRecord


class KernelCheck(BaseModel):
    passed: bool = False
    launches: int = 0                     # launches the port was checked on
    dialects: dict[str, str] = {}         # "metal"/"cuda"/backend -> passed / mismatch / ...
    messages: dict[str, str] = {}         # per dialect: one line (empty when passed)
    reason: str | None = None
    notes: list[str] = []                 # what the verdict covers (the instantiation of a template kernel)
    # the launches checked, with their arguments (for the GPU check against nvcc); not part of any JSON
    checked: list = Field(default_factory=list, exclude=True)


def _args_of(capture: Capture, rec: LaunchRecord, nullable=frozenset(), lifted: dict | None = None
             ) -> tuple[dict, dict]:
    """({param: numpy array | number | None}, {param: expected array after the launch}) of a captured launch;
    `nullable`: the pointer parameters the ports take None for (the kernel compares them with NULL); `lifted`:
    {(struct parameter, field byte offset): (the ports' buffer parameter, its dtype)} (translate/lift.py), each
    given what that pointer field pointed to in the launch."""
    args, expected = {}, {}
    for name, (buf, dtype) in (lifted or {}).items():
        e = next((e for e in rec.embedded if e.of_arg is not None and rec.args[e.of_arg].name == name[0]
                  and e.at == name[1]), None)
        if e is None or not e.before:
            raise ValueError(f"the capture holds no buffer for {name[0]}'s pointer field at byte {name[1]} in this "
                             f"launch (line {rec.line}): the program stored an address the capture does not know")
        args[buf] = _viewed(capture.load(e.before), dtype)
        if e.written and e.after:
            expected[buf] = _viewed(capture.load(e.after), dtype)
    for a in rec.args:
        if a.kind == "buffer":
            before = capture.load(a.before)
            args[a.name] = before
            if a.written and a.after:
                expected[a.name] = capture.load(a.after)
        elif a.kind == "scalar":
            args[a.name] = a.value
        elif a.kind == "struct":
            args[a.name] = bytes.fromhex(a.raw_hex or "")
        elif a.kind == "null" and a.name in nullable:   # launch(..., None): the kernel sees a null pointer
            args[a.name] = None
        elif a.kind == "null":
            raise ValueError(f"argument '{a.name}' ({a.ctype}) is a null pointer in this launch (line {rec.line}): the "
                             f"ports take every pointer as an array, so a launch passing NULL cannot be checked — "
                             f"check the port on a launch that passes a buffer (the program's other paths, or --arg)")
        else:
            raise ValueError(f"argument '{a.name}' ({a.ctype}) points to memory the capture does not know "
                             f"({a.kind.replace('_', ' ')})")
    for s in rec.symbols:
        args[s.name] = capture.load(s.before)
    from .translate.textures import surface_args, texture_args
    surfaces: dict = {}
    # textures the launch read (and surfaces it accessed): the port takes them as buffers; a launch that changed
    # nothing must leave its buffers as they were (the original cannot re-run without its program's textures)
    if (surface_args(capture, rec, args, surfaces) | texture_args(capture, rec, args)) and not expected:
        expected = {a.name: args[a.name].copy() for a in rec.args if a.kind == "buffer" and a.before}
    expected.update(surfaces)   # what the launch left in its surfaces (captured after it)
    return args, expected


def _heads_of(capture: Capture, rec: LaunchRecord) -> dict:
    """{buffer parameter: the elements of its allocation before the pointer} of a captured launch, for the pointers
    that point inside their allocations (`d_in + R`) where the capture recorded those elements (ArgRecord.head); the
    check passes the kernel the whole allocation with its pointer at the offset, as MLX passes a slice `x[R:]`.
    A kernel that wrote before its pointer cannot be checked: launch() hands back each buffer from its pointer on."""
    heads = {}
    for a in rec.args:
        if a.kind != "buffer" or not a.head:
            continue
        if a.head_after:
            if any(b is not a and b.kind == "buffer" and b.buffer == a.buffer and b.offset_bytes < a.offset_bytes
                   for b in rec.args):
                continue   # another argument points there (`k(buf, buf + n)`): its writes are compared through it
            raise ValueError(f"argument '{a.name}' points {a.offset_bytes} bytes into its allocation and the kernel "
                             f"writes before that pointer in this launch (line {rec.line}): the port's launch() "
                             f"hands back each buffer from its pointer on, so those writes cannot be compared")
        heads[a.name] = capture.load(a.head)
    return heads


def _viewed(a, dtype: str | None):
    """A captured byte buffer as the dtype the ports take it in (whole elements only)."""
    import numpy as np
    if not dtype or a.dtype == np.dtype(dtype):
        return a
    raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    size = np.dtype(dtype).itemsize
    return raw[: raw.size // size * size].view(dtype)


def lifted_params(params: list[dict]) -> dict:
    """{(struct parameter, field byte offset): (buffer parameter, dtype)} of a port's PARAMS (translate/lift.py)."""
    return {(p["lifted"]["param"], p["lifted"]["at"]): (p["name"], p.get("dtype")) for p in params if p.get("lifted")}


def _defaults(k, source: str) -> dict:
    """{parameter: value} of the kernel's scalar parameters with a default argument (`__global__ void spin(unsigned
    long long clocks = 100000ULL)`): a launch that leaves them out passes these, as C++ does (the values the port's
    PARAMS carry, translate.launch.default_value)."""
    from .translate.launch import default_value

    return {p.name: v for p in k.params if (v := default_value(p, [source])) is not None}


def _run_checks(module_text: str, source: str, k, path: Path, launches: list[tuple[LaunchRecord, dict, dict]],
                include_dirs, heads_of: dict | None = None) -> KernelCheck:
    """`heads_of` {launch index: {parameter: elements before its pointer}} (_heads_of)."""
    from .translate.check import check_port

    out = KernelCheck()
    for rec, args, expected in launches:
        res = check_port(module_text, source, k.name, {"args": args, "grid": tuple(rec.grid),
                                                        "block": tuple(rec.block), "shared_mem": rec.shared_mem,
                                                        "template_args": list(rec.template_args),
                                                        "heads": (heads_of or {}).get(rec.index)},
                         filename=path.name, include_dirs=list(include_dirs), expected=expected or None)
        out.checked.append((rec, args))
        out.notes += [n for n in getattr(res, "notes", []) if n not in out.notes]   # elements not compared by position
        for d, st in res.dialects.items():
            if out.dialects.get(d, "passed") == "passed":
                out.dialects[d] = st
                out.messages[d] = res.messages.get(d, "")
        out.launches += 1
        if not res.passed:
            where = f"launch #{rec.index + 1}" + (f" (line {rec.line})" if rec.line else "") \
                + f" grid {tuple(rec.grid)} block {tuple(rec.block)}"
            out.reason = f"{where}: {res.message}"
            return out
    out.passed = out.launches > 0
    return out


def _aliased(rec: LaunchRecord, expected: dict, port_writes: set[str]) -> str | None:
    """Pointer arguments of one allocation (an in-place launch: `k<<<...>>>(d_a, d_a, ...)`): the capture's `after`
    of each is the allocation's, which the port -- given a copy per parameter -- changes only through the
    parameters it writes. The others' expectations are dropped from `expected` (they are the port's read-only
    copies, which must stay as they were); returns a note naming them, or None where no argument aliases another."""
    groups: dict[int, list] = {}
    for a in rec.args:
        if a.kind == "buffer" and a.buffer is not None:
            groups.setdefault(a.buffer, []).append(a)
    dropped = []
    for group in groups.values():
        if len(group) < 2 or not any(a.name in port_writes for a in group):
            continue
        for a in group:
            if a.name not in port_writes and a.name in expected:
                del expected[a.name]
                dropped.append((a.name, next(b.name for b in group if b.name in port_writes)))
    if not dropped:
        return None
    return "; ".join(f"'{n}' points into the same allocation as '{w}' on launch #{rec.index + 1} (in place): the "
                     f"port gets a copy of each, so the result is compared through '{w}' (what the port writes)"
                     for n, w in dropped)


def check_captured(module_text: str, source: str, k, path: Path, capture: Capture,
                   launches: list[LaunchRecord], include_dirs=()) -> KernelCheck:
    from .captask import module_constant

    try:
        params = module_constant(module_text, "PARAMS")
    except (KeyError, SyntaxError, ValueError):
        params = []
    # `stored`: the kernel stores through it (every non-const pointer is `written`: launch() returns it)
    port_writes = {p["name"] for p in params if p.get("stored", p.get("written"))}
    nullable = {p["name"] for p in params if p.get("nullable")}
    lifted = lifted_params(params)
    prepared, notes, heads_of = [], [], {}
    defaults = _defaults(k, source)
    for rec in launches:
        try:
            args, expected = _args_of(capture, rec, nullable, lifted)
            args.update({n: v for n, v in defaults.items() if n not in args})
            heads_of[rec.index] = _heads_of(capture, rec)
        except (ValueError, OSError) as e:
            return KernelCheck(reason=f"launch #{rec.index + 1}: {e}")
        note = _aliased(rec, expected, port_writes)
        if note and not notes:     # one launch's note stands for all (a program launches one way in a loop)
            notes.append(note)
        prepared.append((rec, args, expected))
    res = _run_checks(module_text, source, k, path, prepared, include_dirs, heads_of)
    res.notes = notes + res.notes
    return res


def check_inferred(module_text: str, source: str, k, path: Path, define_ints: dict[str, int],
                   include_dirs=()) -> KernelCheck:
    from .portinfer import InferError, infer_launch, representative_template_args

    geoms = source_geometries(k, path, define_ints)
    # a template kernel: the instantiations its launches or defaults give, else representative ones (portinfer)
    choices = representative_template_args(k, define_ints) if k.template_params else None
    preamble, sources = file_scope(source, path, include_dirs)
    notes: list[str] = []
    expected: dict = {}    # filled where the original cannot re-run on the port's arguments (textures)
    try:
        rec, args = infer_launch(source, k, define_ints, filename=path.name, template_args=None,
                                 include_dirs=include_dirs, geometries=geoms, preamble=preamble, sources=sources,
                                 template_choices=choices, notes=notes, expected=expected)
    except InferError as e:
        return KernelCheck(reason=str(e))
    except Exception as e:  # the simulator's own failures name the line; anything else is ours
        return KernelCheck(reason=f"no workload could be found ({str(e)[:300]})")
    res = _run_checks(module_text, source, k, path, [(rec, {n: (v.copy() if isinstance(v, np.ndarray) else v)
                                                            for n, v in args.items()}, expected)], include_dirs)
    res.notes = notes + res.notes
    return res


def file_scope(source: str, path: Path, include_dirs=()) -> tuple[list[str], list[tuple[str, str]]]:
    """(file-scope declarations the kernels see: the file's, its program prefix's and its local headers',
    [(file name, text)] they come from) -- the typedefs and structs a workload's buffers are laid out by."""
    import re

    from .source import find_kernels
    from .translate.headers import header_preamble, with_aggregates

    try:
        # (with the file's classes and aggregates the parser leaves out of its entries, as the translator reads them)
        preamble = with_aggregates(list(find_kernels(source, str(path)).preamble), source)
        preamble = [e for e in header_preamble(source, list(include_dirs)) if e not in preamble] + preamble
    except Exception:   # a reading this module does not follow: scalars and built-in types still apply
        return [], [(path.name, source)]
    first = path.name
    if '#line 1 "' in source:   # a program's text before the file (portfile.with_program_prefix)
        from .portfile import find_program
        prog = find_program(path)
        first = prog.name if prog else ""
    sources = [(first, source)]
    dirs = [path.parent] + [Path(d) for d in include_dirs]
    for inc in dict.fromkeys(re.findall(r'^[ \t]*#\s*include\s*"([^"]+)"', source, re.M)):
        for d in dirs:
            f = d / inc
            if f.is_file():
                try:
                    sources.append((f.name, f.read_text(errors="replace")))
                except OSError:
                    pass
                break
    return preamble, sources


def source_geometries(k, path: Path, define_ints: dict[str, int]) -> list:
    """The launch geometries the source gives `k` (launchsites); none where it cannot be read."""
    from .launchsites import kernel_geometries

    try:
        return kernel_geometries(k, path, given_defines=define_ints)
    except Exception:   # a reading this module does not follow: the made-up geometry still applies
        return []
