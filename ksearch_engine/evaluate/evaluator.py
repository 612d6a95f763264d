"""Evaluate candidates of one task: verify against a reference computed in another process, then time.

The evaluator owns two sandboxed children: a reference worker (run once per task, its outputs read back
and its files deleted before any candidate runs) and a warm candidate worker reused across candidates
until one of them fails, cheats or dies, after which a fresh one is started.

Nothing the worker says is trusted beyond what this process can check: outputs are compared here; every
reply must carry its request's nonce and be followed by the answer to a fresh ping (a candidate that forges
replies desynchronises the channel); guard events the worker streams cannot be taken back; the scratch
directory is held to a quota; processes left in the worker's cgroup are killed and reported.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import backend as backends
from ..task import KernelTask
from .models import EvalResult, Limits, Mismatch, Timing
from .sandbox import Channel, kill_group, scratch_usage, spawn, sweep_stale, tail_text

SUSPECT_SPEEDUP = 10.0


class ProtocolError(Exception):
    """The worker's reply channel carried something the protocol does not allow (forged or garbled)."""


class QuotaError(Exception):
    """The worker's scratch directory went over its quota."""


class _Child:
    """One sandboxed worker process speaking the JSON-lines protocol of `child.py`."""

    def __init__(self, backend: str, scratch: Path, limits: Limits):
        self.scratch = scratch
        self.limits = limits
        self.stderr = scratch.parent / f"{scratch.name}.stderr"
        shutil.rmtree(scratch, ignore_errors=True)  # nothing a previous worker left is handed on
        # Run child.py as a script (not `-m`, which would import this package, numpy and its threads first:
        # the child confines itself while still single-threaded); -P keeps its folder off sys.path.
        cmd = [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), str(Path(__file__).with_name("child.py")), backend]
        pkg_root = str(Path(__file__).resolve().parents[2])
        self.proc, self.applied, self.cgroup = spawn(
            cmd, scratch, limits, backend=backend, stderr_path=self.stderr,
            env_extra={"PYTHONPATH": os.pathsep.join(filter(None, [pkg_root, os.environ.get("PYTHONPATH")]))})
        self.channel = Channel(self.proc, ProtocolError)
        self.hello = self.read(timeout=120)
        if self.hello:
            self.applied["user"] = self.hello.get("user", "")
        self.base_pids = len(self.cgroup.pids())

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def events(self) -> list[dict]:
        """Guard events streamed by the worker since the last request (bounded; see sandbox.Channel)."""
        return self.channel.events

    def send(self, obj: dict) -> None:
        self.channel.send(obj)

    def read(self, timeout: float, watch_scratch: bool = False) -> dict | None:
        """The next reply, or None on timeout; raises EOFError when the child died, ProtocolError on a
        line that is not JSON, QuotaError when the scratch directory goes over its quota."""
        return self.channel.read(timeout, self.check_scratch if watch_scratch else None)

    def check_scratch(self) -> None:
        used, files = scratch_usage(self.scratch, self.limits.scratch_files)
        if used > self.limits.scratch_mb << 20 or files > self.limits.scratch_files:
            raise QuotaError(f"filled its scratch directory ({used >> 20} MB in {files}"
                             f"{'+' if files > self.limits.scratch_files else ''} files; the quota is "
                             f"{self.limits.scratch_mb} MB and {self.limits.scratch_files} files)")

    def stray_processes(self) -> int:
        """Processes in the worker's cgroup beyond the ones it started with."""
        return max(0, len(self.cgroup.pids()) - self.base_pids)

    def log_tail(self, n: int = 15) -> str:
        return tail_text(self.stderr, n)

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
        return "resource_limit", "killed by SIGKILL (out of memory, a limit, or the candidate killed its own worker)"
    if sig:
        return "crashed", f"killed by signal {signal.Signals(sig).name}"
    return "crashed", f"the worker exited with code {code}"


class Evaluator:
    """Verify and time candidate modules for one task on one backend."""

    def __init__(self, task: KernelTask, backend: str | None = None, *, limits: Limits | None = None,
                 repeats: int = 20, warmup: int = 3, workdir: Path | None = None, timing_max_s: float = 20.0):
        self.info = backends.info(backend)
        self.task = task.for_backend(self.info.name)
        self.backend = self.info.name
        self.limits = limits or Limits(wall_s=180.0 if self.backend == "sim" else 60.0)
        self.repeats, self.warmup, self.timing_max_s = repeats, warmup, timing_max_s
        self._own_dir = workdir is None
        if workdir is None:
            sweep_stale()  # what killed evaluators left: cgroups (and their processes), temp folders
        self.dir = Path(workdir or tempfile.mkdtemp(prefix=f"ksearch-eval-{os.getpid()}-"))
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
        try:
            rep = self._ask(child, req)
        except EOFError as e:
            status, msg = _death_reason(e.args[0] if e.args else None)
            if child.events:  # it was caught at something before it died
                status, msg = "cheating", child.events[0].get("detail", "")
            res = self._base(status=status, kind=kind, message=msg, log_tail=child.log_tail(),
                             sandbox=child.applied)
            self._restart()
            return res
        except ProtocolError as e:
            res = self._base(status="cheating", kind=kind, message=f"tampered with the evaluator's reply channel: {e}",
                             log_tail=child.log_tail(), sandbox=child.applied)
            self._restart()
            return res
        except QuotaError as e:
            res = self._base(status="resource_limit", kind=kind, message=str(e), log_tail=child.log_tail(),
                             sandbox=child.applied)
            self._restart()
            return res
        if rep is None:
            res = self._base(status="timeout", kind=kind, log_tail=child.log_tail(), sandbox=child.applied,
                             message=f"no answer within {self.limits.wall_s:.0f} s; the worker and everything it started were killed")
            if child.events:
                res.status, res.message = "cheating", child.events[0].get("detail", "") + f" (then no answer within {self.limits.wall_s:.0f} s)"
            self._restart()
            return res
        if rep.get("status") != "ok":
            res = self._base(status=rep.get("status", "runtime_error"), kind=kind, message=rep.get("message", ""),
                             log_tail=child.log_tail(), sandbox=child.applied)
            self._restart()
            return res
        try:
            res = self._compare(rep["outputs"], kind)
        except ProtocolError as e:
            self._restart()
            return self._base(status="cheating", kind=kind, message=f"tampered with its outputs: {e}", sandbox=child.applied)
        res.sandbox = child.applied
        self._cleanup_outputs(rep["outputs"])
        if res.status != "passed":
            self._restart()
            return res
        if timed:
            return self._time(child, source, res)
        return res

    def _ask(self, child: _Child, req: dict) -> dict | None:
        """Send one request and read its reply through the parent-side channel checks."""
        req["nonce"] = nonce = os.urandom(8).hex()
        child.send(req)
        rep = child.read(timeout=self.limits.wall_s, watch_scratch=True)
        return None if rep is None else self._check_channel(child, rep, nonce)

    def _timing_request(self) -> dict:
        return {"op": "time", "task": self.task.model_dump(mode="json"),
                "timing": {"repeats": self.repeats, "warmup": self.warmup, "max_s": self.timing_max_s}}

    def _time(self, child: _Child, source: str, res: EvalResult) -> EvalResult:
        """Time a verified candidate (a second request to the same worker, which still holds it loaded)."""
        try:
            rep = self._ask(child, self._timing_request())
        except EOFError as e:
            status, msg = _death_reason(e.args[0] if e.args else None)
            if child.events:
                status, msg = "cheating", child.events[0].get("detail", "")
            rep = {"status": status, "message": "while timing: " + msg}
        except ProtocolError as e:
            rep = {"status": "cheating", "message": f"tampered with the evaluator's reply channel while timed: {e}"}
        except QuotaError as e:
            rep = {"status": "resource_limit", "message": str(e)}
        if rep is None:
            rep = {"status": "timeout", "message": f"timing did not finish within {self.limits.wall_s:.0f} s; the worker was killed"}
        if rep.get("status") != "ok":
            self._restart()
            return self._base(status=rep.get("status", "runtime_error"), kind=res.kind, message=rep.get("message", ""),
                              trials=res.trials, verified_by=res.verified_by, sandbox=res.sandbox,
                              log_tail=child.log_tail())
        res.timings = [self._timing(t) for t in rep["timings"]]
        res.timing = res.timings[-1] if res.timings else None
        if res.timing and res.timing.suspect:
            self._remeasure(source, res)
        return res

    def _check_channel(self, child: _Child, rep: dict, nonce: str) -> dict:
        """Parent-side guards after a reply: streamed guard events, nonce, ping/pong, stray processes,
        scratch quota. Returns the reply, or a 'cheating'/'resource_limit' one naming what was seen."""
        events = list(child.events)
        if rep.get("nonce") != nonce:
            raise ProtocolError("a reply that does not answer the request (forged or out of order)")
        ping = os.urandom(8).hex()
        child.send({"op": "ping", "nonce": ping})
        pong = child.read(timeout=10)
        events += child.events
        if pong is None or pong.get("pong") != ping:
            raise ProtocolError("extra or missing replies after the candidate's answer")
        stray = child.stray_processes()
        if events and "audit" not in self.limits.disable_guards:
            e = events[0]
            return {"status": "cheating", "message": e.get("detail", e.get("event", "")), "guard": e.get("event")}
        if rep.get("status") == "ok" and stray:
            child.cgroup.kill_all()
            return {"status": "cheating", "message": f"left {stray} process(es) running after it returned (killed through the worker's cgroup)",
                    "guard": "processes"}
        child.check_scratch()
        return rep

    def _restart(self) -> None:
        if self._child:
            self._child.close()
            self._child = None

    def _cleanup_outputs(self, outputs: dict) -> None:
        """Delete the worker's output files; only names inside its scratch (paths come from the worker)."""
        scratch = self.dir / "worker"
        for paths in outputs.values():
            for p in paths:
                if Path(p).parent != scratch or not str(Path(p).name).endswith(".npy"):
                    continue
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
                    got = self._load_output(p, key, call, i, exp)
                    name = self.task.outputs[i] if i < n_out else f"out{i}"
                    if got.shape != exp.shape:
                        return self._base(status="failed", kind=kind, message=(
                            f"{name} on {item['workload']} (seed {item['seed']}, {call} call): shape {got.shape}, expected {exp.shape}"),
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

    def _load_output(self, path: str, key: str, call: str, i: int, exp: np.ndarray) -> np.ndarray:
        """Read one output file the worker wrote, trusting nothing about it: the name must be the one the
        protocol gives it, the file a plain one (no link, FIFO or device) of a sane size, no pickles."""
        want = self.dir / "worker" / f"{key}.{call}{i}.npy"
        if Path(path) != want:
            raise ProtocolError(f"an output path outside the protocol ({path})")
        try:
            fd = os.open(want, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            raise ProtocolError(f"output file {want.name} cannot be opened ({e.strerror})") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > 4 * exp.nbytes + (1 << 20):
                raise ProtocolError(f"output file {want.name} is not a plain file of the expected size")
            try:
                return np.load(f, allow_pickle=False)
            except ValueError as e:
                raise ProtocolError(f"output file {want.name} is not a plain array ({e})") from None

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
        """A >10x speedup is re-timed in a fresh worker; it stays flagged unless both runs agree within 25%
        (see remeasure_agrees)."""
        self._restart()
        child = self._worker()
        rep = None
        try:
            first = self._ask(child, {"op": "candidate", "source": source, "entry": self.task.entry,
                                      "reference": self.task.reference, "items": self._items[:1],
                                      "out_dir": str(self.dir / "worker"),
                                      "input_names": [s.name for s in self.task.inputs]})
            if first and first.get("status") == "ok":
                self._cleanup_outputs(first["outputs"])
                rep = self._ask(child, self._timing_request())
        except (EOFError, ProtocolError, QuotaError):
            rep = None
        if rep and rep.get("status") == "ok" and rep.get("timings"):
            again = self._timing(rep["timings"][-1])
            agree = remeasure_agrees(res.timing, again)
            res.timing.suspect = not agree
            res.timing.method += (f"; re-measured in a fresh worker: {again.median_ms:.4g} ms, {again.speedup:.2f}x "
                                  f"({'agrees' if agree else 'disagrees'})")
            res.timings[-1] = res.timing
        else:
            if rep and rep.get("status") == "cheating":
                res.status, res.message = "cheating", "when re-measured: " + rep.get("message", "")
            self._restart()


def evaluate_once(task: KernelTask, source: str, backend: str | None = None, *, timing: bool = True,
                  limits: Limits | None = None) -> EvalResult:
    """Evaluate one candidate with a fresh evaluator (cold: starts and stops its workers)."""
    with Evaluator(task, backend, limits=limits) as ev:
        return ev.evaluate(source, timing=timing)


def remeasure_agrees(first: Timing, again: Timing, tol: float = 0.25) -> bool:
    """Whether a fresh worker's re-measurement confirms a suspect (>10x) timing: the candidate's own median
    agrees within `tol`, or the speed-up does. The candidate's time is what a warm-state artefact would inflate;
    a host-bound baseline (a per-token loop of thousands of small ops) can swing 1.5x between measurements while
    the candidate stays put, and that must not cost a genuine candidate its place."""
    if again.median_ms <= 0 or first.median_ms <= 0:
        return False
    same_time = abs(again.median_ms - first.median_ms) <= tol * first.median_ms
    same_speedup = abs(again.speedup - first.speedup) <= tol * first.speedup
    return (same_time or same_speedup) and again.speedup > 1.0

