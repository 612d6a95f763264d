"""A workload for a kernel that no program launched: sizes found by running the kernel, never guessed blindly.

Used where a file has no `main()` (a header, a kernel-only file) or the program never reached a kernel. The
launch geometry comes from the file's own launch site where its expressions evaluate (with the file's
`#define`s), else from the kernel's use of 2-D indices. Scalar sizes start from the grid's thread count; every
buffer starts at a size that covers the grid and grows each time the simulator reports a fault past its end
(its guard page names the array), so the extents come from the kernel's own accesses.
"""
from __future__ import annotations

import re

import numpy as np

from .sim import SimError, run_cuda_source
from .sim.capture_models import ArgRecord, LaunchRecord

MAX_BUFFER_BYTES = 64 << 20
_PAST_END = re.compile(r"past the end of '([A-Za-z_]\w*)'")


class InferError(Exception):
    """No workload could be found; the message says why in the user's terms."""


def pointee(ctype: str, preamble: list[str] | None = None, subst: dict[str, str] | None = None) \
        -> tuple[str, int] | None:
    """(numpy dtype name, elements per C element) of a pointer parameter's base type, following scalar typedefs
    (`typedef float fp;`) and template parameters (`subst`: T -> float); None for structs."""
    from .task import ELEM_BYTES
    from .translate.launch import POINTEE
    from .translate.layout import resolve_scalar

    base = resolve_scalar(ctype, preamble or [], subst)
    if base is None:
        return None
    dt, size = POINTEE[base]
    return ("uint16" if dt == "bfloat16" else dt), max(1, size // ELEM_BYTES[dt])


def _struct_of(p, preamble, subst, defines, sources, k=None):
    """The StructLayout of a struct parameter's type (pointer or by value); InferError(final) where none."""
    from .translate.layout import LayoutError, resolve_type, struct_layout

    base = resolve_type(p.type, preamble, subst)
    template_names = {tp.name for tp in getattr(k, "template_params", [])}
    if base in template_names:
        err = InferError(f"parameter '{p.name}' has the template type {base}, which no launch in the file gives a "
                         f"concrete type (its launches pass their caller's own {base}): run its program, or give "
                         f"the template arguments in a task file")
        err.final = True
        raise err
    try:
        return struct_layout(base, preamble, defines, source=sources)
    except LayoutError as e:
        how = f"parameter '{p.name}' points to {base}" if p.pointer else \
            f"parameter '{p.name}' is a struct {base} passed by value"
        if e.kind == "pointer":
            why = (f"not verified: {e}: a linked structure; its pointers need the program that builds it "
                   f"(run the file's main(), or write a task file)")
        elif e.kind == "double":
            why = (f"not verified: {e}: both ports compute doubles as float (MLX GPU arrays have no float64, Metal "
                   f"no double), so its layout differs from the original's; check it on the real program")
        else:
            why = f"{how}: {e}: a workload for it needs the program that fills it (run the file's main(), or " \
                  f"write a task file)"
        err = InferError(why)
        err.final = True
        raise err from None


def _fill_struct(dt: np.dtype, n: int, rng, int_value=None) -> np.ndarray:
    """`n` structs of layout `dt`, field by field: floats in [0, 1), bools 0/1, integers small and non-negative
    (they are often indices and counts), or `int_value` for every integer field where given (a by-value struct's
    sizes, like a scalar's)."""
    out = np.zeros(n, dtype=dt)

    def fill(view, d):
        if d.names:
            for name in d.names:
                fill(view[name], d.fields[name][0])
            return
        base = d.base if d.subdtype else d
        if base.names:
            for name in base.names:
                fill(view[name], base.fields[name][0])
            return
        if base.kind == "f":
            view[...] = rng.uniform(0.0, 1.0, view.shape).astype(base)
        elif base.kind == "b":
            view[...] = rng.integers(0, 2, view.shape).astype(bool)
        elif int_value is not None:
            view[...] = min(int_value, int(np.iinfo(base).max))
        else:
            view[...] = rng.integers(0, 16, view.shape).astype(base)

    fill(out, dt)
    return out


def _eval_int(expr: str | None, env: dict[str, int]) -> tuple[int, ...] | None:
    if not expr:
        return None
    e = expr.strip()
    e = re.sub(r"\bdim3\b", "", e)
    e = re.sub(r"\(\s*(?:unsigned\s+)?(?:int|size_t|long)\s*\)", "", e)
    try:
        v = eval(e.replace("/", "//"), {"__builtins__": {}}, dict(env))
    except Exception:
        return None
    vals = v if isinstance(v, tuple) else (v,)
    if not vals or not all(isinstance(x, int) and 0 < x <= 1 << 20 for x in vals):
        return None
    return tuple(vals)


def _geometry(k, defines: dict[str, int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    two_d = re.search(r"(threadIdx|blockIdx|blockDim)\s*\.\s*y", k.body) is not None
    block = None
    for site in k.launches:
        block = _eval_int(site.block, defines)
        if block:
            break
    if block is None:
        block = (16, 16) if two_d else (128,)
    block = tuple(list(block) + [1, 1])[:3]
    if block[0] * block[1] * block[2] > 1024:
        block = (16, 16, 1) if two_d else (128, 1, 1)
    grid = (2, 2, 1) if two_d or block[1] > 1 else (2, 1, 1)
    return grid, block


def _candidates(k, defines, geometries, template_args):
    """(grid, block, smem, template args, scalars, origin, from the source) to try, the source's first."""
    out = []
    dyn = any(sh.dynamic for sh in k.shared)
    two_d = re.search(r"(threadIdx|blockIdx|blockDim)\s*\.\s*y", k.body) is not None
    for g in geometries or []:
        block = tuple(g.block)
        grid = tuple(g.grid) if g.grid else ((2, 2, 1) if two_d or block[1] > 1 else (2, 1, 1))
        smem = g.shared_mem if g.shared_mem is not None else 0
        if dyn and not smem:
            smem = block[0] * block[1] * block[2] * 8
        targs = g.template_args if g.template_args is not None else template_args
        if k.template_params and (not targs or any(t is None for t in targs)):
            continue
        out.append((grid, block, smem, targs, dict(g.scalars), g.origin, True))
    if k.template_params and (not template_args or any(t is None for t in template_args)):
        return out
    grid, block = _geometry(k, defines)
    smem = 0
    if dyn:
        given = next((v for v in (_eval_int(s.shared_mem, defines) for s in k.launches) if v), None)
        smem = given[0] if given else block[0] * block[1] * block[2] * 8
    out.append((grid, block, smem, template_args, {}, "", False))
    return out


def infer_launch(source: str, k, defines: dict[str, int], *, filename: str, template_args=None,
                 max_tries: int = 12, timeout_s: float = 20.0, include_dirs=(),
                 geometries=None, preamble: list[str] | None = None, sources=None) -> tuple[LaunchRecord, dict]:
    """A launch of `k` that runs in the simulator without faults: (its record, {param: numpy array or number}).

    `geometries` (launchsites.Geometry, best first) are the launches the source describes; each is tried in
    turn, and the made-up one only where none of them runs. An original that races under the geometry its
    source gives is not moved to another: InferError says so. Raises InferError when the kernel keeps faulting,
    hangs, or takes a parameter no workload can be made for. `preamble` (the file's file-scope declarations) gives
    the typedefs and structs parameters name: a struct buffer is made as a numpy structured array with the
    struct's C layout (translate.layout), a struct passed by value as its bytes.
    """
    cands = _candidates(k, defines, geometries, template_args)
    if not cands:
        raise InferError("a template kernel that no launch instantiates: run its program, or give the "
                         "template arguments in a task file")
    first_err: InferError | None = None
    raced: str | None = None
    for i, (grid, block, smem, targs, scalars, origin, from_source) in enumerate(cands):
        if raced and not from_source:
            break            # the source's own geometry races: a made-up one would hide it
        more = i + 1 < len(cands) and (from_source or not raced)
        try:
            rec, args = _infer_one(source, k, grid, block, smem, targs, scalars, filename=filename,
                                   max_tries=max_tries, timeout_s=timeout_s, include_dirs=include_dirs,
                                   race_check=from_source and more, preamble=preamble or [], defines=defines,
                                   sources=sources or [(filename, source)])
        except InferError as e:
            where = f" under {origin} (grid {grid}, block {block})" if origin else ""
            if getattr(e, "race", False):
                raced = raced or f"the original kernel races{where}: {e} -- the kernel is not deterministic " \
                                 f"on the launch its source gives; check it on the real program (run its main(), " \
                                 f"or write a task file)"
                continue
            if getattr(e, "final", False):    # a hang or a parameter no workload fits: no geometry helps
                raise InferError(f"{e}{where}") from None
            first_err = first_err or InferError(f"{e}{where}" if where else str(e))
            continue
        if origin:
            m = re.search(r"at (.+):(\d+)$", origin)
            if m:
                rec.file, rec.line = m.group(1), int(m.group(2))
        return rec, args
    raise InferError(raced) if raced else (first_err or InferError("no workload found"))


def _infer_one(source: str, k, grid, block, smem, template_args, scalars, *, filename, max_tries, timeout_s,
               include_dirs, race_check: bool, preamble=(), defines=None, sources=None) -> tuple[LaunchRecord, dict]:
    threads = grid[0] * block[0] * grid[1] * block[1] * grid[2] * block[2]
    side = max(grid[0] * block[0], grid[1] * block[1])
    rng = np.random.default_rng(0)
    sizes: dict[str, int] = {}
    args: dict[str, object] = {}
    records: list[ArgRecord] = []
    preamble = list(preamble)
    subst = {tp.name: str(a) for tp, a in zip(k.template_params, template_args or [])
             if tp.kind == "typename" and a is not None}
    structs: dict[str, object] = {}       # parameter -> StructLayout (a struct buffer, or a struct by value)
    for p in k.params:
        info = pointee(p.type, preamble, subst)
        if p.pointer:
            if info is None:
                structs[p.name] = _struct_of(p, preamble, subst, defines, sources, k)
                sizes[p.name] = max(256, threads * 2)
            else:
                sizes[p.name] = max(4096, threads * 4) * info[1]
        elif info is None:
            structs[p.name] = _struct_of(p, preamble, subst, defines, sources, k)

    def make(p):
        n = sizes[p.name]
        if p.name in structs:
            return _fill_struct(structs[p.name].dtype, n, rng)
        dt, lanes = pointee(p.type, preamble, subst)
        if dt.startswith("float"):
            return rng.uniform(0.0, 1.0, n).astype(dt)
        if dt == "bool":
            return rng.integers(0, 2, n).astype(np.bool_)
        return rng.integers(0, 16, n).astype(dt)

    def scalar(p):
        if p.name in structs:   # by value: its bytes, integer fields sized like integer scalars
            return _fill_struct(structs[p.name].dtype, 1, rng, int_value=side)[0].tobytes()
        dt = pointee(p.type, preamble, subst)[0]
        v = scalars.get(p.name)
        if dt.startswith("float"):
            return float(v) if isinstance(v, (int, float)) else 0.5
        if dt == "bool":
            return bool(v) if v is not None else True
        if isinstance(v, (int, float)):
            v = int(v)
            info = np.iinfo(np.dtype(dt)) if np.dtype(dt).kind in "iu" else None
            if info is None or info.min <= v <= info.max:
                return v
        return side

    last = ""
    for _ in range(max_tries):
        args = {}
        for p in k.params:
            args[p.name] = make(p) if p.pointer else scalar(p)
        try:
            run_cuda_source(source, k.name, grid, block, dict(args), smem, template_args=template_args,
                            filename=filename, timeout_s=timeout_s, check_races=False, strict_barriers=False,
                            include_dirs=list(include_dirs) or None)
            break
        except SimError as e:
            last = str(e)
            m = _PAST_END.search(e.message)
            if e.kind != "fault" or not m or m.group(1) not in sizes:
                err = InferError(f"the kernel does not run on a made-up workload ({last[:300]})")
                err.final = e.kind in ("timeout",)
                raise err from None
            sizes[m.group(1)] *= 4
            elem = structs[m.group(1)].dtype.itemsize if m.group(1) in structs else 8
            if sizes[m.group(1)] * elem > MAX_BUFFER_BYTES:
                raise InferError(f"'{m.group(1)}' keeps growing past {MAX_BUFFER_BYTES >> 20} MB on a made-up "
                                 f"workload: give the program that launches the kernel") from None
    else:
        raise InferError(f"no fault-free workload after {max_tries} tries ({last[:300]})")
    if race_check:
        try:
            run_cuda_source(source, k.name, grid, block, {n: (v.copy() if isinstance(v, np.ndarray) else v)
                                                          for n, v in args.items()}, smem,
                            template_args=template_args, filename=filename, timeout_s=timeout_s,
                            check_races=True, strict_barriers=False, include_dirs=list(include_dirs) or None)
        except SimError as e:
            err = InferError(str(e)[:400])
            err.race = e.kind == "race"
            raise err from None
    for p in k.params:
        v = args[p.name]
        if p.pointer and p.name in structs:
            records.append(ArgRecord(name=p.name, ctype=p.text or p.type, kind="buffer", dtype="uint8",
                                     elem_bytes=v.dtype.itemsize, nbytes=v.nbytes))
        elif p.pointer:
            dt, lanes = pointee(p.type, preamble, subst)
            records.append(ArgRecord(name=p.name, ctype=p.text or p.type, kind="buffer", dtype=dt,
                                     elem_bytes=np.dtype(dt).itemsize * lanes, nbytes=v.nbytes))
        elif p.name in structs:
            records.append(ArgRecord(name=p.name, ctype=p.text or p.type, kind="struct", raw_hex=v.hex()))
        else:
            records.append(ArgRecord(name=p.name, ctype=p.text or p.type, kind="scalar", value=v))
    rec = LaunchRecord(index=0, kernel=k.name, template_args=list(template_args or []), grid=grid, block=block,
                       shared_mem=smem, args=records)
    return rec, args
