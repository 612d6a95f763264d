"""The captured task: Optimize's task for a user's CUDA kernel, built from the launches its program made.

Inputs are the kernel's own arguments in CUDA's parameter order: each pointer a flat array holding what the
program's buffer held before the launch (captured contents), each scalar a 1-element array. Outputs are every
buffer the kernel writes, with their contents after the launch: a candidate must produce all of them, so the
best is a drop-in replacement. The reference is the user's kernel itself: the original CUDA source run in the
CPU simulator where no GPU is, the verified port (it matched the original) on a GPU. The first candidate (the
root of the plan tree) is the user's kernel ported as is: the port module plus an adapter `kernel(*inputs)`
that calls the module's `launch()` with the captured geometry and scalars of the workload it is given.

Correctness runs on the small captured launches; timing on the largest one (never on a correctness shape,
unless the program launched the kernel once only: the task says so in its description).
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .task import InputSpec, KernelTask, TaskError, Workload, encode_array

MAX_CORRECTNESS = 3
ADAPTER_MARK = "# ---- ksearch: the captured task's entry point"


class CapturedTaskError(TaskError):
    """No task can be built from these launches; the message says which launch or argument and why."""


@dataclass
class KernelLaunch:
    """One launch of the kernel: geometry, and every argument by parameter name (numpy arrays for buffers,
    numbers for scalars); `expected` holds what the program's buffers held after it, when recorded."""
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int = 0
    template_args: list[str] = field(default_factory=list)
    args: dict[str, object] = field(default_factory=dict)
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    origin: str = "captured"          # captured | inferred
    index: int = 0
    changed: set[str] = field(default_factory=set)   # buffers whose contents the launch changed (captured)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.args.values() if isinstance(a, np.ndarray))


def launches_from_capture(capture, kernel: str) -> list[KernelLaunch]:
    """The usable launches of `kernel` in a Capture (sim/capture_models.py), with their contents loaded."""
    out = []
    for rec in capture.launches_of(kernel):
        if rec.too_large or rec.sim_error:
            continue
        args, expected, changed = {}, {}, set()
        ok = True
        for a in rec.args:
            if a.kind == "buffer":
                before = capture.load(a.before)
                if before is None:
                    ok = False
                    break
                args[a.name] = before
                if a.written:
                    changed.add(a.name)
                if a.written and a.after:
                    expected[a.name] = capture.load(a.after)
            elif a.kind == "scalar":
                args[a.name] = a.value
            else:
                ok = False
                break
        if ok and not rec.symbols:
            from .translate.textures import surface_args, texture_args
            texture_args(capture, rec, args)   # a texture the launch read: its texels and sizes, as the port takes them
            surfaces: dict = {}
            if surface_args(capture, rec, args, surfaces):   # a surface: its array before (input) and after
                expected.update(surfaces)
                changed |= {n for n in surfaces if not np.array_equal(surfaces[n], args[n])}
            out.append(KernelLaunch(grid=tuple(rec.grid), block=tuple(rec.block), shared_mem=rec.shared_mem,
                                    template_args=list(rec.template_args), args=args, expected=expected,
                                    origin="captured", index=rec.index, changed=changed))
    return out


def module_constant(module_text: str, name: str):
    """A literal constant of a port module (PARAMS, TEMPLATE_PARAMS, ...), read without running the module."""
    tree = ast.parse(module_text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(name)


def _key(sizes: list[int], ints: list[int]) -> str:
    return ",".join(map(str, sizes)) + "|" + ",".join(map(str, ints))


def _scalar_dtype(p: dict) -> str:
    dt = p.get("dtype") or "int32"
    if dt in ("float64",):
        return "float32"
    return dt if dt in ("float32", "float16", "int32", "uint32", "int64", "uint64", "bool", "int8", "uint8",
                        "int16", "uint16") else "float32"


def _buffer_dtype(p: dict, arr: np.ndarray) -> str:
    """The task's dtype for a buffer: a double buffer is float32, as both ports compute doubles as float (the
    reference, the original, runs in double and its outputs are compared as float)."""
    dt = p.get("dtype") or str(arr.dtype)
    return "float32" if dt == "float64" else dt


@dataclass
class CapturedTask:
    task: KernelTask
    root: str                         # the root candidate: the user's kernel ported as is
    outputs: list[str]
    launches: list[KernelLaunch]
    notes: list[str] = field(default_factory=list)


def build_captured_task(module_text: str, source_text: str, kernel: str, launches: list[KernelLaunch], *,
                        source_file: str | None = None, description: str = "") -> CapturedTask:
    """The KernelTask and root candidate for `kernel`, from its verified port module and launches."""
    if not launches:
        raise CapturedTaskError(f"{kernel}: no launch to build a task from (run the program that launches it, or "
                                f"write a task file)")
    params: list[dict] = module_constant(module_text, "PARAMS")
    written = [p["name"] for p in params if p["pointer"] and p["written"]]
    if launches and all(ln.origin == "captured" for ln in launches):
        # a pointer that is only not const (no store the translator sees) and that no captured launch changed
        # is an input: the task does not ask candidates to return it, nor the analysis to count its writes
        changed = set().union(*(ln.changed for ln in launches))
        written = [n for n in written
                   if n in changed or next((p for p in params if p["name"] == n), {}).get("stored", True)]
    if not written:
        raise CapturedTaskError(f"{kernel} writes no buffer: there is no output to check")
    notes: list[str] = []
    # a pointer the program passed NULL for (the kernel tests it): the task holds it as a buffer of no elements,
    # which launch() and the original in the simulator get as a null pointer (KS_NULL)
    null = [p["name"] for p in params if p["pointer"] and any(ln.args.get(p["name"], 0) is None for ln in launches)]

    def buf(p: dict, v) -> np.ndarray:
        if v is None:
            return np.zeros(0, np.dtype(p.get("dtype") or "float32"))
        return _flat_buffer(kernel, p, np.asarray(v))
    # distinct workloads, smallest first
    seen: dict[str, KernelLaunch] = {}
    for ln in sorted(launches, key=lambda x: (x.nbytes(), x.index)):
        missing = [p["name"] for p in params if p["name"] not in ln.args]
        if missing:
            raise CapturedTaskError(f"{kernel}: launch #{ln.index + 1} lacks arguments {', '.join(missing)}")
        sizes = [int(buf(p, ln.args[p["name"]]).size) for p in params if p["pointer"]]
        ints = [int(ln.args[p["name"]]) for p in params if not p["pointer"] and _is_int(p)]
        k = _key(sizes, ints)
        if k in seen:
            continue
        seen[k] = ln
    distinct = list(seen.items())
    bench = [distinct[-1]]
    correct = distinct[:-1][:MAX_CORRECTNESS] if len(distinct) > 1 else distinct
    doubles = [p["name"] for p in params if p.get("dtype") == "float64" and p["pointer"]]
    if doubles:
        notes.append(f"{', '.join(doubles)} hold doubles: candidates compute them as float (as both ports do; MLX GPU "
                     f"arrays have no float64) and are checked against the original, run in double, within float "
                     f"tolerance")
    if len(distinct) == 1:
        notes.append("the program launched this kernel with one geometry only: timing runs on the shape that "
                     "correctness is checked on")
    inputs: list[InputSpec] = []
    for p in params:
        if p["pointer"]:
            arr0 = buf(p, bench[0][1].args[p["name"]])
            # a buffer of structs travels as its bytes in the port's element type, exactly as captured: varied
            # values would be made-up field contents (indices, flags) the kernel may not accept
            inputs.append(InputSpec(name=p["name"], shape=[f"{p['name']}_len"], dtype=_buffer_dtype(p, arr0),
                                    init="captured", vary=arr0.dtype.names is None and p["name"] not in null))
        else:
            inputs.append(InputSpec(name=p["name"], shape=[1], dtype=_scalar_dtype(p), init="captured", vary=False))

    def workload(name: str, ln: KernelLaunch) -> Workload:
        dims, data = {}, {}
        for p in params:
            v = ln.args[p["name"]]
            if p["pointer"]:
                a = buf(p, v)
                dims[f"{p['name']}_len"] = int(a.size)
                data[p["name"]] = encode_array(a)
            else:
                data[p["name"]] = encode_array(np.asarray([v], dtype=_scalar_dtype(p)))
        return Workload(name=name, dims=dims, data=data)

    workloads = [workload(f"launch{ln.index + 1}", ln) for _, ln in correct]
    bench_wls = [workload(f"launch{ln.index + 1}-bench", ln) for _, ln in bench]
    geometry = {k: {"grid": list(ln.grid), "block": list(ln.block), "shared_mem": int(ln.shared_mem),
                    "template": list(ln.template_args)} for k, ln in distinct}
    name = Path(source_file).name if source_file else "kernel.cu"
    reference = _reference_source(module_text, source_text, kernel, name, params, written, geometry, null)
    root = adapter_module(module_text, params, written, geometry, null)
    origin = launches[0].origin
    task = KernelTask(
        name=kernel, family="custom", entry="kernel", origin="captured",
        description=description or (f"the user's kernel {kernel} from {name}, on the launches its program made "
                                    f"({origin}); outputs: every buffer it writes") + "".join(f"; {n}" for n in notes),
        inputs=inputs, outputs=written, reference=reference, baseline=None,
        baseline_name=f"{kernel} as written (the port of the user's kernel)",
        workloads=workloads, bench_workloads=bench_wls, cpu_bench_workloads=bench_wls,
        initial=root, source_file=str(Path(source_file).resolve()) if source_file else None, kernel_name=kernel)
    return CapturedTask(task=task, root=root, outputs=written, launches=[ln for _, ln in distinct], notes=notes)


def _flat_buffer(kernel: str, p: dict, a: np.ndarray) -> np.ndarray:
    """A buffer argument as the port's launch() takes it: flat, and a buffer of structs (a numpy structured array)
    as its bytes read in the port's element type."""
    a = np.ascontiguousarray(a).reshape(-1)
    if a.dtype == np.float64:   # the ports' float (see _buffer_dtype)
        return a.astype(np.float32)
    if a.dtype.names is None:
        return a
    if p.get("repack"):
        raise CapturedTaskError(f"{kernel}: parameter '{p['name']}' ({p['ctype']}) points to structs holding doubles, "
                                f"which the ports hold as floats: optimizing it needs a task file (the port itself "
                                f"is checked; `ksearch port` writes it)")
    dt = np.dtype(p.get("dtype") or "uint8")
    raw = a.view(np.uint8)
    if raw.size % dt.itemsize:
        dt = np.dtype(np.uint8)
    return raw.view(dt)


def _is_int(p: dict) -> bool:
    return (p.get("dtype") or "").startswith(("int", "uint")) or p.get("dtype") == "bool"


_KEY_FN = '''
def _ks_key(inputs):
    sizes, ints = [], []
    for p, x in zip(PARAMS, inputs):
        if p["pointer"]:
            sizes.append(int(x.size))
        elif (p.get("dtype") or "").startswith(("int", "uint")) or p.get("dtype") == "bool":
            ints.append(int(x.reshape(-1)[0].item()))
    return ",".join(map(str, sizes)) + "|" + ",".join(map(str, ints))


def _ks_args(inputs):
    return [(None if p["name"] in KS_NULL and x.size == 0 else x.reshape(-1)) if p["pointer"]
            else x.reshape(-1)[0].item() for p, x in zip(PARAMS, inputs)]
'''


def adapter_module(module_text: str, params: list[dict], written: list[str], geometry: dict,
                   null: list[str] = ()) -> str:
    """The port module with an entry `kernel(*inputs)` for the captured task: it looks up the captured
    geometry of the workload it is given and returns every written buffer, in the task's output order.
    `KS_BLOCK` (threads per block) and `KS_GRID_DIV` (blocks merged per block by a grid-stride loop) are
    the launch-geometry knobs the source transformations set; as captured they are None and 1."""
    base = module_text.split(ADAPTER_MARK)[0].rstrip("\n")
    return base + f'''


{ADAPTER_MARK} ------------------------------------------------------
KS_OUTPUTS = {written!r}
KS_NULL = {list(null)!r}   # pointers the program passed NULL for: an input of no elements is launched as None
KS_GEOMETRY = {json.dumps(geometry, sort_keys=True)}
KS_BLOCK = None      # threads per block (None: as the program launched it)
KS_GRID_DIV = 1      # the grid shrinks by this factor (each thread covers more items in a grid-stride loop)
KS_GRID_MUL = 1      # the grid grows by this factor (a kernel whose grid-stride loops take any number of blocks)
{_KEY_FN}

def _ks_launch_geometry(g):
    grid, block = list(_dim3(*tuple(g["grid"]))), list(_dim3(*tuple(g["block"])))
    if KS_BLOCK:
        total = grid[0] * block[0]
        block[0] = KS_BLOCK
        grid[0] = max(1, -(-total // KS_BLOCK))
    if KS_GRID_DIV > 1:
        grid[0] = max(1, -(-grid[0] // KS_GRID_DIV))
    if KS_GRID_MUL > 1:
        grid[0] = grid[0] * KS_GRID_MUL
    return tuple(grid), tuple(block)


_ks_port_launch = launch


def launch(*args, grid, block, shared_mem=0, template=None):
    """The port's launch() (CUDA's convention: a drop-in replacement of it), with this candidate's launch
    geometry applied to the grid and block the caller gives (KS_BLOCK, KS_GRID_DIV)."""
    grid, block = _ks_launch_geometry({{"grid": grid, "block": block}})
    return _ks_port_launch(*args, grid=grid, block=block, shared_mem=shared_mem, template=template)


def kernel(*inputs):
    """The user's kernel on the task's inputs (its arguments in parameter order); returns every buffer it writes."""
    key = _ks_key(inputs)
    if key not in KS_GEOMETRY:
        raise ValueError(f"{{NAME}}: no captured launch has these sizes ({{key}})")
    g = KS_GEOMETRY[key]
    grid, block = _ks_launch_geometry(g)
    outs = _ks_port_launch(*_ks_args(inputs), grid=grid, block=block, shared_mem=g["shared_mem"],
                           template=g["template"] or None)
    return tuple(outs[n] for n in KS_OUTPUTS)
'''


def _reference_source(module_text: str, source_text: str, kernel: str, filename: str, params: list[dict],
                      written: list[str], geometry: dict, null: list[str] = ()) -> str:
    """reference(*inputs): the original kernel in the CPU simulator where no GPU is; on a GPU its verified port."""
    return f'''"""Reference for {kernel}: the user's own kernel. No GPU: the original CUDA source in ksearch's CPU
simulator. On a GPU: the port of the user's kernel, which was verified to match the original."""
import mlx.core as mx
import numpy as np

ORIGINAL = {source_text!r}
PORT = {module_text.split(ADAPTER_MARK)[0]!r}
PARAMS = {params!r}
KS_OUTPUTS = {written!r}
KS_NULL = {list(null)!r}
TEXTURES = {[p["name"] for p in params if p.get("texture") and p["pointer"]]!r}
KS_GEOMETRY = {json.dumps(geometry, sort_keys=True)}
{_KEY_FN}
_port = {{}}


def _gpu():
    try:
        return mx.metal.is_available() or mx.cuda.is_available()
    except Exception:
        return False


def reference(*inputs):
    key = _ks_key(inputs)
    g = KS_GEOMETRY[key]
    if _gpu():
        if not _port:
            exec(compile(PORT, "<port of {kernel}>", "exec"), _port)
        outs = _port["launch"](*_ks_args(inputs), grid=tuple(g["grid"]), block=tuple(g["block"]),
                               shared_mem=g["shared_mem"], template=g["template"] or None)
        return tuple(outs[n] for n in KS_OUTPUTS)
    if TEXTURES:   # the original reads textures, which only its program sets up: the reference is its port
        # (checked against what the original wrote on these launches), run in ksearch's simulator (no GPU here)
        from ksearch_engine.sim import install_mlx_shim
        install_mlx_shim(check_races=False, strict_barriers=False)
        if not _port:
            exec(compile(PORT, "<port of {kernel}>", "exec"), _port)
        outs = _port["launch"](*_ks_args(inputs), grid=tuple(g["grid"]), block=tuple(g["block"]),
                               shared_mem=g["shared_mem"], template=g["template"] or None)
        return tuple(outs[n] for n in KS_OUTPUTS)
    from ksearch_engine.sim import run_cuda_source
    args = {{}}
    for p, x in zip(PARAMS, inputs):
        a = np.array(x).reshape(-1)
        if p["pointer"] and p["name"] in KS_NULL and a.size == 0:
            args[p["name"]] = None       # the program passed NULL: the original sees a null pointer
            continue
        if p["pointer"] and p.get("dtype") == "float64":
            a = a.astype(np.float64)     # the original computes in double; its outputs are compared as float
        args[p["name"]] = a.copy() if p["pointer"] else a[0].item()
    after = run_cuda_source(ORIGINAL, {kernel!r}, tuple(g["grid"]), tuple(g["block"]), args, g["shared_mem"],
                            template_args=g["template"] or None, filename={filename!r}, check_races=False,
                            strict_barriers=False)
    return tuple(mx.array(_ports_dtype(np.asarray(after[n]).reshape(-1))) for n in KS_OUTPUTS)


def _ports_dtype(a):
    return a.astype(np.float32) if a.dtype == np.float64 else a
'''


def inferred_launch(source_text: str, kernel_info, path: str | Path, defines: dict[str, int] | None = None) -> KernelLaunch:
    """A launch found by running the kernel (no program launched it): portinfer's workload."""
    from .portinfer import infer_launch

    targs = None
    if kernel_info.template_params:
        site = next((s for s in kernel_info.launches if s.template_args), None)
        targs = site.template_args if site else None
    rec, args = infer_launch(source_text, kernel_info, defines or {}, filename=Path(path).name, template_args=targs)
    return KernelLaunch(grid=tuple(rec.grid), block=tuple(rec.block), shared_mem=rec.shared_mem,
                        template_args=list(rec.template_args), args=args, origin="inferred")


__all__ = ["KernelLaunch", "CapturedTask", "CapturedTaskError", "build_captured_task", "launches_from_capture",
           "adapter_module", "module_constant", "inferred_launch", "ADAPTER_MARK"]
