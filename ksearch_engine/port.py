"""Port to MLX: translate one CUDA kernel into an MLX module, check the port against the original, store it.

The check is differential: the task's reference runs the user's ORIGINAL CUDA kernel (on the CPU simulator,
with CUDA's launch convention), and the port module — its Metal port and its CUDA-backend port in turn — must
agree with it on several seeds. Where a GPU backend is present the port also runs there for real and is timed
against the family's MLX baseline when there is one; on a CPU-only machine the result is `verified (sim)`.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import backend as backends
from .events import BestEvent, CandidateEvent, DoneEvent, LogEvent, SearchRequest, StageEvent
from .evaluate import Evaluator, EvalResult
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
    emit(StageEvent(stage="translate", message=f"translating {Path(req.source_file).name}"))
    try:
        parsed, k, tr = translate_file(req.source_file, req.kernel)
    except PortError as e:
        return DoneEvent(status="failed", message=str(e))
    for issue in tr.report:
        emit(LogEvent(level="warning" if issue.severity != "error" else "error",
                      message=f"{Path(req.source_file).name}:{issue.line + 1 if isinstance(issue.line, int) else '?'}: "
                              f"{issue.construct}: {issue.message}"))
    task = port_task(parsed.source, k, tr, req.source_file)
    store.update_run(req.run_id, task_name=task.name, family=task.family, kernel=k.name)

    best = backends.detect().name
    check_backend = req.backend or ("sim" if best == "mlx-cpu" else best)
    emit(StageEvent(stage="verify", message=f"checking the port against the original on {check_backend}"))
    results: dict[str, EvalResult] = {}
    with Evaluator(task, check_backend) as ev:
        if check_backend == "sim":
            for kind in ("metal", "cuda"):
                results[kind] = ev.evaluate(pinned(tr.module_text, kind), timing=False)
        else:
            results[check_backend] = ev.evaluate(tr.module_text, timing=True)
    main = next(iter(results.values()))
    ok = all(r.status == "passed" for r in results.values())
    status = "passed" if ok else next(r.status for r in results.values() if r.status != "passed")
    checked = ", ".join(f"{'Metal' if kd == 'metal' else 'CUDA-backend' if kd == 'cuda' else kd} port: {r.status}"
                        for kd, r in results.items())
    if ok and check_backend == "sim":
        message = (f"the Metal port and the CUDA-backend port both match the original CUDA kernel in the CPU "
                   f"simulator on {main.trials} trials (seeds {task.seeds}); not timed (no GPU here)")
    elif ok:
        message = f"matches the original CUDA kernel on {main.trials} trials on {main.device} ({main.backend})"
    else:
        bad = next(r for r in results.values() if r.status != "passed")
        message = f"the port does NOT match the original yet ({checked}): {bad.message[:400]}"
    result = main.model_dump(mode="json")
    result["port_checks"] = {kd: {"status": r.status, "message": r.message[:500], "trials": r.trials}
                             for kd, r in results.items()}
    result["rules_applied"] = tr.rules_applied
    result["issues"] = [i.model_dump(mode="json") if hasattr(i, "model_dump") else str(i) for i in tr.report]
    cid = store.add_candidate(req.run_id, tr.module_text, plan=f"port: {len(tr.rules_applied)} translation rules",
                              kind=backends.candidate_kind(tr.module_text), status=status, message=message,
                              result=result, target_file=str(tr.module_path), target_text=tr.module_text)
    emit(CandidateEvent(candidate_id=cid, status=status, summary=message, evals=len(results),
                        median_ms=main.timing.median_ms if main.timing else None,
                        speedup=main.timing.speedup if main.timing else None))
    store.update_run(req.run_id, best_candidate=cid)
    emit(BestEvent(candidate_id=cid, summary=message, median_ms=main.timing.median_ms if main.timing else None,
                   speedup=main.timing.speedup if main.timing else None))
    return DoneEvent(status="done", best_candidate=cid, evals=len(results), message=message)
