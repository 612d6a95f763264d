"""Port to MLX: translate one CUDA kernel into an MLX module, check the port against the original, store it.

The check is differential: the task's reference runs the user's ORIGINAL CUDA kernel (on the CPU simulator,
with CUDA's launch convention), and the port module — its Metal port and its CUDA-backend port in turn — must
agree with it on several seeds. Where a GPU backend is present the port also runs there for real and is timed
against the family's MLX baseline when there is one; on a CPU-only machine the result is `verified (sim)`.
"""
from __future__ import annotations

from pathlib import Path

from . import backend as backends
from .events import BestEvent, CandidateEvent, DoneEvent, LogEvent, SearchRequest, StageEvent

from .store import Store
from .task import InputSpec, KernelTask, Workload

_NP_DTYPES = {"float32": "np.float32", "float16": "np.float16", "int32": "np.int32", "uint32": "np.uint32",
              "int64": "np.int64", "bool": "np.bool_", "bfloat16": "np.float32"}


class PortError(Exception):
    """A kernel that cannot be ported at all; the message names the file, the kernel and what to do."""


def translate_file(path: str, kernel: str | None):
    """Parse `path`, pick the kernel, translate it. Returns (parse result, kernel info, translation)."""
    from .translate import TranslateError, load_cuda_kernel, translate_kernel

    try:
        parsed, k = load_cuda_kernel(path, kernel)
    except TranslateError as e:
        raise PortError(str(e)) from None
    try:
        tr = translate_kernel(parsed, k.name, str(path))
    except TranslateError as e:
        raise PortError(f"{path}: {k.name}: {e}") from None
    return parsed, k, tr


def original_reference(cuda_text: str, k, tr) -> str:
    """Python source of `reference(*inputs)` that runs the ORIGINAL CUDA kernel in the CPU simulator, launched
    as the port's `launch_config` says (grid in blocks, CUDA's convention)."""
    params = [{"name": p.name, "pointer": p.pointer, "output": p.name in tr.output_names} for p in k.params]
    templ = [t.name for t in k.template_params]
    return f'''
import numpy as np
import mlx.core as mx
from ksearch_engine.sim import run_cuda_source

ORIGINAL = {cuda_text!r}
PARAMS = {params!r}
TEMPLATE_NAMES = {templ!r}
OUTPUTS = {list(tr.output_names)!r}

_port = {{}}
exec(compile({tr.module_text!r}, "port_module", "exec"), _port)


def _np_dtype(d):
    return {{mx.float32: np.float32, mx.float16: np.float16, mx.int32: np.int32, mx.uint32: np.uint32,
            mx.int64: np.int64, mx.bool_: np.bool_}}.get(d, np.float32)


def reference(*inputs):
    cfg = _port["launch_config"](*inputs)
    arrays = iter([np.array(x.astype(mx.float32) if x.dtype == mx.bfloat16 else x) for x in inputs])
    args = {{}}
    for p in PARAMS:
        if not p["pointer"]:
            args[p["name"]] = cfg["scalars"][p["name"]]
        elif p["output"]:
            j = OUTPUTS.index(p["name"])
            args[p["name"]] = np.zeros(cfg["output_shapes"][j], dtype=_np_dtype(cfg["output_dtypes"][j]))
        else:
            args[p["name"]] = next(arrays)
    targs = [v for n, v in cfg["template"] if n in TEMPLATE_NAMES]
    outs = run_cuda_source(ORIGINAL, {k.name!r}, cfg["grid"], cfg["block"], args, cfg["shared_mem"],
                           template_args=targs or None, filename={k.name!r},
                           strict_barriers=False)  # NVIDIA tolerates barriers after early-returned threads
    res = tuple(mx.array(outs[n]) for n in OUTPUTS)
    return res if len(res) > 1 else res[0]
'''


def port_task(cuda_text: str, k, tr, path: str) -> KernelTask:
    """The task a port is checked on: inputs and shapes from the translator, the original kernel as reference."""
    hint = tr.task_hint
    inputs = [InputSpec(**{f: v for f, v in i.items() if f in InputSpec.model_fields}) for i in hint["inputs"]]
    dims = hint.get("dims") or {}
    workloads = [Workload(name="small", dims=dims)]
    bench = [Workload(name="bench", dims=hint["bench_dims"])] if hint.get("bench_dims") else []
    return KernelTask(name=f"port:{k.name}", family=hint.get("family") or "custom",
                      description=f"MLX port of {k.name} from {Path(path).name}, checked against the original",
                      inputs=inputs, outputs=[o["name"] if isinstance(o, dict) else o for o in hint["outputs"]],
                      reference=original_reference(cuda_text, k, tr), workloads=workloads, bench_workloads=bench,
                      seeds=[0, 1, 2], source_file=path, kernel_name=k.name)


def pinned(module_text: str, kind: str) -> str:
    """The port module with its GPU-backend switch pinned to `kind` (to check each port in the simulator)."""
    return module_text + f"\n\n# ksearch: check the {kind} port\n_backend = lambda: {kind!r}\n"


def run_port(req: SearchRequest, store: Store, emit) -> DoneEvent:
    """Ports one kernel (req.kernel, else the file's first) or every kernel (req.all_kernels) of req.source_file:
    each kernel's port is stored as its own candidate, its target its own module; kernels that cannot be ported
    are logged with the construct and line. The run's best is the (first) verified port."""
    from .portfile import port_file
    from .source import find_kernels

    name = Path(req.source_file).name
    kernels = None
    if not req.all_kernels:
        if req.kernel:
            kernels = [req.kernel]
        else:
            try:
                parsed = find_kernels(Path(req.source_file).read_text(errors="replace"), req.source_file)
            except OSError as e:
                return DoneEvent(status="failed", message=f"{req.source_file}: cannot read the file ({e.strerror})")
            first = next((k.name for k in parsed.kernels if k.language == "cuda"), None)
            kernels = [first] if first else None
    emit(StageEvent(stage="capture", message=f"porting {name}: capturing its launches"))
    report = port_file(req.source_file, kernels=kernels, argv=req.argv, defines=req.defines,
                       include_dirs=req.include_dirs, write=False,
                       progress=lambda m: emit(StageEvent(stage="port", message=m)))
    if report.error and not report.kernels:
        return DoneEvent(status="failed", message=report.error, report=report.model_dump(mode="json"))
    cap = report.capture
    if cap.program:
        emit(LogEvent(level="info" if cap.status == "ok" else "warning",
                      message=f"capture of {Path(cap.program).name}: {cap.status}, {cap.launches} launches"
                              + (f": {cap.error}" if cap.error else "")))
    for note in cap.notes:
        emit(LogEvent(level="info", message=f"capture: {note}"))
    first_id = best_id = None
    for v in report.kernels:
        for n in v.notes:
            emit(LogEvent(level="info", message=f"{name}: {v.kernel}: {n}"))
        if v.status == "not_ported" or v.module_text is None:
            emit(LogEvent(level="error", message=f"{name}:{v.line}: {v.kernel}: not ported: {v.reason}"))
            continue
        ok = v.status == "verified"
        checked = ", ".join(f"{'Metal' if d == 'metal' else 'CUDA-backend' if d == 'cuda' else d} port: {st}"
                            for d, st in v.dialects.items())
        n = v.launches_checked
        how = (f"{n} launch{'es' if n != 1 else ''} captured from the program" if v.workload == "captured" else
               f"{n} workload{'s' if n != 1 else ''} found by running it" if n != 1 else "a workload found by running it")
        if ok:
            message = (f"{v.kernel}: the Metal and CUDA-backend ports reproduce the original on "
                       f"{how} in the CPU simulator; not timed (no GPU here)")
        else:
            message = f"{v.kernel}: ported, NOT verified: {v.reason or checked}"
        result = {"status": "passed" if ok else "failed", "verified_by": "sim" if ok else None, "trials":
                  v.launches_checked, "backend": "sim", "timing": None,
                  "port_checks": {d: {"status": st, "message": v.messages.get(d, "")} for d, st in v.dialects.items()}, "workload": v.workload,
                  "kernel": v.kernel, "notes": v.notes}
        cid = store.add_candidate(req.run_id, v.module_text, plan=f"port of {v.kernel} ({v.workload} workload)",
                                  kind=backends.candidate_kind(v.module_text), status="passed" if ok else "failed",
                                  message=message, result=result, target_file=v.module_path,
                                  target_text=v.module_text)
        emit(CandidateEvent(candidate_id=cid, status="passed" if ok else "failed", summary=message, evals=1))
        first_id = first_id or cid
        if ok and best_id is None:
            best_id = cid
            emit(BestEvent(candidate_id=cid, summary=message))
    best = best_id or first_id
    store.update_run(req.run_id, task_name=f"port:{name}", family="custom",
                     kernel=req.kernel or (report.kernels[0].kernel if len(report.kernels) == 1 else ""),
                     **({"best_candidate": best} if best else {}))
    c = report.counts()
    summary = (f"{c['verified']} of {c['kernels']} kernel(s) ported and verified, {c['unverified']} ported but "
               f"unverified, {c['not_ported']} not ported")
    if best is None:
        why = next((v.reason for v in report.kernels if v.reason), report.error or "")
        return DoneEvent(status="failed", message=f"{name}: {summary}: {why}", report=report.model_dump(mode="json"))
    return DoneEvent(status="done", best_candidate=best, evals=len(report.kernels), message=summary,
                     report=report.model_dump(mode="json"))
