"""Evaluate candidates of one task: verify against a reference computed in another process, then time.

The evaluator owns two sandboxed children: a reference worker (run once per task, its outputs read back
and its files deleted before any candidate runs) and a warm candidate worker reused across candidates
until one of them fails, cheats or dies, after which a fresh one is started.
"""
from __future__ import annotations

import json
import math
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import backend as backends
from ..task import KernelTask
from .models import EvalResult, Limits, Mismatch, Timing
from .sandbox import kill_group, spawn

SUSPECT_SPEEDUP = 10.0


class _Child:
    """One sandboxed worker process speaking the JSON-lines protocol of `child.py`."""

    def __init__(self, backend: str, scratch: Path, limits: Limits):
        self.scratch = scratch
        self.stderr = scratch.parent / f"{scratch.name}.stderr"
        cmd = [sys.executable, "-m", "ksearch_engine.evaluate.child", backend]
        pkg_root = str(Path(__file__).resolve().parents[2])
        self.proc, self.applied, self.cgroup = spawn(
            cmd, scratch, limits, backend=backend, stderr_path=self.stderr,
            env_extra={"PYTHONPATH": os.pathsep.join(filter(None, [pkg_root, os.environ.get("PYTHONPATH")]))})
        self.buf = b""
        self.hello = self.read(timeout=120)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, obj: dict) -> None:
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def read(self, timeout: float) -> dict | None:
        """The next reply, or None on timeout; raises EOFError when the child died."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.proc.wait(timeout=5)
                raise EOFError(self.proc.returncode)
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def log_tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.stderr.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def close(self) -> None:
        kill_group(self.proc, self.cgroup)
        self.cgroup.remove()


def _death_reason(code: int | None) -> tuple[str, str]:
    if code is None:
        return "crashed", "the worker died"
    sig = -code if code < 0 else (code - 128 if code > 128 else 0)
    if sig == signal.SIGSEGV:
        return "crashed", "segmentation fault (the kernel or candidate read or wrote out of bounds)"
    if sig == signal.SIGXCPU:
        return "resource_limit", "CPU-time limit exceeded"
    if sig == signal.SIGXFSZ:
        return "resource_limit", "file-size limit exceeded (the candidate wrote too much to disk)"
    if sig == signal.SIGKILL:
        return "resource_limit", "killed (out of memory or a limit)"
    if sig:
        return "crashed", f"killed by signal {signal.Signals(sig).name}"
    return "crashed", f"the worker exited with code {code}"


class Evaluator:
    """Verify and time candidate modules for one task on one backend."""

    def __init__(self, task: KernelTask, backend: str | None = None, *, limits: Limits | None = None,
                 repeats: int = 20, warmup: int = 3, workdir: Path | None = None, timing_max_s: float = 20.0):
        self.task = task
        self.info = backends.info(backend)
        self.backend = self.info.name
        self.limits = limits or Limits(wall_s=180.0 if self.backend == "sim" else 60.0)
        self.repeats, self.warmup, self.timing_max_s = repeats, warmup, timing_max_s
        self._own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="ksearch-eval-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self._items: list[dict] | None = None
        self._expected: dict[str, list[np.ndarray]] = {}
        self._child: _Child | None = None
        self._n = 0

    # -- lifecycle -----------------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._child:
            self._child.close()
            self._child = None
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- inputs and reference ------------------------------------------------------------------------
    def _prepare(self) -> None:
        if self._items is not None:
            return
        inputs_dir = self.dir / "inputs"
        inputs_dir.mkdir(exist_ok=True)
        items = []
        for wl in self.task.workloads:
            for seed in self.task.seeds:
                key = f"{wl.name}.s{seed}"
                paths = []
                for spec, arr in zip(self.task.inputs, self.task.make_inputs(wl, seed)):
                    p = inputs_dir / f"{key}.{spec.name}.npy"
                    np.save(p, arr)
                    paths.append(str(p))
                items.append({"key": key, "workload": wl.name, "seed": seed, "inputs": paths,
                              "dtypes": [s.dtype for s in self.task.inputs]})
        ref_backend = "mlx-cpu" if self.backend == "sim" else self.backend
        scratch = self.dir / "reference"
        child = _Child(ref_backend, scratch, self.limits)
        try:
            if not child.hello or not child.hello.get("ready"):
                raise RuntimeError(f"the reference worker did not start: {(child.hello or {}).get('message', child.log_tail())}")
            child.send({"op": "reference", "source": self.task.reference, "items": items, "out_dir": str(scratch)})
            rep = child.read(timeout=max(self.limits.wall_s, 120))
            if not rep or not rep.get("ok"):
                msg = (rep or {}).get("message") or child.log_tail()
                raise RuntimeError(f"task '{self.task.name}': its reference failed to run: {msg}")
            for key, paths in rep["outputs"].items():
                self._expected[key] = [np.load(p) for p in paths]
                for p in paths:  # candidates must never find the expected outputs on disk
                    os.unlink(p)
        finally:
            child.close()
            shutil.rmtree(scratch, ignore_errors=True)
        self._items = items

    # -- one candidate -------------------------------------------------------------------------------
    def evaluate(self, source: str, *, timing: bool = True) -> EvalResult:
        t0 = time.monotonic()
        res = self._evaluate(source, timing)
        res.eval_ms = (time.monotonic() - t0) * 1e3
        return res

    def _base(self, **kw) -> EvalResult:
        return EvalResult(backend=self.backend, device=self.info.device, mlx_version=self.info.mlx_version, **kw)

    def _worker(self) -> _Child:
        if self._child is None or not self._child.alive():
            if self._child:
                self._child.close()
            self._child = _Child(self.backend, self.dir / "worker", self.limits)
            if not self._child.hello or not self._child.hello.get("ready"):
                msg = (self._child.hello or {}).get("message") or self._child.log_tail()
                raise RuntimeError(f"the {self.backend} worker did not start: {msg}")
            dev = self._child.hello.get("device")
            if dev and self.backend != "sim":
                self.info.device = dev
        return self._child

    def _evaluate(self, source: str, timing: bool) -> EvalResult:
        kind = backends.candidate_kind(source)
        ok, why = backends.can_run(self.backend, kind)
        if not ok:
            return self._base(status="not_runnable", kind=kind, message=why)
        self._prepare()
        self._n += 1
        child = self._worker()
        out_dir = self.dir / "worker"
        req = {"op": "candidate", "source": source, "entry": self.task.entry, "reference": self.task.reference,
               "items": self._items, "out_dir": str(out_dir), "input_names": [s.name for s in self.task.inputs],
               "task": self.task.model_dump(mode="json")}
        timed = timing and self.info.timed
        if timed:
            req["timing"] = {"repeats": self.repeats, "warmup": self.warmup, "max_s": self.timing_max_s}
        child.send(req)
        try:
            rep = child.read(timeout=self.limits.wall_s)
        except EOFError as e:
            status, msg = _death_reason(e.args[0] if e.args else None)
            res = self._base(status=status, kind=kind, message=msg, log_tail=child.log_tail(),
                             sandbox=child.applied)
            self._restart()
            return res
        if rep is None:
            res = self._base(status="timeout", kind=kind, log_tail=child.log_tail(), sandbox=child.applied,
                             message=f"no answer within {self.limits.wall_s:.0f} s; the worker and everything it started were killed")
            self._restart()
            return res
        if rep.get("status") != "ok":
            res = self._base(status=rep.get("status", "runtime_error"), kind=kind, message=rep.get("message", ""),
                             log_tail=child.log_tail(), sandbox=child.applied)
            self._restart()
            return res
        res = self._compare(rep["outputs"], kind)
        res.sandbox = child.applied
        self._cleanup_outputs(rep["outputs"])
        if res.status == "passed" and timed and rep.get("timings"):
            res.timings = [self._timing(t) for t in rep["timings"]]
            res.timing = res.timings[-1]
            if res.timing.suspect:
                self._remeasure(source, res)
        elif res.status != "passed":
            self._restart()
        return res

    def _restart(self) -> None:
        if self._child:
            self._child.close()
            self._child = None

    def _cleanup_outputs(self, outputs: dict) -> None:
        for paths in outputs.values():
            for p in paths:
                try:
                    os.unlink(p)
                except OSError:
                    pass

    def _compare(self, outputs: dict, kind: str) -> EvalResult:
        worst: Mismatch | None = None
        worst_score = -1.0
        max_abs = 0.0
        n_out = len(self.task.outputs)
        trials = 0
        for item in self._items:
            key = item["key"]
            expected = self._expected[key]
            got_paths = outputs.get(key, [])
            calls = {"first": got_paths[: len(got_paths) // 2], "second": got_paths[len(got_paths) // 2:]}
            for call, paths in calls.items():
                if len(paths) != len(expected):
                    return self._base(status="failed", kind=kind, message=(
                        f"returned {len(paths)} output(s), the task expects {len(expected)} ({', '.join(self.task.outputs)})"),
                        worst=Mismatch(workload=item["workload"], seed=item["seed"], output="*", call=call,
                                       note=f"{len(paths)} outputs instead of {len(expected)}"))
                for i, (p, exp) in enumerate(zip(paths, expected)):
                    got = np.load(p)
                    name = self.task.outputs[i] if i < n_out else f"out{i}"
                    if got.shape != exp.shape:
                        return self._base(status="failed", kind=kind, message=f"{name}: shape {got.shape}, expected {exp.shape}",
                                          worst=Mismatch(workload=item["workload"], seed=item["seed"], output=name, call=call,
                                                         note=f"shape {list(got.shape)} instead of {list(exp.shape)}"))
                    dtype = self._out_dtype(i)
                    tol = self.task.tolerance(dtype)
                    g, e = got.astype(np.float64), exp.astype(np.float64)
                    err = np.abs(g - e)
                    nan_bad = np.isnan(g) != np.isnan(e)
                    err = np.where(np.isnan(g) & np.isnan(e), 0.0, err)
                    err = np.where(nan_bad, np.inf, err)
                    allowed = tol.atol + tol.rtol * np.abs(e)
                    score = err - allowed
                    if err.size:
                        idx = int(np.nanargmax(np.where(np.isnan(score), np.inf, score)))
                        s = float(score.flat[idx])
                        max_abs = max(max_abs, float(np.nanmax(np.where(np.isinf(err), np.nan, err))) if np.isfinite(err).any() else max_abs)
                        if s > worst_score:
                            worst_score = s
                            ev, gv = float(e.flat[idx]), float(g.flat[idx])
                            worst = Mismatch(workload=item["workload"], seed=item["seed"], output=name,
                                             index=list(np.unravel_index(idx, err.shape)) if err.ndim else [],
                                             got=gv, expected=ev, abs_err=float(err.flat[idx]),
                                             rel_err=float(err.flat[idx] / max(abs(ev), 1e-30)), call=call)
            trials += 1
        verified_by = self.backend
        if worst is not None and worst_score > 0:
            return self._base(status="failed", kind=kind, worst=worst, trials=trials, max_abs_err=max_abs,
                              verified_by=verified_by, message="output mismatch: " + worst.describe())
        return self._base(status="passed", kind=kind, trials=trials, max_abs_err=max_abs, verified_by=verified_by,
                          message=f"matches the reference on {trials} trials ({len(self.task.workloads)} workloads x {len(self.task.seeds)} seeds, run before and after the reference)")

    def _out_dtype(self, i: int) -> str:
        # Outputs are compared at the precision of the task's inputs (fp16 inputs -> fp16 tolerance).
        dts = {s.dtype for s in self.task.inputs}
        for d in ("bfloat16", "float16"):
            if d in dts:
                return d
        return "float32"

    def _timing(self, t: dict) -> Timing:
        c, b = np.array(t["cand"]), np.array(t["base"])
        cm, bm = float(np.median(c)), float(np.median(b))
        iqr = lambda a: float(np.percentile(a, 75) - np.percentile(a, 25))  # noqa: E731
        speed = bm / cm if cm > 0 else math.inf
        method = (f"wall time of one call per mx.eval + mx.synchronize, {len(c)} repeats interleaved with the "
                  f"baseline after warm-up, {t['copies']} input cop{'y' if t['copies'] == 1 else 'ies'} rotated")
        return Timing(workload=t["workload"], median_ms=cm, iqr_ms=iqr(c), baseline_ms=bm, baseline_iqr_ms=iqr(b),
                      speedup=speed, repeats=len(c), method=method, suspect=speed > SUSPECT_SPEEDUP)

    def _remeasure(self, source: str, res: EvalResult) -> None:
        """A >10x speedup is re-timed in a fresh worker; it stays flagged unless both runs agree within 25%."""
        self._restart()
        child = self._worker()
        child.send({"op": "candidate", "source": source, "entry": self.task.entry, "reference": self.task.reference,
                    "items": self._items[:1], "out_dir": str(self.dir / "worker"),
                    "input_names": [s.name for s in self.task.inputs], "task": self.task.model_dump(mode="json"),
                    "timing": {"repeats": self.repeats, "warmup": self.warmup, "max_s": self.timing_max_s}})
        try:
            rep = child.read(timeout=self.limits.wall_s)
        except EOFError:
            rep = None
        if rep and rep.get("status") == "ok" and rep.get("timings"):
            self._cleanup_outputs(rep["outputs"])
            again = self._timing(rep["timings"][-1])
            agree = abs(again.speedup - res.timing.speedup) <= 0.25 * res.timing.speedup
            res.timing.suspect = not agree
            res.timing.method += f"; re-measured in a fresh worker: {again.speedup:.2f}x ({'agrees' if agree else 'disagrees'})"
            res.timings[-1] = res.timing
        else:
            self._restart()


def evaluate_once(task: KernelTask, source: str, backend: str | None = None, *, timing: bool = True,
                  limits: Limits | None = None) -> EvalResult:
    """Evaluate one candidate with a fresh evaluator (cold: starts and stops its workers)."""
    with Evaluator(task, backend, limits=limits) as ev:
        return ev.evaluate(source, timing=timing)
