"""check_port: runs a port module's `launch()` on one launch of the kernel, in the CPU simulator, for the Metal
port and the CUDA-backend port in turn, and compares what each leaves in memory with what the original CUDA
kernel leaves (re-run in the simulator on the same inputs, or a capture's recorded `after` contents).

    res = check_port(module_text, cuda_text, "saxpy",
                     {"args": {"n": 128, "a": 0.5, "x": x, "y": y}, "grid": (2, 1, 1), "block": (64, 1, 1),
                      "shared_mem": 0, "template_args": []}, filename="saxpy.cu")
    res.passed, res.dialects["metal"], res.message

`launch` may be a dict like that, or any object with those attributes (args by parameter name, or a list in
parameter order). Buffers are numpy arrays of the pointee's scalar dtype (bfloat16 as uint16 bits), scalars
Python numbers. Every message is one line a user can act on: the buffer, the index, got and expected.
"""
from __future__ import annotations

import inspect
import re
from typing import Literal

import numpy as np
from pydantic import BaseModel

Status = Literal["passed", "mismatch", "sim_error", "not_runnable"]
FLOAT_MAX = float(np.finfo(np.float32).max)
TOLERANCE = {"float64": (1e-6, 1e-6), "float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}


class PortCheck(BaseModel):
    kernel: str
    passed: bool = False
    dialects: dict[str, Status] = {}       # "metal" / "cuda" -> status
    messages: dict[str, str] = {}          # "metal" / "cuda" -> one line (empty when passed)
    original_error: str | None = None      # the original could not run: nothing to compare with
    message: str = ""                      # one line: the first failure, or what passed
    notes: list[str] = []                  # elements not compared by position (clock readings, atomic order)


def _get(launch, key, default=None):
    if isinstance(launch, dict):
        return launch.get(key, default)
    return getattr(launch, key, default)


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _error_text(e: Exception) -> str:
    """A user-facing line for an exception from the simulator or the port module (never a traceback)."""
    from ..sim.errors import SimError

    if isinstance(e, SimError):
        where = f" (line {e.line})" if getattr(e, "line", None) else ""
        return _one_line(f"{getattr(e, 'kind', 'error')}: {e}{where}")
    return _one_line(f"{type(e).__name__}: {e}")


def compare(name: str, got: np.ndarray, expected: np.ndarray, dtype: str | None = None) -> str | None:
    """None when `got` matches `expected` (ints exactly, floats within tolerance, NaN/inf where expected has
    them), else one line naming the buffer, the first bad index, got and expected."""
    g = np.asarray(got).reshape(-1)
    e = np.asarray(expected).reshape(-1)
    if e.dtype.names and g.dtype != e.dtype and g.nbytes == e.nbytes:   # the same structs, as bytes
        g = np.ascontiguousarray(g).view(np.uint8).view(e.dtype)
    if g.shape != e.shape:
        return f"buffer '{name}': {g.size} elements came back, expected {e.size}"
    if e.dtype.names:   # a buffer of structs: field by field, each with its own type's tolerance
        for f in e.dtype.names:   # (float's for doubles the ports computed as float: dtype "float32")
            problem = compare(f"{name}' field '{f}", g[f], e[f], "float32" if dtype == "float32" else None)
            if problem:
                return problem
        return None
    if dtype == "bfloat16" or (e.dtype == np.uint16 and dtype == "bfloat16"):
        from ..sim.runtime import bf16_bits_to_f32
        g, e = bf16_bits_to_f32(g.astype(np.uint16)), bf16_bits_to_f32(e.astype(np.uint16))
        kind = "bfloat16"
    else:
        kind = e.dtype.name
    if e.dtype.kind == "f":
        from ..evaluate.compare import excess   # the one comparison: NaN and inf exactly, by position and sign

        gf, ef = g.astype(np.float64), e.astype(np.float64)
        rtol, atol = TOLERANCE.get("float32" if dtype == "float32" and kind == "float64" else kind, (1e-4, 1e-4))
        finite = np.isfinite(ef)
        # absolute slack scales with the buffer's magnitude: a port may round a long sum differently
        scale = max(1.0, float(np.abs(ef[finite]).max())) if finite.any() else 1.0
        bad = excess(gf, ef, atol * scale, rtol) > 0
    else:
        bad = g != e
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    why = ""
    if dtype == "float32" and e.dtype == np.float64 and np.isfinite(e[i]) and abs(float(e[i])) > FLOAT_MAX:
        why = (": the original's double exceeds float's range (3.4e38), and both ports compute doubles as float "
               "(Metal has no double); a port can only match where the values fit in float")
    return (f"buffer '{name}' [{i}]: got {g[i].item()!r}, expected {e[i].item()!r} "
            f"({int(bad.sum())} of {bad.size} elements differ){why}")


def run_original(original_source: str, kernel: str, args: dict, grid, block, shared_mem: int,
                 template_args, filename: str, include_dirs=(), timeout_s: float = 20.0,
                 heads: dict | None = None) -> dict[str, np.ndarray]:
    from ..sim import run_cuda_source

    kw = dict(template_args=list(template_args) or None, filename=filename, timeout_s=timeout_s,
              strict_barriers=False)
    if heads:   # pointers inside their allocations: the elements before them (negative indices)
        kw["heads"] = dict(heads)
    if include_dirs and "include_dirs" in inspect.signature(run_cuda_source).parameters:  # noqa: SIM102
        kw["include_dirs"] = list(include_dirs)
    from ..sim.errors import SimError

    def run(**more):
        return run_cuda_source(original_source, kernel, tuple(grid), tuple(block),
                               {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in args.items()},
                               int(shared_mem or 0), **kw, **more)
    try:
        return run()
    except SimError as e:
        if e.kind != "assert":
            raise
        failed = e
    # the ports drop assert() (translate notes it): what they must reproduce is the original without its asserts
    res = run(asserts=False)
    text = str(failed.message).split(": ", 1)[-1]
    res.asserted = True
    res.notes = [f"the original's {text}: on a GPU this launch ends with cudaErrorAssert; the ports were compared "
                 f"with the original, both without their assert() (the Metal port has none)"]
    return res


def _to_mx(value: np.ndarray, dtype: str | None):
    import mlx.core as mx

    a = np.ascontiguousarray(value).reshape(-1)
    if a.dtype.names:   # structs: launch() takes their bytes (the kernel casts them to its struct type)
        return mx.array(a.view(np.uint8))
    if dtype == "bfloat16" and a.dtype == np.uint16:
        return mx.array(a).view(mx.bfloat16)
    return mx.array(a)


def _from_mx(value, dtype: str | None, like: np.ndarray) -> np.ndarray:
    import mlx.core as mx

    if value.dtype == mx.bfloat16:
        return np.array(value.view(mx.uint16)).reshape(like.shape) if like.dtype == np.uint16 \
            else np.array(value.astype(mx.float32)).reshape(like.shape)
    if like.dtype.names:   # structs went as bytes: back to the struct layout
        return np.ascontiguousarray(np.array(value)).view(np.uint8).view(like.dtype).reshape(like.shape)
    return np.array(value).reshape(like.shape)


def run_port(module_text: str, dialect: str, args: dict, grid, block, shared_mem: int, template_args,
             timeout_s: float = 20.0, asserts: bool = True, heads: dict | None = None) -> dict[str, np.ndarray]:
    """The port module's launch() in the simulator with `dialect`'s port; {written buffer: contents}. `heads`
    {pointer parameter: the elements of its allocation before the pointer}: the parameter is passed as the MLX user
    passes a pointer inside an allocation, the whole allocation sliced (`x[R:]`), so that the kernel reads the
    allocation before it at negative indices as on a GPU."""
    from ..sim import shim

    shim.install_mlx_shim()
    saved_allocations = list(shim.allocations)
    saved = dict(shim._options)
    shim._options.update(timeout_s=timeout_s, check_races=True, strict_barriers=False, asserts=asserts)
    shim.order_log = []
    try:
        ns: dict = {"__name__": "ksearch_port_check"}
        exec(compile(module_text + f"\n\n_backend = lambda: {dialect!r}\n", "port_module", "exec"), ns)
        params = ns["PARAMS"]
        call = []
        for p in params:
            v = args.get(p["name"])   # absent or None: a NULL pointer (a defaulted `T* p = NULL` parameter)
            head = (heads or {}).get(p["name"])
            if p["pointer"] and v is not None and head is not None and np.asarray(head).size:
                whole = _to_mx(np.concatenate([np.asarray(head).reshape(-1).astype(np.asarray(v).dtype, copy=False),
                                               np.asarray(v).reshape(-1)]), p.get("dtype"))
                shim.register_allocation(whole)
                call.append(whole[np.asarray(head).size:])   # the slice: a pointer inside the allocation
                continue
            call.append(_to_mx(v, p.get("dtype")) if p["pointer"] and v is not None else v)
        syms = {s["name"]: _to_mx(args[s["name"]], s.get("dtype")) for s in ns.get("SYMBOLS", [])
                if args.get(s["name"]) is not None}   # what the program copied into its __constant__/__device__
        out = ns["launch"](*call, grid=tuple(grid), block=tuple(block), shared_mem=int(shared_mem or 0),
                           template=list(template_args or []) or None, **({"symbols": syms} if syms else {}))
        got = _Contents((n, _from_mx(a, None, np.asarray(args[n]))) for n, a in out.items() if args.get(n) is not None)
        got.order_dependence = _by_parameter(shim.order_log, params, args)
        return got
    finally:
        shim.allocations[:] = saved_allocations
        shim.order_log = None
        shim._options.clear()
        shim._options.update(saved)


class _Contents(dict):
    """{written buffer: contents}; `order_dependence`: {parameter: runtime.OrderDependence} of the elements
    whose value the thread order or the clock decides."""

    order_dependence: dict = {}


def _by_parameter(log, params, args) -> dict:
    """The port kernels' order-dependent elements ({kernel buffer: OrderDependence}, in-out inputs named
    `<param>_inout`) by launch parameter, cut to the parameter's own elements."""
    from ..sim.runtime import OrderDependence

    names = {p["name"] for p in params if p["pointer"]}
    out: dict = {}
    for _kernel, order in log or []:
        for buf, od in order.items():
            n = buf[:-len("_inout")] if buf.endswith("_inout") else buf
            if n not in names or not isinstance(args.get(n), np.ndarray):
                continue
            size = np.asarray(args[n]).size
            clock, atomic = od.clock[:size], od.atomic[:size]
            if clock.size < size:   # another view of the buffer (bytes of structs): the whole buffer
                clock = np.full(size, bool(od.clock.any()))
                atomic = np.full(size, bool(od.atomic.any()))
            prev = out.get(n)
            if prev is not None:
                clock, atomic = clock | prev.clock, atomic | prev.atomic
            out[n] = OrderDependence(clock, atomic, od.multiset or (prev is not None and prev.multiset))
    return out


def _order_problem(name: str, port, orig) -> str | None:
    """A port's order-dependence the original does not have: a race of the port (None when it has none)."""
    extra = port.mask() & ~(orig.mask() if orig is not None else np.zeros_like(port.mask()))
    if extra.any():
        i = int(np.argmax(extra))
        what = "a clock reading" if port.clock[i] else "an atomicExch/atomicCAS whose thread order decides it"
        return (f"race: buffer '{name}' [{i}] of the port depends on the thread order ({what}) where the "
                f"original's result does not; make the port's result independent of the order there")
    if port.multiset and not (orig is not None and orig.multiset):
        return (f"race: buffer '{name}' of the port holds its values in an order that depends on the threads' "
                f"atomics, where the original's order does not")
    return None


def _compare_allowing(name: str, got: np.ndarray, want: np.ndarray, dtype, od) -> str | None:
    """compare(), leaving out the elements whose value the original's thread order or clock decides, and
    comparing a buffer whose values the atomics' order places as a multiset."""
    if od is None:
        return compare(name, got, want, dtype)
    g = np.array(np.asarray(got).reshape(-1), copy=True)
    e = np.asarray(want).reshape(-1)
    if od.multiset and not e.dtype.names:
        problem = compare(name, np.sort(g), np.sort(e), dtype)
        return problem and problem.replace(f"buffer '{name}' ", f"buffer '{name}' sorted (compared as a multiset: "
                                           f"the atomics' order places its values) ", 1)
    m = od.mask()[:g.size]
    if m.size == g.size and g.shape == e.shape:
        g[m] = e[m]
    return compare(name, g, e, dtype)


def _original_failed(res, dialects, e, how: str):
    """`res` for a launch on which the original itself fails (`how`: what it does): neither port can be judged."""
    res.original_error = _error_text(e)
    msg = f"the original kernel {how} on this launch: {res.original_error}"
    for d in dialects:
        res.dialects[d], res.messages[d] = "not_runnable", msg
    res.message = msg
    return res


def check_port(module_text: str, original_source: str, kernel: str, launch, filename: str = "kernel.cu",
               include_dirs=(), expected: dict | None = None, dialects=("metal", "cuda"),
               timeout_s: float = 20.0) -> PortCheck:
    """Checks the port's launch() against the original on one launch; see the module docstring."""
    res = PortCheck(kernel=kernel)
    raw = _get(launch, "args", {})
    grid = tuple(_get(launch, "grid", (1, 1, 1)))
    block = tuple(_get(launch, "block", (1, 1, 1)))
    smem = int(_get(launch, "shared_mem", 0) or 0)
    targs = list(_get(launch, "template_args", []) or [])
    # pointers inside their allocations ({parameter: the allocation's elements before the pointer})
    heads = {n: h for n, h in (_get(launch, "heads", None) or {}).items() if h is not None and np.asarray(h).size}
    ns: dict = {}
    try:
        exec(compile(module_text, "port_module", "exec"), ns)
        params = ns["PARAMS"]
    except Exception as e:
        msg = f"the port module does not load: {_error_text(e)}"
        for d in dialects:
            res.dialects[d], res.messages[d] = "not_runnable", msg
        res.message = msg
        return res
    if isinstance(raw, (list, tuple)):
        raw = {p["name"]: v for p, v in zip(params, raw)}
    args = dict(raw)
    struct = [p["name"] for p in params if isinstance(args.get(p["name"]), (bytes, bytearray))
              and not p.get("struct") and not p.get("tag") and not p.get("template_type")]
    # launch() takes a struct without pointers as its bytes, and a template type's struct instantiation too
    # (and ignores an empty tag's byte)
    if struct:
        msg = f"'{struct[0]}' is a struct passed by value: launch() takes scalars and pointers only"
        for d in dialects:
            res.dialects[d], res.messages[d] = "not_runnable", msg
        res.message = msg
        return res
    pointers = [p for p in params if p["pointer"]]
    want: dict[str, np.ndarray] = {}
    orig_order: dict | None = None   # {parameter: OrderDependence} of the original (None: not run yet)
    if expected and heads:
        # the capture's run cannot tell a read before the allocation's start (its allocations are guarded at their
        # ends only): the original runs here once, where that faults and names its line
        try:
            run_original(original_source, kernel, args, grid, block, smem, targs, filename, include_dirs, timeout_s,
                         heads=heads)
        except Exception as e:
            if getattr(e, "kind", None) == "fault":
                return _original_failed(res, dialects, e, "faults in the simulator")
    if expected:
        want = {n: np.asarray(v) for n, v in expected.items()}
        for p in pointers:   # buffers the capture saw unchanged must stay unchanged
            if p["name"] not in want and isinstance(args.get(p["name"]), np.ndarray):
                want[p["name"]] = np.asarray(args[p["name"]])
    else:
        try:
            want = run_original(original_source, kernel, args, grid, block, smem, targs, filename, include_dirs,
                                timeout_s, heads=heads)
            orig_order = dict(getattr(want, "order_dependence", {}) or {})
        except Exception as e:
            return _original_failed(res, dialects, e, "does not run in the simulator")
    written = {p["name"] for p in pointers if p["written"]}
    orig_race: str | None = None
    for d in dialects:
        try:
            got = run_port(module_text, d, args, grid, block, smem, targs, timeout_s,
                           asserts=not getattr(want, "asserted", False), heads=heads)
        except Exception as e:
            res.dialects[d], res.messages[d] = "sim_error", _error_text(e)
            if expected and getattr(e, "kind", None) == "race":   # captured contents: does the original race too?
                if orig_race is None:
                    orig_race = _original_race(original_source, kernel, args, grid, block, smem, targs, filename,
                                               include_dirs, timeout_s, heads)
                if orig_race:
                    res.dialects[d] = "not_runnable"
                    res.messages[d] = (f"the original kernel races on this launch too ({orig_race}); the port "
                                       f"races the same way: there is no one result to compare with")
            continue
        port_order = dict(getattr(got, "order_dependence", {}) or {})
        problem = _first_problem(pointers, got, want, args, written, orig_order or {})
        if (problem or port_order) and orig_order is None:
            # captured contents: what the original's thread order decides is known from a run of the original
            try:
                orig_order = dict(getattr(run_original(original_source, kernel, args, grid, block, smem, targs,
                                                       filename, include_dirs, timeout_s, heads=heads),
                                          "order_dependence", {}) or {})
            except Exception:
                orig_order = {}
            if orig_order:
                problem = _first_problem(pointers, got, want, args, written, orig_order)
        race = next((r for r in (_order_problem(n, od, (orig_order or {}).get(n)) for n, od in port_order.items())
                     if r), None)
        if race:
            res.dialects[d], res.messages[d] = "sim_error", race
            continue
        res.dialects[d] = "mismatch" if problem else "passed"
        res.messages[d] = problem or ""
    res.notes += [n for n in getattr(want, "notes", []) if n not in res.notes]
    for n, od in (orig_order or {}).items():
        line = od.describe(n) + " (not compared by position)"
        if line not in res.notes:
            res.notes.append(line)
    res.passed = bool(res.dialects) and all(s == "passed" for s in res.dialects.values())
    name = {"metal": "Metal port", "cuda": "CUDA-backend port"}
    if res.passed:
        res.message = f"{' and '.join(name.get(d, d) for d in res.dialects)} match the original"
    else:
        d = next(d for d, s in res.dialects.items() if s != "passed")
        res.message = f"{name.get(d, d)}: {res.dialects[d]}: {res.messages[d]}"
        if d == "metal" and res.dialects[d] == "mismatch" and res.dialects.get("cuda") == "passed":
            promoted = _double_promotion(original_source)
            if promoted:   # a Metal-only difference where the original computes in double
                res.message += (f"; the CUDA-backend port, which keeps the original's double arithmetic, matches: "
                                f"the original computes in double where its float values meet double constants "
                                f"({promoted}), and Metal has no double, so its port computes that in float")
    return res


_NUM = r"(?<![\w.])(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.fF])"
# a double constant as one operand of arithmetic whose other operand is a variable or a parenthesis (`0.32*(v+4)`,
# `x * 0.5`), not another constant (`1.0 / 7.0` is computed by the compiler)
_DOUBLE_CONSTANT = re.compile(rf"(?:[A-Za-z_]\w*|\))\s*[-+*/]\s*{_NUM}|{_NUM}\s*[-+*/]\s*(?=[A-Za-z_(])")


def _double_promotion(source: str) -> str:
    """The first expression of `source` where a double constant meets arithmetic (`0.32*(v+47.13)`), as the
    original's compiler promotes it to double; "" where there is none."""
    from ..sim.preprocess import mask_comments
    code = mask_comments(source)
    for m in _DOUBLE_CONSTANT.finditer(code):
        start = code.rfind("\n", 0, m.start()) + 1
        if not code[start:m.start()].lstrip().startswith("#"):
            line = code.count("\n", 0, m.start()) + 1
            end = code.find("\n", m.end())
            text = " ".join(source[start:end if end >= 0 else len(source)].split())
            return f"line {line}: `{text[:60]}`"
    return ""


def _original_race(original_source, kernel, args, grid, block, smem, targs, filename, include_dirs,
                   timeout_s, heads=None) -> str:
    """The original's race on this launch (one line), or "" when it runs deterministically or not at all."""
    try:
        run_original(original_source, kernel, args, grid, block, smem, targs, filename, include_dirs, timeout_s,
                     heads=heads)
    except Exception as e:
        if getattr(e, "kind", None) == "race":
            return _one_line(str(e), 300)
    return ""


def _as_c_structs(p: dict, a):
    """The bytes of a buffer of structs holding doubles (what a capture records, and what launch() hands back) as
    the C structs' fields, so that each double is compared within float's tolerance rather than byte by byte
    (the ports compute doubles as float: a value that went through them differs in its low bytes)."""
    a = np.asarray(a)
    c_bytes = p.get("c_bytes")
    if a.dtype.names or not c_bytes or a.nbytes % c_bytes:
        return a
    fields = {"names": [f"f{src}" for src, *_ in p["repack"]], "formats": [sdt for _, sdt, *_ in p["repack"]],
              "offsets": [src for src, *_ in p["repack"]], "itemsize": c_bytes}
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).view(np.dtype(fields))


def _first_problem(pointers, got, want, args, written, orig_order) -> str | None:
    """The first buffer where the port's contents differ from the original's (one line), or None."""
    for p in pointers:
        n = p["name"]
        if n not in want:
            continue
        problem = None
        if n in got:
            g, w = (_as_c_structs(p, got[n]), _as_c_structs(p, want[n])) if p.get("struct_array") else (got[n], want[n])
            # doubles are float in both ports (Metal has no double, MLX GPU arrays no float64): float's tolerance
            as_float = p.get("repack") or p.get("dtype") == "float64"
            problem = _compare_allowing(n, g, w, "float32" if as_float else p.get("dtype"), orig_order.get(n))
        elif n not in written and isinstance(args.get(n), np.ndarray):
            before = np.asarray(args[n])
            if compare(n, before, want[n], p.get("dtype")) is not None:
                problem = f"buffer '{n}': the original writes it, the port treats it as read-only"
        if problem:
            return problem
    return None


__all__ = ["PortCheck", "check_port", "compare", "run_original", "run_port"]
