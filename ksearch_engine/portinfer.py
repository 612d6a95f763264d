"""A workload for a kernel that no program launched: sizes found by running the kernel, never guessed blindly.

Used where a file has no `main()` (a header, a kernel-only file) or the program never reached a kernel. The
launch geometry comes from the file's own launch site where its expressions evaluate (with the file's
`#define`s), else from the kernel's use of 2-D indices, moved where the kernel's own checks on its block
(`assert(blockDim.x == 64)`, blockneeds) reject it. Scalar sizes start from the grid's thread count; every
buffer starts at a size that covers the grid and grows each time the simulator reports a fault past its end
(its guard page names the array), so the extents come from the kernel's own accesses.

A template kernel runs at the template arguments its launch sites give, else at representative ones, and the
verdict names the instantiation checked. Texture objects and references get textures made over made-up texels.
Made-up loop counts that run past the time limit are taken small; dynamic shared memory no launch sizes grows
while the kernel faults outside every buffer.
"""
from __future__ import annotations

import re

import numpy as np

from .sim import SimError, run_cuda_source
from .sim.capture_models import ArgRecord, LaunchRecord

MAX_BUFFER_BYTES = 64 << 20
# dynamic shared memory no launch gives: 16 bytes a thread (two 4-byte elements each and bank-conflict padding, as
# scans and sorts take), grown x4 while the kernel faults at no named buffer, up to what a block may have
DYN_SMEM_PER_THREAD = 16
MAX_DYN_SMEM = 232448
# a made-up integer that a counting loop runs to (`for (i = 0; i < iteration; i++)`), after a time-out: this small
SHRUNK_COUNT = 8


def _loop_count(name: str):
    n = re.escape(name)
    return re.compile(rf"\bfor\s*\([^;]*;\s*[A-Za-z_]\w*\s*<=?\s*\(?\s*{n}\b[^;]*;\s*"
                      rf"(?:\+\+\s*[A-Za-z_]\w*|[A-Za-z_]\w*\s*\+\+|[A-Za-z_]\w*\s*\+=\s*1\b)")


_EXTERN_SHARED = re.compile(r"\bextern\s+(?:[\w:<>,\s]*\s)?__shared__\b")
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
    from .translate.layout import LayoutError, StructLayout, empty_tag, resolve_type, struct_layout

    if not p.pointer and empty_tag(p.type, preamble):   # std::bool_constant<B>{}, an empty struct: one byte (C++'s
        return StructLayout(name=p.type, dtype=np.dtype([("tag", "u1")]), align=1)   # sizeof), never read
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
        from .translate.layout import double_repack
        if e.kind == "double" and double_repack(base, preamble, defines) is not None:
            # the C layout with its doubles: launch() hands the ports each struct with its doubles as float
            return struct_layout(base, preamble, defines, source=sources, keep_doubles=True)
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


def _kernel_tree(k, source: str | None):
    """[(text, {template parameter: argument})] of `k`'s body and the bodies of the `__device__` helpers it calls
    (each with the template arguments the kernel's calls give it, helpershared._template_bindings)."""
    out = [(k.body, {})]
    if not source:
        return out, []
    try:
        from .source import find_kernels
        from .translate import analysis
        from .translate.helpershared import _template_bindings
        pr = find_kernels(source, "cuda")
        helpers = analysis.called_helpers(k, pr.helpers)
        binds = _template_bindings(k, helpers)
    except Exception:   # a reading this module does not follow: the kernel's own text still counts
        return out, []
    return out + [(h.body, binds.get(h.name, {})) for h in helpers], helpers


def _shared_block_shape(k, source: str | None, defines: dict[str, int], template_args=None):
    """A block shape `k`'s shared tiles imply: a 2-D/3-D `__shared__` array (of the kernel or a helper it calls)
    indexed `[threadIdx.y][threadIdx.x]` (or through locals `ty = threadIdx.y`, or a function-like macro
    `#define AS(i, j) As[i][j]`) holds one element per thread of a (cols x rows) block; its sizes are evaluated with
    the defines, the kernel's template arguments and those the kernel instantiates its helpers with. None where
    no tile is indexed so or its sizes are unknown."""
    tree, helpers = _kernel_tree(k, source)
    env = dict(defines)
    for tp, a in zip(k.template_params, template_args or []):
        v = _eval_int(str(a), env) if a is not None else None
        if v and len(v) == 1:
            env[tp.name] = v[0]
    decls = [(sd, env) for sd in k.shared]
    try:
        from .translate.helpershared import _declarations
        for h, (_, bind) in zip(helpers, tree[1:]):
            henv = dict(env)
            for name, a in bind.items():
                v = _eval_int(a, env)
                if v and len(v) == 1:
                    henv[name] = v[0]
            decls += [(sd, henv) for sd, _ in _declarations(h)]
    except Exception:
        pass
    text = "\n".join(t for t, _ in tree)
    axes = {}
    for ax in "xyz":
        names = {f"threadIdx\\s*\\.\\s*{ax}"} | {re.escape(m) for m in re.findall(
            rf"\b([A-Za-z_]\w*)\s*=\s*(?:\([^()]*\)\s*)?threadIdx\s*\.\s*{ax}\s*;", text)}
        axes[ax] = "(?:" + "|".join(sorted(names)) + ")"
    macros = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(
        r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^()]*)\)[ \t]+(.+)$", source or "", re.M)}
    for sd, senv in decls:
        dims = len(sd.sizes)
        if sd.dynamic or dims not in (2, 3):
            continue
        sizes = [_eval_int(x, senv) for x in sd.sizes]
        if not all(v and len(v) == 1 for v in sizes):
            continue
        sizes = [v[0] for v in sizes]
        order = [axes[a] for a in "zyx"[3 - dims:]]
        idx = r"\s*\]\s*\[\s*".join(order)
        hit = re.search(rf"\b{re.escape(sd.name)}\s*\[\s*{idx}\s*\]", text) is not None
        for mname, (params, body) in macros.items():
            ps = [x.strip() for x in params.split(",")]
            if hit or len(ps) != dims or not re.match(
                    rf"\s*\(?\s*{re.escape(sd.name)}\s*" + "".join(rf"\[\s*\(?\s*{re.escape(q)}\s*\)?\s*\]\s*"
                                                                for q in ps), body):
                continue
            hit = re.search(rf"\b{re.escape(mname)}\s*\(\s*" + r"\s*,\s*".join(order) + r"\s*\)", text) is not None
        block = tuple(reversed(sizes)) + (1,) * (3 - dims)
        if hit and block[0] * block[1] * block[2] <= 1024:
            return block
    return None


def _tile_block(k, defines: dict[str, int], template_args=None):
    """(P*P, 1, 1) where a kernel without threadIdx.y splits a 1-D block into a P x P tile (`threadIdx.x / P` and
    `threadIdx.x % P`, P a define or a template parameter with a value), else None."""
    if re.search(r"(threadIdx|blockDim)\s*\.\s*y", k.body):
        return None
    env = dict(defines)
    for tp, a in zip(k.template_params, template_args or []):
        v = _eval_int(str(a), env) if a is not None else None
        if v and len(v) == 1:
            env[tp.name] = v[0]
    for m in re.finditer(r"threadIdx\s*\.\s*x\s*/\s*\(?\s*([A-Za-z_]\w*)\b", k.body):
        name = m.group(1)
        if name in env and re.search(rf"threadIdx\s*\.\s*x\s*%\s*\(?\s*{re.escape(name)}\b", k.body):
            v = env[name]
            if isinstance(v, int) and 0 < v * v <= 1024:
                return (v * v, 1, 1)
    return None


def _geometry(k, defines: dict[str, int], source: str | None = None, template_args=None, *, needs=None,
              notes: list[str] | None = None) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) made up for `k`; the block meets the kernel's own checks on it (`needs`, blockneeds: the block
    nearest the made-up one that does, and a line in `notes` saying so) where some block can."""
    tree, _ = _kernel_tree(k, source)
    two_d = any(re.search(r"(threadIdx|blockIdx|blockDim)\s*\.\s*y", t) for t, _ in tree)
    block = None
    for site in k.launches:
        block = _eval_int(site.block, defines)
        if block:
            break
    if block is None:
        # shared tiles indexed by the thread's y and x give the block's shape (`As[ty][tx]` of a 16x16 tile)
        block = _shared_block_shape(k, source, defines, template_args) if two_d else None
    if block is None:
        block = _tile_block(k, defines, template_args)
    if block is None:
        block = (16, 16) if two_d else (128,)
    block = tuple(list(block) + [1, 1])[:3]
    if block[0] * block[1] * block[2] > 1024:
        block = (16, 16, 1) if two_d else (128, 1, 1)
    if needs:
        from .blockneeds import fit_block
        fitted = fit_block(block, needs)
        if fitted is not None and fitted != block:
            if notes is not None:
                notes.append(f"the made-up block is {fitted} (not {block}), to meet the kernel's own check"
                             f"{'s' if len(needs) > 1 else ''} on its block: {', '.join(n.where() for n in needs)}")
            block = fitted
    grid = (2, 2, 1) if two_d or block[1] > 1 else (2, 1, 1)
    return grid, block


def _needs(k, source, defines, targs, filename, sources):
    """The kernel's checks on its block shape at template arguments `targs` (blockneeds); none where they cannot be
    read."""
    from .blockneeds import block_needs
    try:
        return block_needs(k, source or "", defines, targs, filename=filename,
                           texts=[source] + [t for _, t in (sources or [])[1:]] if source else None)
    except Exception:   # a reading this module does not follow: the block is made up as without the checks
        return []


# C types a template argument written at a launch site may name (anything else may be the caller's own parameter)
_CONCRETE_TYPES = re.compile(r"^(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:float|double|int|char|short|long(?:\s+long)?|"
                             r"unsigned|bool|half|__half|__nv_bfloat16|size_t|u?int(?:8|16|32|64)_t|"
                             r"(?:u?char|u?short|u?int|u?long|float|double)[1-4])$")


def _enum_param(tp) -> bool:
    """A non-type template parameter of a named type that is not a built-in integer (`template <test_t T>`): an
    enumeration, whose arguments are its enumerators (an int does not convert to it)."""
    from .launchsites import SIZEOF
    kind = " ".join(tp.kind.split())
    return tp.kind not in ("typename", "bool") and kind not in SIZEOF \
        and re.fullmatch(r"[A-Za-z_][\w:]*", kind) is not None


def _concrete_targ(text: str, tp) -> bool:
    t = " ".join(text.split())
    if tp.kind == "typename":
        return _CONCRETE_TYPES.match(t) is not None
    if _enum_param(tp) and re.fullmatch(r"[A-Za-z_][\w:]*", t):   # an enumerator, as the launch writes it
        return True
    return re.fullmatch(r"-?\d+[uUlL]*|true|false", t) is not None


def representative_template_args(k, defines: dict[str, int] | None = None) -> list[list[str]]:
    """Instantiations of template kernel `k` to check where no launch in the sources gives all its arguments, best
    first: each parameter takes what the kernel's own launches write for it where that is a literal or a concrete
    type, else its default, else a representative (a type: float, then int; a bool: false, then true; a block-size
    parameter: 128). Empty where a non-type parameter has no value anywhere (an instantiation would be a guess)."""
    per: list[list[str]] = []
    for i, tp in enumerate(k.template_params):
        vals = []
        for s in k.launches:
            if len(s.template_args) > i:
                v = " ".join(s.template_args[i].split())
                if v in (defines or {}) and tp.kind != "typename" and not _enum_param(tp):
                    v = str(defines[v])
                if _concrete_targ(v, tp) and v not in vals:
                    vals.append(v)
        if vals:
            opts = vals[:2]
        elif tp.default:
            opts = [tp.default.strip()]
        elif tp.kind == "typename":
            opts = ["float", "int"]
        elif tp.kind == "bool":
            opts = ["false", "true"]
        else:
            from .launchsites import _BLOCK_PARAM
            if not _BLOCK_PARAM.match(tp.name):
                return []
            opts = ["128"]
        per.append(opts)
    per = _fit_block_params(k, per, defines or {})
    first = [o[0] for o in per]
    out = [first]
    for i, o in enumerate(per):      # then each parameter's second choice, one at a time
        if len(o) > 1:
            out.append(first[:i] + [o[1]] + first[i + 1:])
    return out[:3]


STATIC_SMEM_LIMIT = 48 << 10      # CUDA's static __shared__ limit per block
_ELEM_BYTES = {"double": 8, "long": 8, "long long": 8, "size_t": 8, "int64_t": 8, "uint64_t": 8, "float2": 8,
               "int2": 8, "float4": 16, "int4": 16, "double2": 16, "half": 2, "__half": 2, "short": 2,
               "__nv_bfloat16": 2, "char": 1, "unsigned char": 1, "bool": 1, "int8_t": 1, "uint8_t": 1}


def static_shared_bytes(k, env: dict) -> int | None:
    """Bytes of `k`'s static `__shared__` arrays with the names of `env` (defines, template arguments) given
    values; None where a size does not evaluate."""
    total = 0
    for sh in k.shared:
        if sh.dynamic:
            continue
        n = 1
        for x in sh.sizes or ["1"]:
            v = _eval_int(x, env)
            if not v or len(v) != 1:
                return None
            n *= v[0]
        t = " ".join(w for w in sh.type.split() if w not in ("const", "volatile", "unsigned", "signed")) or "int"
        total += n * _ELEM_BYTES.get(t, 4)
    return total


def _fit_block_params(k, per: list[list[str]], defines: dict) -> list[list[str]]:
    """The representative values of block-size template parameters (128) halved until the kernel's static shared
    arrays fit CUDA's 48 KB, a tile of P x P threads that a 1-D block covers (`threadIdx.x / P`,
    `threadIdx.x % P`) fits 1024 threads and the kernel's `static_assert`s that read with them hold, else doubled
    (up to 1024) until they do. Values a launch or a default gave are kept."""
    from .blockneeds import static_checks
    from .launchsites import _BLOCK_PARAM, EvalError, Unknown, build_scope, evaluate
    made = [i for i, (tp, o) in enumerate(zip(k.template_params, per))
            if tp.kind != "typename" and o == ["128"] and not tp.default and _BLOCK_PARAM.match(tp.name)]
    if not made:
        return per
    vals = {i: 128 for i in made}
    checks = static_checks(k)
    scope = build_scope([""]) if checks else None

    def fits() -> bool:
        env = dict(defines)
        for i, (tp, o) in enumerate(zip(k.template_params, per)):
            v = vals.get(i, None)
            if v is None:
                ev = _eval_int(o[0], env)
                if ev and len(ev) == 1:
                    env[tp.name] = ev[0]
            else:
                env[tp.name] = v
        b = static_shared_bytes(k, env)
        if b is not None and b > STATIC_SMEM_LIMIT:
            return False
        for i in made:
            name = re.escape(k.template_params[i].name)
            tile = re.search(rf"threadIdx\s*\.\s*x\s*/\s*\(?\s*{name}\b", k.body) and \
                re.search(rf"threadIdx\s*\.\s*x\s*%\s*\(?\s*{name}\b", k.body)
            if tile and vals[i] * vals[i] > 1024:
                return False
        for c in checks:
            try:
                v, unk = evaluate(c, scope, env)
            except (EvalError, Unknown):
                continue      # a condition on something else (a type trait, a parameter without a value)
            if not unk and not v:
                return False
        return True

    for v in (128, 64, 32, 16, 8, 4, 2, 1, 256, 512, 1024):
        vals = {i: v for i in made}
        if fits():
            break
    else:
        vals = {i: 1 for i in made}
    return [[str(vals[i])] if i in vals else o for i, o in enumerate(per)]


def _candidates(k, defines, geometries, template_args, template_choices=None, source=None, filename="",
                sources=None):
    """(grid, block, smem, template args, scalars, origin, from the source, grow smem, notes) to try, the source's
    first; the made-up geometry at `template_args`, else at each of `template_choices` (representative
    instantiations). A geometry whose block the kernel's own checks reject (`assert(blockDim.x == 64)`, blockneeds)
    is left out where some block meets them; the made-up block meets them."""
    out = []
    needs_at: dict = {}

    def needs(targs):
        key = tuple(str(t) for t in targs or ())
        if key not in needs_at:
            needs_at[key] = _needs(k, source, defines, targs, filename, sources)
        return needs_at[key]
    dyn = any(sh.dynamic for sh in k.shared)
    two_d = re.search(r"(threadIdx|blockIdx|blockDim)\s*\.\s*y", k.body) is not None
    for g in geometries or []:
        block = tuple(g.block)
        grid = tuple(g.grid) if g.grid else ((2, 2, 1) if two_d or block[1] > 1 else (2, 1, 1))
        smem = g.shared_mem if g.shared_mem is not None else 0
        grow = dyn and not smem
        if grow:
            smem = block[0] * block[1] * block[2] * DYN_SMEM_PER_THREAD
        targs = g.template_args if g.template_args is not None else template_args
        if k.template_params and (not targs or any(t is None for t in targs)):
            continue
        ns = needs(targs)
        if ns and not all(n.holds(block) for n in ns):
            from .blockneeds import fit_block
            if fit_block(block, ns) is not None:
                continue     # the kernel's own check rejects this block: it fails on every thread
        out.append((grid, block, smem, targs, dict(g.scalars), g.origin, g.from_source, grow, []))
    choices = [template_args]
    if k.template_params and (not template_args or any(t is None for t in template_args)):
        choices = [c for c in template_choices or [] if c]
    for targs in choices:
        made: list[str] = []
        grid, block = _geometry(k, defines, source, targs, needs=needs(targs), notes=made)
        smem, grow = 0, False
        if dyn:
            given = next((v for v in (_eval_int(s.shared_mem, defines) for s in k.launches) if v), None)
            grow = not given
            smem = given[0] if given else block[0] * block[1] * block[2] * DYN_SMEM_PER_THREAD
        out.append((grid, block, smem, targs, {}, "", False, grow, made))
    return out


def infer_launch(source: str, k, defines: dict[str, int], *, filename: str, template_args=None,
                 max_tries: int = 12, timeout_s: float = 20.0, include_dirs=(),
                 geometries=None, preamble: list[str] | None = None, sources=None, template_choices=None,
                 notes: list[str] | None = None, expected: dict | None = None) -> tuple[LaunchRecord, dict]:
    """A launch of `k` that runs in the simulator without faults: (its record, {param: numpy array or number}).

    `geometries` (launchsites.Geometry, best first) are the launches the source describes; each is tried in
    turn, and the made-up one only where none of them runs. An original that races under the geometry its
    source gives is not moved to another: InferError says so. Raises InferError when the kernel keeps faulting,
    hangs, or takes a parameter no workload can be made for. `preamble` (the file's file-scope declarations) gives
    the typedefs and structs parameters name: a struct buffer is made as a numpy structured array with the
    struct's C layout (translate.layout), a struct passed by value as its bytes.

    A template kernel runs at the template arguments a geometry gives, else at `template_args`, else at each of
    `template_choices` in turn (representative_template_args); `notes` (a list) gets one line naming the
    instantiation that ran and where its arguments came from.

    Texture objects the kernel takes and texture references it reads are made over made-up texels (extents
    covering the grid, addressing as the host code sets it up, else point filtering and clamping); the returned
    arguments hold them as the port takes them (texels and geometry) and `expected` (a dict) gets what the original
    left in memory, since the original cannot re-run on those.
    """
    cands = _candidates(k, defines, geometries, template_args, template_choices, source, filename, sources)
    if not cands:
        raise InferError("a template kernel that no launch instantiates, with a non-type template parameter that "
                         "neither a launch nor a default gives a value: run its program, or give the template "
                         "arguments in a task file")
    first_err: InferError | None = None
    raced: str | None = None
    for i, (grid, block, smem, targs, scalars, origin, from_source, grow, fit_notes) in enumerate(cands):
        if raced and not from_source:
            break            # the source's own geometry races: a made-up one would hide it
        more = i + 1 < len(cands) and (from_source or not raced)
        made: list[str] = []
        try:
            rec, args = _infer_one(source, k, grid, block, smem, targs, scalars, filename=filename, grow_smem=grow,
                                   made_notes=made,
                                   max_tries=max_tries, timeout_s=timeout_s, include_dirs=include_dirs,
                                   race_check=from_source and more, preamble=preamble or [], defines=defines,
                                   sources=sources or [(filename, source)], expected=expected)
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
        if notes is not None:
            notes.extend(fit_notes + made)
        if origin:
            m = re.search(r"\bat (.+?):(\d+)(?: with |$)", origin)
            if m:
                rec.file, rec.line = m.group(1), int(m.group(2))
            if " with " in origin and notes is not None:   # a launch taken at smaller host-side sizes
                notes.append(f"checked on {origin}")
        if k.template_params and targs and notes is not None:
            inst = f"{k.name}<{', '.join(str(t) for t in targs)}>"
            if origin:
                notes.append(f"checked on the instantiation {inst}, from {origin}")
            elif template_args and list(targs) == list(template_args):
                notes.append(f"checked on the instantiation {inst}")
            else:
                notes.append(f"checked on the instantiation {inst} only: no launch in the sources gives all its "
                             f"template arguments, so representative ones were taken (a type: float, then int; "
                             f"the launches' own values and the defaults where given); other instantiations "
                             f"are not verified")
        return rec, args
    raise InferError(raced) if raced else (first_err or InferError("no workload found"))


# ---- textures a made-up workload reads: made over made-up texels, as the host code would set them up ----
_NP_OF = {"float": "float32", "int": "int32", "unsigned int": "uint32", "unsigned": "uint32", "uint": "uint32",
          "short": "int16", "unsigned short": "uint16", "ushort": "uint16", "char": "int8", "signed char": "int8",
          "unsigned char": "uint8", "uchar": "uint8"}
_VEC_OF = re.compile(r"^(u?char|u?short|u?int|float)([1-4])$")
_FETCH_DIMS = {"tex1Dfetch": 1, "tex1D": 1, "tex2D": 2, "tex3D": 3}
_ADDR_WORDS = (("wrap", 0), ("clamp", 1), ("mirror", 2), ("border", 3))


def _texel_type(t: str) -> tuple[str, int] | None:
    """(numpy dtype of one channel, channels) of a texel type written in C (float, uchar4, unsigned int)."""
    t = " ".join(t.replace("const", " ").split())
    v = _VEC_OF.match(t)
    if v:
        base = {"uchar": "unsigned char", "ushort": "unsigned short", "uint": "unsigned int"}.get(v.group(1), v.group(1))
        return (_NP_OF[base], int(v.group(2))) if base in _NP_OF else None
    return (_NP_OF[t], 1) if t in _NP_OF else None


def _host_modes(texts: list[str], name: str | None) -> dict:
    """The addressing the host code sets up: a texture reference's own fields (`name.filterMode = ...`), else the
    first texture descriptor's (`texDescr.normalizedCoords = true`, the driver API's `TexDesc.flags`); point
    filtering, clamped and unnormalized where the code says nothing."""
    modes = {"addr": [1, 1, 1], "linear": False, "normalized": False, "norm_read": False}
    who = re.escape(name) if name else r"[A-Za-z_]\w*"
    seen = set()
    for t in texts:
        for m in re.finditer(rf"\b{who}\s*\.\s*(filterMode|normalized(?:Coords)?|readMode|flags|addressMode\s*\[\s*(\d)\s*\])"
                             rf"\s*=\s*([^;]+);", t):
            field, idx, val = m.group(1), m.group(2), m.group(3)
            key = field if idx is None else f"addr{idx}"
            if key in seen:
                continue
            seen.add(key)
            low = val.lower()
            if field == "filterMode":
                modes["linear"] = "linear" in low
            elif field.startswith("normalized"):
                modes["normalized"] = low.strip() in ("true", "1") or "true" in low
            elif field == "readMode":
                modes["norm_read"] = "normalizedfloat" in low
            elif field == "flags":
                modes["normalized"] = "normalized_coordinates" in low
            elif idx is not None and int(idx) < 3:
                hit = min(((low.find(w), v) for w, v in _ADDR_WORDS if w in low), default=None)
                if hit:
                    modes["addr"][int(idx)] = hit[1]
    return modes


def _texture_plan(source: str, k, texts: list[str], grid, block, threads: int, rng) -> tuple[dict, dict]:
    """({texture name: run_cuda_source texture spec}, {name: the port's arguments for it}) for the texture object
    parameters and file-scope texture references `k` reads. Extents cover the grid (1-D fetches: like a buffer);
    texels are made up like buffers; addressing as the host code sets it up (_host_modes)."""
    from .translate.textures import OBJECT_TYPES, read_type, references

    objs = [p.name for p in k.params if not p.pointer and " ".join(p.type.replace("const", " ").split()) in OBJECT_TYPES]
    refs = references(source)
    used = [n for n in refs if re.search(rf"\b{re.escape(n)}\b", k.body)]
    if not objs and not used:
        return {}, {}
    fetch = re.compile(r"\b(tex\w+)\s*(?:<\s*([^<>()]+?)\s*>)?\s*\(\s*([A-Za-z_]\w*)\b")
    specs, port = {}, {}
    for name in objs + used:
        calls = [m for m in fetch.finditer(k.body) if m.group(3) == name]
        fn = calls[0].group(1) if calls else "tex1Dfetch"
        if fn not in _FETCH_DIMS:
            err = InferError(f"texture '{name}' is read with {fn}: a made-up workload makes 1-D, 2-D and 3-D textures "
                             f"only (run its program to check it on its own textures)")
            err.final = True
            raise err
        modes = _host_modes(texts, name if name in used else None)
        if name in used:
            t, _dim, norm = refs[name]
            modes["norm_read"] = norm
            store, r = _texel_type(t), read_type(t, norm)
        else:
            r = " ".join((calls[0].group(2) or "float").split()) if calls else "float"
            rt_ = _texel_type(r)
            store = ("uint8", rt_[1]) if modes["norm_read"] and rt_ and rt_[0] == "float32" else rt_
        if store is None or _texel_type(r) is None:
            err = InferError(f"texture '{name}' holds texels of a type a made-up workload does not make ({r})")
            err.final = True
            raise err
        dt, comps = store
        dims = _FETCH_DIMS[fn]
        linear_mem = fn == "tex1Dfetch"
        if linear_mem:
            w, h, d = max(4096, threads * 4), 1, 1
        elif dims == 3:
            w = h = d = max(8, min(32, max(grid[0] * block[0], grid[1] * block[1])))
        else:
            w, h, d = grid[0] * block[0], (grid[1] * block[1] if dims == 2 else 1), 1
        n = w * h * d * comps
        if np.dtype(dt).kind == "f":
            data = rng.uniform(0.0, 1.0, n).astype(dt)
        elif modes["norm_read"]:
            data = rng.integers(0, np.iinfo(dt).max + 1, n).astype(dt)
        else:
            data = rng.integers(0, 16, n).astype(dt)
        specs[name] = {"data": data, "w": w, "h": h, "d": d, "dims": dims, "comps": comps, "linear_mem": linear_mem,
                       **modes}
        # the port reads the texels converted to what the fetch returns, and the addressing after CUDA's rules
        # (ksim_tex.h's finish): wrap and mirror need normalized coordinates; a 1-D fetch out of range reads zero
        texels = data.astype(np.float32) / float(np.iinfo(dt).max) if modes["norm_read"] and data.dtype.kind in "iu" \
            else data
        addr = [a if modes["normalized"] or a not in (0, 2) else 1 for a in modes["addr"]]
        if linear_mem:
            addr[0] = 3
        bits = (addr[0] & 3) | (addr[1] & 3) << 2 | (addr[2] & 3) << 4 | (64 if modes["linear"] else 0) \
            | (128 if modes["normalized"] else 0)
        port.update({name: np.ascontiguousarray(texels).reshape(-1), f"{name}__w": w, f"{name}__h": h,
                     f"{name}__d": d, f"{name}__m": bits})
    return specs, port


def _surface_plan(source: str, k, grid, block, rng) -> tuple[dict, dict]:
    """({surface name: run_cuda_source surface spec}, {name: the port's arguments for it}) for the surface object
    parameters and file-scope surface references `k` accesses: arrays of the element type the port reads them as
    (translate/textures.py), made up like buffers, their extents the grid's threads (x, y, then z or layers)."""
    from .translate.textures import SURFACE_TYPES, TextureError, rewrite, surface_references

    objs = [p.name for p in k.params
            if not p.pointer and " ".join(p.type.replace("const", " ").split()) in SURFACE_TYPES]
    refs = [n for n in surface_references(source) if re.search(rf"\b{re.escape(n)}\b", k.body)]
    if not objs and not refs:
        return {}, {}
    try:
        text, _names = rewrite(source, k)
    except TextureError as e:
        err = InferError(f"line {e.line + 1}: {e.message}")
        err.final = True
        raise err from None
    specs, port = {}, {}
    for name in objs + refs:
        m = re.search(rf"(?:const\s+)?([\w ]+?)\s*\*\s*{re.escape(name)}\s*,\s*int\s+{re.escape(name)}__w", text)
        r = " ".join(m.group(1).split()) if m else "float"
        store = _texel_type(r)
        if store is None:
            err = InferError(f"surface '{name}' holds elements of a type a made-up workload does not make ({r})")
            err.final = True
            raise err
        call = re.search(rf"\bsurf([123]D|[12]DLayered)(?:read|write)\b[^;]*?\b{re.escape(name)}\b", k.body)
        kind = call.group(1) if call else "2D"
        tx, ty, tz = (grid[i] * block[i] for i in range(3))
        layers = max(grid[0], grid[1], grid[2], tz)   # (the layer often is a block index)
        w, h, d = {"1D": (tx, 1, 1), "2D": (tx, ty, 1), "3D": (tx, ty, tz), "1DLayered": (tx, 1, max(layers, ty)),
                   "2DLayered": (tx, ty, layers)}[kind]
        dt, comps = store
        n = w * h * d * comps
        data = rng.uniform(0.0, 1.0, n).astype(dt) if np.dtype(dt).kind == "f" else rng.integers(0, 16, n).astype(dt)
        specs[name] = {"surface": True, "data": data, "w": w, "h": h, "d": d, "comps": comps,
                       "layered": kind.endswith("Layered")}
        port.update({name: data.copy(), f"{name}__w": w, f"{name}__h": h, f"{name}__d": d})
    return specs, port


def _macro_ints(source: str, defines: dict[str, int]) -> dict[str, int]:
    """Object-like #defines of `source` whose values are integer expressions (`(12 * 2 + 1)`), over `defines`."""
    env = dict(defines)
    pending = {m.group(1): m.group(2).split("//")[0].strip() for m in re.finditer(
        r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+)$", source, re.M)}
    for _ in range(4):
        for name, expr in list(pending.items()):
            v = _eval_int(expr, env)
            if v and len(v) == 1:
                env[name] = v[0]
                del pending[name]
    return env


def _coupled_scalars(source: str, k, values: dict[str, int], defines: dict[str, int]) -> dict[str, int]:
    """Made-up integer scalars (`values`) lowered so that subscripts of fixed-size arrays stay in range: a
    file-scope `__constant__`/`__device__` array or the kernel's own sized array indexed by an expression of the
    scalars and of loop counters bounded by them (`c_strel[el_i * strel_n + el_j]` with `el_i < strel_m`,
    `el_j < strel_n`, the table 25 x 25): the scalars in the subscript and its loops are halved together until its
    largest value fits. Returns the lowered values (the others unchanged)."""
    from .launchsites import balanced
    env = _macro_ints(source, defines)
    arrays: dict[str, int] = {}

    def count(*bounds) -> int:   # elements of an array declared with these bounds (0: not a constant)
        n = 1
        for x in bounds:
            if x is not None:
                v = _eval_int(x, env)
                n = n * v[0] if v and len(v) == 1 else 0
        return n
    for m in re.finditer(r"(?:__constant__|__device__|__shared__)\s+(?:const\s+)?[A-Za-z_][\w\s:<>]*?\b"
                         r"([A-Za-z_]\w*)\s*\[([^\[\]]+)\]\s*(?:\[([^\[\]]+)\]\s*)?[;=]", source):
        if count(m.group(2), m.group(3)) > 0:
            arrays[m.group(1)] = count(m.group(2), m.group(3))
    # the kernel's own local arrays (`int v[4];`, `float acc[TILE][TILE];`)
    for m in re.finditer(r"(?:^|[;{}])\s*(?:const\s+|unsigned\s+|signed\s+|__shared__\s+)*([A-Za-z_]\w*)\s+"
                         r"([A-Za-z_]\w*)\s*\[([^\[\]]+)\]\s*(?:\[([^\[\]]+)\]\s*)?[;=]", k.body):
        if m.group(1) not in ("return", "else", "case", "goto", "delete", "throw") and m.group(2) not in arrays \
                and count(m.group(3), m.group(4)) > 0:
            arrays[m.group(2)] = count(m.group(3), m.group(4))
    if not arrays:
        return dict(values)
    body = k.body
    loops: dict[str, tuple[str, bool]] = {}
    for m in re.finditer(r"for\s*\(\s*(?:(?:unsigned\s+)?int\s+)?([A-Za-z_]\w*)\s*=\s*0\s*;\s*\1\s*(<=?)\s*"
                         r"([^;]+);", body):
        loops[m.group(1)] = (m.group(3).strip(), m.group(2) == "<=")
    out = dict(values)
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\[", body):
        if m.group(1) not in arrays:
            continue
        end = balanced(body, m.end() - 1, "[", "]")
        if end < 0:
            continue
        idx = body[m.end():end - 1]
        words = set(re.findall(r"[A-Za-z_]\w*", idx))
        loop_vars = words & set(loops)
        bounds = {v: loops[v] for v in loop_vars}
        free = words - loop_vars - set(env)
        names = (free | {w for b, _ in bounds.values() for w in re.findall(r"[A-Za-z_]\w*", b)}) - set(env)
        if not names or not names <= set(out):
            continue          # an index of the thread's position or of values not made up here
        for _ in range(24):
            local = {**env, **out}
            ok = True
            for v, (b, incl) in bounds.items():
                bv = _eval_int(b, local)
                if not bv or len(bv) != 1:
                    ok = False
                    break
                local[v] = bv[0] if incl else bv[0] - 1
            if not ok:
                break
            try:
                top = eval(idx.replace("/", "//"), {"__builtins__": {}}, local)
            except Exception:
                break
            if not isinstance(top, int) or top < arrays[m.group(1)]:
                break
            if all(out[n] <= 1 for n in names):
                break
            for n in names:
                out[n] = max(1, out[n] // 2)
    return out


def _infer_one(source: str, k, grid, block, smem, template_args, scalars, *, filename, max_tries, timeout_s,
               grow_smem: bool = False, expected: dict | None = None, made_notes: list | None = None,
               zero_ints: bool = False,
               include_dirs, race_check: bool, preamble=(), defines=None, sources=None) -> tuple[LaunchRecord, dict]:
    threads = grid[0] * block[0] * grid[1] * block[1] * grid[2] * block[2]
    side = max(grid[0] * block[0], grid[1] * block[1])
    rng = np.random.default_rng(0)
    texts = [source] + [t for _, t in sources or []]
    tex_specs, tex_port = _texture_plan(source, k, texts, grid, block, threads, rng)
    surf_specs, surf_port = _surface_plan(source, k, grid, block, rng)   # (run and returned like textures)
    tex_specs.update(surf_specs)
    tex_port.update(surf_port)
    sizes: dict[str, int] = {}
    args: dict[str, object] = {}
    records: list[ArgRecord] = []
    preamble = list(preamble)
    subst = {tp.name: str(a) for tp, a in zip(k.template_params, template_args or [])
             if tp.kind == "typename" and a is not None}
    structs: dict[str, object] = {}       # parameter -> StructLayout (a struct buffer, or a struct by value)
    for p in k.params:
        if p.name in tex_specs:
            continue
        info = pointee(p.type, preamble, subst)
        if p.pointer:
            if info is None:
                structs[p.name] = _struct_of(p, preamble, subst, defines, sources, k)
                sizes[p.name] = max(256, threads * 2)
            else:   # a little over whole pages: a read just before its start (`g_s[i - 1]` at i = 0, where the
                # program passes a pointer into its allocation) lands in the page's slack, as on the real launch
                sizes[p.name] = (max(4096, threads * 4) + 16) * info[1]
        elif info is None or info[1] > 1:   # a struct, or a vector type (int2, float4) by value: its bytes
            structs[p.name] = _struct_of(p, preamble, subst, defines, sources, k)

    def make(p):
        n = sizes[p.name]
        if p.name in structs:
            return _fill_struct(structs[p.name].dtype, n, rng, int_value=0 if zero_ints else None)
        dt, lanes = pointee(p.type, preamble, subst)
        if dt.startswith("float"):
            return rng.uniform(0.0, 1.0, n).astype(dt)
        if dt == "bool":
            return rng.integers(0, 2, n).astype(np.bool_)
        if zero_ints:   # the original raced on random integer contents: zeros (see the race check below)
            return np.zeros(n, dtype=dt)
        if nonzero_ints:   # a made-up zero was a divisor (`num[i] / den[i]`): integers from 1
            return rng.integers(1, 16, n).astype(dt)
        if as_offsets:   # offsets, limits, row pointers: from 0, never decreasing (a[i + 1] - a[i] is a length)
            return np.concatenate([[0], np.cumsum(rng.integers(0, 2, max(n - 1, 0)))]).astype(dt)
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
            v = int(coupled.get(p.name, v))
            info = np.iinfo(np.dtype(dt)) if np.dtype(dt).kind in "iu" else None
            if info is None or info.min <= v <= info.max:
                return v
        if p.name in shrunk:
            return min(coupled.get(p.name, side), SHRUNK_COUNT)
        return coupled.get(p.name, side)

    # made-up integer scalars that size loops over fixed-size arrays stay small enough to index them in range
    # (a launch's scalars too: where a fixed-size table bounds them, the values read at the site were stand-ins)
    made_ints = {p.name: (int(scalars[p.name]) if isinstance(scalars.get(p.name), (int, float)) else side)
                 for p in k.params
                 if not p.pointer and p.name not in structs and p.name not in tex_specs
                 and (pointee(p.type, preamble, subst) or ("float32",))[0][:5] not in ("float", "bool")}
    try:
        coupled = {n: v for n, v in _coupled_scalars(source, k, made_ints, defines or {}).items()
                   if v != made_ints[n]}
    except Exception:   # a reading this module does not follow: the made-up values stand
        coupled = {}
    # `__constant__` tables the program fills (cudaMemcpyToSymbol) and the kernel reads: made-up contents, the
    # same for the original and the port (launch() takes them as symbols); without them the ports read zeros
    sym_args: dict[str, np.ndarray] = {}
    sym_zero = False
    try:
        from .translate.symbols import file_symbols
        used_text = "\n".join(t for t, _ in _kernel_tree(k, source)[0])
        for sy in file_symbols(source, list(preamble)):
            if sy.space != "constant" or sy.init is not None or not re.search(rf"\b{re.escape(sy.name)}\b", used_text):
                continue
            dt = np.dtype(sy.dtype)
            n = max(1, sy.count)     # Symbol.count: scalars of sy.dtype (a float3 element is 3 of them)
            sym_args[sy.name] = (rng.uniform(0.0, 1.0, n).astype(dt) if dt.kind == "f"
                                 else rng.integers(0, 2, n).astype(dt))
    except Exception:   # a declaration this module does not follow: the tables start as zeros
        sym_args = {}
    last = ""
    as_offsets = False           # integer buffers made as non-decreasing offsets from 0 (after a stray fault)
    nonzero_ints = False         # integer buffers made without zeros (after an integer division by zero)
    int_buffers = [p.name for p in k.params if p.pointer and p.name not in structs and p.name not in tex_specs
                   and np.dtype(pointee(p.type, preamble, subst)[0]).kind in "iu"]
    grown: dict[str, str] = {}   # buffer -> how far past its end the last fault was (bytes)
    shrunk: set[str] = set()     # made-up integer scalars taken small (the kernel ran too long, or grew too big)
    start_sizes = dict(sizes)

    def _small_counts() -> set[str]:
        made = [p for p in k.params if not p.pointer and p.name not in structs and p.name not in tex_specs
                and not isinstance(scalars.get(p.name), (int, float))
                and np.dtype(pointee(p.type, preamble, subst)[0]).kind in "iu"]
        loops = [p.name for p in made if _loop_count(p.name).search(k.body)]
        return set(loops or [p.name for p in made])
    for _ in range(max_tries):
        args = {}
        for p in k.params:
            if p.name not in tex_specs:
                args[p.name] = make(p) if p.pointer else scalar(p)
        args.update(sym_args)
        try:
            outs = run_cuda_source(source, k.name, grid, block, dict(args), smem, template_args=template_args,
                                   filename=filename, timeout_s=timeout_s, check_races=False, strict_barriers=False,
                                   include_dirs=list(include_dirs) or None, textures=tex_specs or None)
            break
        except SimError as e:
            last = str(e)
            m = _PAST_END.search(e.message)
            if e.kind == "fault" and not m and grow_smem and smem * 4 <= MAX_DYN_SMEM:
                smem *= 4      # the made-up dynamic shared memory was too small (its end is not a named array)
                continue
            if e.kind == "fault" and not m and not smem and _EXTERN_SHARED.search(source):
                # dynamic shared memory a helper declares (`SharedMemory<T>()`), and no launch says how much
                smem, grow_smem = threads * DYN_SMEM_PER_THREAD, True
                continue
            if e.kind == "timeout" and not shrunk:
                # the made-up sizes (the grid's thread count) made a loop run long: the counts its loops run to
                # (else every made-up integer) are taken small, and the kernel runs once more
                shrunk = _small_counts()
                if shrunk:
                    continue
            if e.kind == "fault" and not m and sym_args and not sym_zero:
                # made-up contents of a __constant__ table (indices?) sent the kernel astray: zeros, as a
                # program's table before its copy
                sym_zero = True
                sym_args = {n: np.zeros_like(v) for n, v in sym_args.items()}
                continue
            if e.kind == "fault" and "arithmetic fault" in e.message and int_buffers and not nonzero_ints \
                    and not zero_ints:
                nonzero_ints = True
                if made_notes is not None:
                    made_notes.append(f"the integer buffers {', '.join(int_buffers)} were made up without zeros "
                                      f"(one was a divisor)")
                continue
            if e.kind == "fault" and not m and int_buffers and not as_offsets:
                # made-up integer contents sent the kernel outside every buffer: where they are offsets or limits
                # (`len = limits[i + 1] - limits[i]`), random ones make negative lengths; taken as offsets from 0
                as_offsets = True
                if made_notes is not None:
                    made_notes.append(f"the integer buffers {', '.join(int_buffers)} were made up as non-decreasing "
                                      f"offsets from 0 (random contents sent the kernel outside every buffer)")
                continue
            if e.kind != "fault" or not m or m.group(1) not in sizes:
                err = InferError(f"the kernel does not run on a made-up workload ({last[:300]})")
                err.final = e.kind in ("timeout",)
                raise err from None
            # the distance past the end of this buffer (the host runtime's entry also names the allocation the
            # address follows, in bytes of its own: that sentence is not this one)
            past = re.search(rf"the address is (\d+) bytes past the end of '{re.escape(m.group(1))}'", e.message)
            if past and int(past.group(1)) >= 64 and grown.get(m.group(1)) == past.group(1):
                # the fault stayed as far past the end after the buffer grew (a sequential overrun faults at the
                # end itself each time): an address before the next buffer's start, a negative index that no size
                # fixes
                err = InferError(f"the kernel reads or writes outside every buffer on a made-up workload, not past "
                                 f"the end of one ({last[:300]}): give the program that launches the kernel")
                raise err from None
            if past:
                grown[m.group(1)] = past.group(1)
            sizes[m.group(1)] *= 4
            elem = structs[m.group(1)].dtype.itemsize if m.group(1) in structs else 8
            if sizes[m.group(1)] * elem > MAX_BUFFER_BYTES and not shrunk:
                # the made-up sizes multiply into more than a buffer may hold (`dout[b * T * OC + t * OC + o]`
                # with B, T, OC each the grid's thread count): the counts its loops run to (else every made-up
                # integer) are taken small, and the buffers start over
                shrunk = _small_counts()
                if shrunk:
                    sizes.update(start_sizes)
                    grown.clear()
                    if made_notes is not None:
                        made_notes.append(f"the made-up sizes {', '.join(sorted(shrunk))} were taken small "
                                          f"({SHRUNK_COUNT}): at the grid's thread count each, the buffers they "
                                          f"index grew past {MAX_BUFFER_BYTES >> 20} MB")
                    continue
            if sizes[m.group(1)] * elem > MAX_BUFFER_BYTES:
                raise InferError(f"'{m.group(1)}' keeps growing past {MAX_BUFFER_BYTES >> 20} MB on a made-up "
                                 f"workload: give the program that launches the kernel") from None
    else:
        raise InferError(f"no fault-free workload after {max_tries} tries ({last[:300]})")
    # integer contents made up here: integer buffers, integer fields of struct buffers
    int_made = not zero_ints and not tex_specs and (bool(int_buffers) or any(
        p.pointer and p.name in structs and _has_int_fields(structs[p.name].dtype) for p in k.params))
    if race_check or int_made:
        try:
            run_cuda_source(source, k.name, grid, block, {n: (v.copy() if isinstance(v, np.ndarray) else v)
                                                          for n, v in args.items()}, smem,
                            template_args=template_args, filename=filename, timeout_s=timeout_s,
                            check_races=True, strict_barriers=False, include_dirs=list(include_dirs) or None,
                            textures=tex_specs or None)
        except SimError as e:
            err = InferError(str(e)[:400])
            err.race = e.kind == "race"
            zeros = None
            if err.race and int_made:
                # Random integers break what index data promises (sorted keys, offsets of disjoint ranges, a
                # frontier inside the visited set), so threads meet in one place where the program's data never
                # sends them. Zeros promise nothing either way (every index the first element, every length
                # empty): the kernel runs once more on them, and a race there is the kernel's own.
                notes: list[str] = []
                try:
                    zeros = _infer_one(source, k, grid, block, smem, template_args, scalars, filename=filename,
                                       max_tries=max_tries, timeout_s=timeout_s, grow_smem=grow_smem,
                                       expected=expected, made_notes=notes, zero_ints=True,
                                       include_dirs=include_dirs, race_check=True, preamble=preamble,
                                       defines=defines, sources=sources)
                except InferError:
                    zeros = None
                if zeros is not None and not _changes_something(source, k, grid, block, smem, template_args,
                                                                zeros[1], filename, timeout_s, include_dirs):
                    zeros = None   # a workload on which the kernel changes nothing checks nothing
                if zeros is not None:
                    if made_notes is not None:
                        made_notes.extend(notes)
                        made_notes.append("checked on made-up contents whose integers (buffers, struct fields) are "
                                          "all zero, a weaker check (code that index data leads to may not run): on "
                                          "random ones the original kernel raced (" + _one_line(e) + ")")
                    return zeros
            if race_check:
                raise err from None
            # checked here only for the zeros: what else the original does on this workload, the port check reports
    for p in k.params:
        if p.name in tex_specs:    # a texture object: the port takes its texels (tex_port)
            records.append(ArgRecord(name=p.name, ctype=p.text or p.type, kind="scalar", value=0))
            continue
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
    if tex_specs:
        # the original cannot re-run on the port's arguments (its textures are handles): what it left in memory
        # on this run is what the port must reproduce
        if expected is not None:
            expected.update({n: np.asarray(v) for n, v in outs.items()})
        args = {**args, **tex_port}
    return rec, args


def _has_int_fields(dt: np.dtype) -> bool:
    """Whether a struct layout holds an integer field (at any depth)."""
    if dt.names:
        return any(_has_int_fields(dt.fields[n][0]) for n in dt.names)
    base = dt.base if dt.subdtype else dt
    return _has_int_fields(base) if base.names else base.kind in "iu"


def _changes_something(source, k, grid, block, smem, template_args, args, filename, timeout_s, include_dirs) -> bool:
    """Whether the original kernel, run on `args`, leaves some buffer different from what it was given."""
    try:
        outs = run_cuda_source(source, k.name, grid, block, {n: (v.copy() if isinstance(v, np.ndarray) else v)
                                                             for n, v in args.items()}, smem,
                               template_args=template_args, filename=filename, timeout_s=timeout_s,
                               check_races=False, strict_barriers=False, include_dirs=list(include_dirs) or None)
    except SimError:
        return False
    return any(isinstance(v, np.ndarray) and isinstance(outs.get(n), np.ndarray)
               and np.ascontiguousarray(outs[n]).tobytes() != np.ascontiguousarray(v).tobytes()
               for n, v in args.items())


def _one_line(e) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 240 else text[:237] + "..."
