"""Which task is this kernel: the one home for that question (the CLI, the language server and the search ask it).

In order:
1. a family name (`ksearch optimize softmax`) or a `*.task.toml` given directly;
2. a task file next to the kernel (`<stem>.<kernel>.task.toml`, then `<stem>.task.toml`);
3. the user's kernel itself: a CUDA kernel is ported (portfile.port_file) and its launches — captured from its
   program's `main()`, else found by running the kernel — make a captured task (captask.py) whose reference is
   the original and whose first candidate is the port as is;
4. a recognised family (one recognizer, driven by specs/families.yaml) for a Metal or MLX kernel that has no
   task file: the family's task;
5. nothing inferable: a prefilled task file is written next to the kernel for the user to edit, and the error
   says where.
A family's templates join a run as extra plans only when they compute the task's own contract (same inputs and
outputs); they never replace the user's kernel as the root.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .task import KernelTask, TaskError, find_task_file

CUDA_EXT = (".cu", ".cuh")

# spec family id -> the built-in template family used when only the id is recognised
_DEFAULT_TEMPLATES = {"softmax": "softmax", "norm": "rmsnorm", "attention": "attention",
                      "decode_attention": "decode", "scan": "scan", "moe": "moe_gating"}


class ResolveError(TaskError):
    """No task for this kernel; the message says what to do (and names the prefilled task file, if written)."""

    def __init__(self, message: str, task_file: Path | None = None):
        super().__init__(message)
        self.task_file = task_file


@dataclass
class Resolved:
    task: KernelTask
    family: object | None = None          # families.Family whose templates are extra plans (same contract)
    source_file: str | None = None
    kernel: str | None = None
    how: str = ""                         # one line: where the task came from
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- the family recognizer
def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def recognize_family(*names: str) -> str | None:
    """The built-in template family for a kernel, from its name and its file's name, using the ids and aliases
    of specs/families.yaml (a name containing an id or alias of four letters or more matches). Returns a
    family of `ksearch_engine.families`, or None."""
    from . import families
    try:
        from .specs import load_specs
        spec_families = load_specs().families.families
    except Exception:  # noqa: BLE001 - no specs: nothing is recognised
        return None
    registry = families.names()
    text = " ".join(_norm(n) for n in names if n)
    # longest alias first: 'paged_decode' before 'decode', 'log_softmax' before 'softmax'
    aliases = sorted(((_norm(a), f.id) for f in spec_families for a in [f.id, *f.aliases] if len(_norm(a)) >= 4),
                     key=lambda x: -len(x[0]))
    for alias, fid in aliases:
        if alias and alias in text:
            direct = [r for r in registry if _norm(r) == alias]
            if direct:
                return direct[0]
            named = [r for r in registry if _norm(r) in text and _family_id(r) == fid]
            if named:
                return named[0]
            fam = _DEFAULT_TEMPLATES.get(fid)
            if fam in registry:
                return fam
    return None


def _family_id(registry_name: str) -> str | None:
    try:
        from .specs import load_specs
        return load_specs().family(registry_name)
    except Exception:  # noqa: BLE001
        return None


def same_contract(task: KernelTask, family) -> bool:
    """Whether a family's candidates compute `task`'s contract (its inputs and outputs), so its templates can
    be tried on the task as extra plans."""
    try:
        ft = family.make_task()
    except Exception:  # noqa: BLE001
        return False
    return [i.name for i in ft.inputs] == [i.name for i in task.inputs] and list(ft.outputs) == list(task.outputs)


# ---------------------------------------------------------------- task files
def load_task_file(path: Path) -> KernelTask:
    """A task file: a full KernelTask, or `family = "..."` (+ options) naming a built-in family."""
    from . import families

    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ResolveError(f"{path}: cannot read task file: {e}") from None
    if "inputs" not in data and "family" in data:
        name = data.pop("family")
        if name not in families.names():
            raise ResolveError(f"{path}: unknown family '{name}' (known: {', '.join(families.names())})")
        return families.get(name).make_task(**data.get("options", {}))
    return KernelTask.load(path)


def task_file_path(source: str | Path, kernel: str) -> Path:
    p = Path(source)
    return p.with_name(f"{p.stem}.{kernel}.task.toml")


# ---------------------------------------------------------------- the resolver
def resolve(target: str, kernel: str | None = None, *, argv=(), defines: dict[str, str] | None = None,
            include_dirs=(), write_prefill: bool = True, progress: Callable[[str], None] | None = None) -> Resolved:
    """The task for `target` (a family name, a task file, or a kernel file with `kernel` in it)."""
    from . import families

    say = progress or (lambda _m: None)
    p = Path(target)
    if target in families.names() and not p.exists():
        fam = families.get(target)
        return Resolved(task=fam.make_task(), family=fam, how=f"the built-in {target} family's task")
    if not p.exists():
        raise ResolveError(f"{target}: no such file, and not a family name (families: {', '.join(families.names())})")
    if p.name.endswith(".task.toml"):
        task = load_task_file(p)
        return Resolved(task=task, family=_family_of(task), source_file=task.source_file, kernel=task.kernel_name,
                        how=f"task file {p.name}")
    tf = find_task_file(p, kernel)
    if tf is not None:
        task = load_task_file(tf)
        return Resolved(task=task, family=_family_of(task), source_file=str(p.resolve()),
                        kernel=kernel or task.kernel_name, how=f"task file {tf.name} next to the kernel")
    from .source import find_kernels

    text = p.read_text(errors="replace")
    parsed = find_kernels(text, str(p))
    ks = [k for k in parsed.kernels if kernel in (None, k.name)]
    if not ks:
        found = ", ".join(k.name for k in parsed.kernels) or "none"
        raise ResolveError(f"{p}: no kernel named '{kernel}' (kernels found: {found})" if kernel
                           else f"{p}: no kernel found in this file")
    k = ks[0]
    notes: list[str] = []
    fam_name = recognize_family(k.name, p.stem)
    if k.language == "cuda" or p.suffix in CUDA_EXT:
        try:
            return _captured(p, text, parsed, k, fam_name, argv, defines, include_dirs, say)
        except ResolveError as e:
            notes.append(str(e))
    if fam_name:
        fam = families.get(fam_name)
        return Resolved(task=fam.make_task(), family=fam, source_file=str(p.resolve()), kernel=k.name,
                        how=f"recognised as the {fam_name} family (from its name); the family's task is used",
                        notes=notes + [f"{k.name} is not a CUDA kernel with launches to capture: the run optimizes the "
                                       f"{fam_name} family's task; write {task_file_path(p, k.name).name} to hold "
                                       f"candidates to this kernel's own contract"])
    tf = task_file_path(p, k.name)
    why = (" (" + "; ".join(notes) + ")") if notes else ""
    if write_prefill and not tf.exists():
        tf.write_text(prefilled_task_text(p, k))
        raise ResolveError(f"{p.name}: no task can be inferred for {k.name}{why}. A prefilled task file was written: "
                           f"{tf} — check its shapes, dtypes and reference, then run optimize again.", tf)
    raise ResolveError(f"{p.name}: no task can be inferred for {k.name}{why}. Write {tf.name} next to it (or use "
                       f"'Create benchmark task' in the editor) describing its inputs and reference.", None)


def _family_of(task: KernelTask):
    from . import families
    for name in (task.family, task.name):
        if name in families.names():
            fam = families.get(name)
            return fam if same_contract(task, fam) else None
    return None


def _captured(p: Path, text: str, parsed, k, fam_name, argv, defines, include_dirs, say) -> Resolved:
    """The captured task of a CUDA kernel: port it, take its verified launches, build the task."""
    from . import families
    from .captask import (CapturedTaskError, KernelLaunch, build_captured_task, inferred_launch,
                          launches_from_capture)
    from .portfile import find_program, int_defines, port_file, sim_source

    say(f"porting {k.name} and checking the port on its launches")
    report = port_file(p, kernels=[k.name], argv=list(argv), defines=dict(defines or {}),
                       include_dirs=list(include_dirs), write=False)
    v = next((x for x in report.kernels if x.kernel == k.name), None)
    if v is None or v.module_text is None or v.status != "verified":
        reason = (v.reason if v is not None else report.error) or "the port could not be verified"
        raise ResolveError(f"the port of {k.name} is {v.label if v else 'missing'}: {reason}")
    launches, origin = [], "captured"
    prog = find_program(p)
    if prog is not None:
        from .portfile import capture_for

        cap = capture_for(p, argv, defines, include_dirs, progress=say)   # the capture port_file made (cached)
        if cap is not None:
            launches = launches_from_capture(cap, k.name)
    if not launches and v.checked:    # the workload the port was verified on (found by running the kernel)
        origin = v.workload
        launches = [KernelLaunch(grid=tuple(rec.grid), block=tuple(rec.block), shared_mem=rec.shared_mem,
                                 template_args=list(rec.template_args), args=dict(args), origin=v.workload)
                    for rec, args in v.checked]
    if not launches:
        origin = "inferred"
        try:
            launches = [inferred_launch(text, k, p, int_defines(parsed.preamble, defines or {}))]
        except Exception as e:  # noqa: BLE001 - portinfer's own failures say why
            raise ResolveError(f"no launch of {k.name} to build a task from ({str(e)[:300]})") from None
    try:
        ct = build_captured_task(v.module_text, sim_source(p, include_dirs), k.name, launches, source_file=str(p))
    except CapturedTaskError as e:
        raise ResolveError(str(e)) from None
    notes = list(ct.notes)
    fixed = _inputs_with_invariants(ct.task)
    if fixed:
        notes.append(f"{k.name} faults on inputs redrawn within the captured ranges ({fixed}): its inputs carry "
                     f"invariants (indices, intervals, counts), so every check uses the captured contents as they "
                     f"are; a task file can say how to draw valid inputs")
    if origin == "inferred":
        notes.append("no program launched it (or capture is unavailable): the workload was found by running the "
                     "kernel on made-up inputs")
    if fam_name:
        notes.append(f"recognised as the {fam_name} family; its templates compute the family's contract, not this "
                     f"kernel's ({', '.join(ct.outputs)} from its own arguments), so they are not offered here")
    family = None
    if fam_name and same_contract(ct.task, families.get(fam_name)):
        family = families.get(fam_name)
    n_w, n_b = len(ct.task.workloads), len(ct.task.bench_workloads)
    return Resolved(task=ct.task, family=family, source_file=str(p.resolve()), kernel=k.name,
                    how=f"{k.name} itself: its verified port on {len(ct.launches)} {origin} launch(es) "
                        f"({n_w} checked for correctness, {n_b} timed)", notes=notes)


def _inputs_with_invariants(task: KernelTask) -> str | None:
    """Run the task's reference (the user's original, in the simulator where there is no GPU) on the inputs of a
    later seed (buffers redrawn within their captured ranges); where it fails there but not on the captured
    contents, the task keeps every input as captured (vary=False) and the reason is returned. None: the redrawn
    inputs are fine (or the task has none to redraw)."""
    if len(task.seeds or []) < 2 or not any(i.init == "captured" and i.vary for i in task.inputs) \
            or not task.workloads:
        return None
    import mlx.core as mx

    ns: dict = {}
    try:
        exec(compile(task.reference, f"<reference of {task.name}>", "exec"), ns)
        w = task.workloads[0]
        ns["reference"](*[mx.array(a) for a in task.make_inputs(w, task.seeds[0])])
    except Exception:  # noqa: BLE001 - the captured contents themselves fail: the evaluator says so, with its words
        return None
    try:
        ns["reference"](*[mx.array(a) for a in task.make_inputs(w, task.seeds[1])])
        return None
    except Exception as e:  # noqa: BLE001 - any failure of the original on redrawn inputs
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        why = re.sub(r"^(?:[\w.]+Error|SimError):\s*", "", why)
        why = why if len(why) <= 300 else why[:300].rsplit(" ", 1)[0] + " ..."
    for i in task.inputs:
        if i.init == "captured":
            i.vary = False
    return why


def optimizable(path: str | Path, kernel: str, language: str | None = None) -> tuple[bool, str | None]:
    """Cheap answer for code lenses: (can Optimize start, recognised family). A task file, a CUDA kernel
    (its launches make the task) or a recognised family can; the full resolution happens in the job."""
    p = Path(path)
    fam = recognize_family(kernel, p.stem)
    if find_task_file(p, kernel) is not None:
        return True, None
    if language == "cuda" or p.suffix in CUDA_EXT:
        return True, fam
    return fam is not None, fam


# ---------------------------------------------------------------- a prefilled task file
_DTYPES = {"float": "float32", "half": "float16", "__half": "float16", "bfloat": "bfloat16",
           "__nv_bfloat16": "bfloat16", "bfloat16_t": "bfloat16", "int": "int32", "int32_t": "int32",
           "uint": "uint32", "uint32_t": "uint32", "unsigned": "uint32", "int64_t": "int64", "long": "int64",
           "bool": "bool", "float16_t": "float16", "double": "float32", "unsigned char": "uint8",
           "uchar": "uint8", "uint8_t": "uint8", "char": "int8", "int8_t": "int8"}
_SCALARS = {"int", "int32_t", "uint", "uint32_t", "unsigned", "size_t", "int64_t", "long", "float", "double"}


def _dtype(type_name: str) -> str:
    t = " ".join(w for w in type_name.replace("*", " ").split() if w not in ("const", "__restrict__", "device"))
    return _DTYPES.get(t, "float32")


def prefilled_task_text(source: str | Path, k) -> str:
    """A task file for kernel `k` (source.KernelInfo), with inputs and dims read from its signature, for the
    user to edit. Shapes are named dims with values in each workload (never `*x.shape`)."""
    ptrs = [p for p in k.params if p.pointer]
    scalars = [p for p in k.params if not p.pointer and p.type.strip() in _SCALARS]
    dims = [p.name for p in scalars if re.match(r"^[A-Za-z_]\w*$", p.name)
            and p.type.strip() not in ("float", "double")] or ["n"]
    inputs = [p for p in ptrs if p.is_const] or ptrs[:-1]
    outputs = [p for p in ptrs if p not in inputs] or ptrs[-1:]
    if k.input_names or k.output_names:      # MLX custom kernels name them
        inputs = [p for p in k.params if p.name in k.input_names] or inputs
        outputs = [p for p in k.params if p.name in k.output_names] or outputs
    shape = ", ".join(f'"{d}"' for d in dims)
    arg_names = ", ".join(p.name for p in inputs) or "x"
    out_names = ", ".join(p.name for p in outputs) or "out"
    lines = [
        f"# Benchmark task for kernel '{k.name}' in {Path(source).name}.",
        "# Written by ksearch from the kernel's signature: CHECK every shape, dtype and the reference below,",
        "# then run 'Optimize kernel' again. Dims are named; each workload gives them values.",
        f'name = "{k.name}"',
        'family = "custom"',
        f'kernel_name = "{k.name}"',
        f'source_file = "{Path(source).name}"',
        "outputs = [" + (", ".join(f'"{p.name}"' for p in outputs) or '"out"') + "]",
        "",
        "# reference(*inputs) in MLX operations: what the kernel computes. Replace the body.",
        "reference = '''",
        "import mlx.core as mx",
        "",
        f"def reference({arg_names}):",
        f'    raise NotImplementedError("write the reference for {k.name} in {Path(source).name}: '
        f'return {out_names} computed with MLX ops")',
        "'''",
        "",
    ]
    for p in inputs or []:
        lines += ["[[inputs]]", f'name = "{p.name}"', f"shape = [{shape}]", f'dtype = "{_dtype(p.type)}"',
                  'init = "normal"', ""]
    if not inputs:
        lines += ["[[inputs]]", 'name = "x"', f"shape = [{shape}]", 'dtype = "float32"', 'init = "normal"', ""]
    small = ", ".join(f"{d} = 64" for d in dims)
    big = ", ".join(f"{d} = 1024" for d in dims)
    lines += ["[[workloads]]", 'name = "small"', f"dims = {{ {small} }}", "",
              "[[bench_workloads]]", 'name = "large"', f"dims = {{ {big} }}", ""]
    return "\n".join(lines)
