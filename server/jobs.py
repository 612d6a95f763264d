"""Jobs: each Port / Optimize runs `python -m ksearch_engine.worker REQUEST.json` in its own process.

The worker writes its JSON-line events to a file under `.ksearch/jobs/` (not a pipe: a worker outlives the
server that started it, and a restarted server adopts it and follows the same file); the server reads them
without blocking its event loop, turns them into work-done progress, and queues jobs beyond the
`ksearch.concurrency` limit. Cancelling (the `ksearch.cancel` command, `$/cancelRequest` of the
executeCommand that started the job, or the progress bar's cancel button) sends SIGTERM to the worker, which
records the run as 'cancelled'; a worker that does not stop within the grace period is killed with its whole
process group and the server records it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.capabilities import get_capability

from ksearch_engine.events import SearchRequest, parse_event
from ksearch_engine.procs import pid_alive, same_process, start_time
from ksearch_engine.store import ACTIVE

from .summary import fmt_ms

if TYPE_CHECKING:
    from .state import KsearchServer

log = logging.getLogger(__name__)

GRACE_S = 5.0
REPORT_INTERVAL_S = 0.2
POLL_S = 0.1


@dataclass
class Job:
    run_id: str
    kind: str                      # port | optimize
    path: str
    uri: str
    kernel: str
    title: str
    request: SearchRequest
    request_file: Path
    done: asyncio.Future
    state: str = "queued"          # queued | running | finished
    proc: asyncio.subprocess.Process | None = None
    pid: int | None = None
    pid_start: str | None = None   # procs.start_time(pid): an adopted PID is signalled only while it matches
    adopted: bool = False          # started by an earlier server session, followed through its event file
    token: str | None = None
    cancel_requested: bool = False
    request_ids: set = field(default_factory=set)
    stage: str = "queued"
    round: int = 0
    evals: int = 0
    best: str | None = None
    best_ms: float | None = None   # the best's measured time (None: verified only, e.g. a port on the simulator)
    errors: list[str] = field(default_factory=list)
    stderr_tail: str = ""
    final: dict | None = None
    _last_report: float = 0.0

    @property
    def stage_name(self) -> str:
        """The stage without its message ("evaluate", not "evaluate: node n5: approach …")."""
        return self.stage.split(":")[0]

    def progress_message(self, short: bool = False) -> str:
        """Where the job is; `short` (for the code lens): the stage's name only, no plan text."""
        parts = [self.stage_name if short else self.stage]
        if self.round:
            parts.append(f"round {self.round}")
        parts.append(f"{self.evals}/{self.request.max_evals} evals" if self.kind == "optimize" else f"{self.evals} checks")
        if self.best:
            best = self.best
            if short:   # its time, or for a candidate that was only verified, its verdict
                best = fmt_ms(self.best_ms) if self.best_ms is not None else next(
                    (p for p in self.best.split(" · ") if "verified" in p), self.best[:40])
            parts.append(f"best {best}")
        return " · ".join(parts)


class JobManager:
    """Queue, run, watch and cancel worker processes for one server."""

    def __init__(self, ls: "KsearchServer"):
        self.ls = ls
        self.jobs: dict[str, Job] = {}
        self.queue: list[Job] = []
        # KSEARCH_WORKER_CMD runs another worker command (e.g. under a profiler) with the request file appended.
        cmd = os.environ.get("KSEARCH_WORKER_CMD")
        # -P: a `ksearch_engine/` folder in the workspace is never imported instead of ours.
        self.worker_argv = shlex.split(cmd) if cmd else [sys.executable, "-P", "-m", "ksearch_engine.worker"]

    # -- queries -----------------------------------------------------------------------------------
    @property
    def running(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state == "running"]

    def active_for(self, path: str, kernel: str) -> Job | None:
        return next((j for j in self.jobs.values()
                     if j.state != "finished" and j.path == path and j.kernel == kernel), None)

    def identity_file(self, run_id: str) -> Path:
        return self.ls.store.path.parent / "jobs" / f"{run_id}.pid"

    def adopted_identity(self, run_id: str, pid: int | None) -> str | None:
        """The start time recorded for `pid` when it was started, if it still names that process."""
        try:
            rec_pid, _, ident = self.identity_file(run_id).read_text().strip().partition(" ")
        except OSError:
            return None
        return ident if rec_pid == str(pid) and same_process(pid, ident) else None

    def files(self, run_id: str) -> tuple[Path, Path]:
        d = self.ls.store.path.parent / "jobs"
        return d / f"{run_id}.events.jsonl", d / f"{run_id}.stderr.txt"

    # -- submit ------------------------------------------------------------------------------------
    def submit(self, *, kind: str, uri: str, path: str, kernel: str, title: str, request: dict[str, Any],
               doc_version: int | None, source_hash: str | None) -> Job:
        store = self.ls.store
        s = self.ls.settings
        req = SearchRequest(kind=kind, store_path=str(store.path), source_file=path, kernel=kernel,
                            doc_version=doc_version, proposer=s.proposer, model=s.model,
                            base_url=s.openai_base_url if s.proposer == "openai" else None,
                            backend=s.backend_request, max_evals=s.evaluations,
                            cluster=s.cluster if kind == "optimize" else None, **request)
        task = req.task or {}
        run_id = store.create_run(kind, task_name=task.get("name") or kernel, family=req.family or task.get("family", ""),
                                  file=path, kernel=kernel, backend=req.backend or "", proposer=req.proposer,
                                  config=req.model_dump(mode="json"), doc_version=doc_version,
                                  source_hash=source_hash, status="queued")
        req.run_id = run_id
        req_dir = store.path.parent / "requests"
        req_dir.mkdir(parents=True, exist_ok=True)
        req_file = req_dir / f"{run_id}.json"
        req_file.write_text(req.model_dump_json(indent=1))
        job = Job(run_id=run_id, kind=kind, path=path, uri=uri, kernel=kernel, title=title, request=req,
                  request_file=req_file, done=asyncio.get_running_loop().create_future())
        self.jobs[run_id] = job
        self.queue.append(job)
        self._pump()
        self._announce()
        return job

    def _pump(self) -> None:
        limit = max(1, self.ls.settings.concurrency)
        while self.queue and len(self.running) < limit:
            job = self.queue.pop(0)
            job.state = "running"
            job.stage = "starting"
            asyncio.ensure_future(self._run(job))

    # -- cancel ------------------------------------------------------------------------------------
    def cancel(self, run_id: str) -> bool:
        job = self.jobs.get(run_id)
        if job is None or job.state == "finished":
            return False
        job.cancel_requested = True
        if job in self.queue:
            self.queue.remove(job)
            self._finish(job, {"status": "cancelled", "message": "cancelled before it started"})
            return True
        if job.pid is not None and not self._exited(job):
            if job.proc is None and not same_process(job.pid, job.pid_start):
                return True   # an adopted PID that no longer names its worker: never signal a stranger
            try:
                os.kill(job.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            asyncio.ensure_future(self._kill_after_grace(job))
        return True

    def cancel_for_request(self, msg_id) -> None:
        for job in list(self.jobs.values()):
            if msg_id in job.request_ids:
                self.cancel(job.run_id)

    def cancel_for_token(self, token) -> None:
        for job in list(self.jobs.values()):
            if job.token is not None and job.token == token:
                self.cancel(job.run_id)

    async def _kill_after_grace(self, job: Job) -> None:
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if self._exited(job):
                return
            await asyncio.sleep(POLL_S)
        if job.proc is None and not same_process(job.pid, job.pid_start):
            return
        try:
            os.killpg(job.pid, signal.SIGKILL)   # the worker and every evaluator child it started
        except (ProcessLookupError, PermissionError):
            pass

    def _exited(self, job: Job) -> bool:
        if job.proc is not None:
            return job.proc.returncode is not None
        return not pid_alive(job.pid)

    def shutdown(self) -> None:
        """Server exit: queued jobs are cancelled; running workers go on (the next session adopts them)."""
        for job in list(self.queue):
            self.cancel(job.run_id)

    def adopt_running(self) -> list[str]:
        """Follow the workers an earlier session started that are still running (after a server restart)."""
        adopted = []
        store = self.ls.store
        for run in store.query("SELECT * FROM runs WHERE status='running'"):
            events, _ = self.files(run["id"])
            if run["id"] in self.jobs or not pid_alive(run.get("worker_pid")) or not events.exists():
                continue
            ident = self.adopted_identity(run["id"], run.get("worker_pid"))
            if ident is None:   # the PID is another process now (reused), or was never recorded: not ours
                continue
            try:
                req = SearchRequest.model_validate({**(run.get("config") or {}), "run_id": run["id"],
                                                    "store_path": str(store.path)})
            except Exception:  # noqa: BLE001 - a run written by another version: leave it to its worker
                continue
            path, kernel = run.get("file") or "", run.get("kernel") or ""
            title = f"Port {kernel} to MLX" if run["kind"] == "port" else f"Optimize {kernel}"
            job = Job(run_id=run["id"], kind=run["kind"], path=path, uri=self.ls.uri_of(path), kernel=kernel,
                      title=title, request=req, request_file=events.parent / f"{run['id']}.json",
                      done=asyncio.get_running_loop().create_future(), state="running",
                      pid=run["worker_pid"], pid_start=ident, adopted=True)
            self.jobs[run["id"]] = job
            asyncio.ensure_future(self._run(job))
            adopted.append(run["id"])
        if adopted:
            self._announce()
        return adopted

    # -- run ---------------------------------------------------------------------------------------
    async def _run(self, job: Job) -> None:
        final: dict = {}
        try:
            await self._begin_progress(job)
            if not job.adopted:
                await self._start(job)
            final = await self._follow(job)
        except Exception as e:  # noqa: BLE001 - the job fails, the server carries on
            log.exception("job %s", job.run_id)
            final = {"status": "failed", "message": f"could not run the worker: {e}"}
        self._finish(job, final)

    async def _start(self, job: Job) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1", **self.ls.secret_env)
        events, errors = self.files(job.run_id)
        cwd = str(events.parent)   # not the workspace: nothing of a cloned repository is on the worker's path
        events.parent.mkdir(parents=True, exist_ok=True)
        with open(events, "wb") as out, open(errors, "wb") as err:
            job.proc = await asyncio.create_subprocess_exec(
                *self.worker_argv, str(job.request_file), stdin=asyncio.subprocess.DEVNULL, stdout=out,
                stderr=err, env=env, cwd=cwd, start_new_session=True)
        job.pid = job.proc.pid
        job.pid_start = start_time(job.pid)
        try:  # what a later session checks before it adopts (and may signal) this PID
            self.identity_file(job.run_id).write_text(f"{job.pid} {job.pid_start or ''}\n")
        except OSError:
            pass
        if job.cancel_requested:       # cancelled while the process was starting
            os.kill(job.pid, signal.SIGTERM)
            asyncio.ensure_future(self._kill_after_grace(job))

    async def _follow(self, job: Job) -> dict:
        """Read the worker's event file as it grows, until the worker has exited and the file is drained."""
        events, errors = self.files(job.run_id)
        final: dict = {}
        offset, partial = 0, b""
        while True:
            exited = self._exited(job)          # checked first: lines written before the exit are read below
            try:
                with open(events, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:
                data = b""
            offset += len(data)
            *lines, partial = (partial + data).split(b"\n")
            for raw in lines:
                ev = _event(raw)
                if ev is None:
                    continue
                self._on_event(job, ev)
                if ev.type == "done":
                    final = {"status": ev.status, "best": ev.best_candidate, "message": ev.message,
                             "evals": ev.evals}
            if exited:
                break
            await asyncio.sleep(POLL_S)
        if job.proc is not None:
            await job.proc.wait()
        if not final:
            try:
                job.stderr_tail = errors.read_text(errors="replace")[-4000:]
            except OSError:
                pass
            rc = job.proc.returncode if job.proc is not None else None
            if job.cancel_requested:
                final = {"status": "cancelled", "message": "cancelled by the user"}
            else:
                tail = job.stderr_tail.strip().splitlines()[-1:] or [f"exit code {rc}"]
                final = {"status": "failed", "message": f"the worker stopped without finishing ({tail[0]})"}
        return final

    def _log_event(self, job: Job, ev) -> None:
        """Every job's stages, results and failures in the server log (the editor's output channel)."""
        tag = f"{job.kind} {job.kernel} ({job.run_id})"
        if ev.type == "stage":
            log.info("%s: %s%s", tag, ev.stage, f": {ev.message}" if ev.message else "")
        elif ev.type == "candidate":
            (log.info if ev.status == "passed" else log.warning)("%s: candidate %s %s", tag, ev.candidate_id, ev.summary)
        elif ev.type == "best":
            log.info("%s: new best %s", tag, ev.summary)
        elif ev.type == "log":
            {"error": log.error, "warning": log.warning}.get(ev.level, log.info)("%s: %s", tag, ev.message)
        elif ev.type == "error":
            log.error("%s: %s", tag, ev.message)
        elif ev.type == "done":
            (log.info if ev.status == "done" else log.warning)("%s: %s: %s", tag, ev.status, ev.message)

    def _on_event(self, job: Job, ev) -> None:
        changed = False
        self._log_event(job, ev)
        if ev.type == "stage":
            changed = ev.stage != job.stage_name      # the lens shows the stage's name: refresh it
            job.stage = ev.stage + (f": {ev.message}" if ev.message else "")
        elif ev.type == "node":
            job.round = ev.round or job.round
        elif ev.type == "candidate":
            job.evals = ev.evals
            changed = True
        elif ev.type == "best":
            job.best, job.best_ms = ev.summary, ev.median_ms
            changed = True
        elif ev.type in ("error",) or (ev.type == "log" and ev.level == "error"):
            job.errors.append(ev.message)
        if changed:
            self.ls.results_changed()
        now = time.monotonic()
        if job.token and now - job._last_report >= REPORT_INTERVAL_S:
            job._last_report = now
            pct = min(99, int(100 * job.evals / max(1, job.request.max_evals))) if job.kind == "optimize" else None
            self.ls.work_done_progress.report(job.token, types.WorkDoneProgressReport(
                message=job.progress_message(), percentage=pct, cancellable=True))

    async def _begin_progress(self, job: Job) -> None:
        if not get_capability(self.ls.client_capabilities, "window.work_done_progress", False):
            return
        token = f"ksearch-{job.run_id}"
        try:
            await self.ls.work_done_progress.create_async(token)
        except Exception as e:  # noqa: BLE001 - a client that refuses progress still gets the job
            log.warning("progress refused: %s", e)
            return
        job.token = token
        fut = self.ls.work_done_progress.tokens.get(token)
        if fut is not None:   # the progress bar's cancel button cancels this future
            fut.add_done_callback(lambda f: f.cancelled() and self.cancel(job.run_id))
        self.ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
            title=job.title, message="starting", cancellable=True, percentage=0 if job.kind == "optimize" else None))

    # -- finish ------------------------------------------------------------------------------------
    def _finish(self, job: Job, final: dict) -> None:
        if job.state == "finished":
            return
        job.state = "finished"
        status = final.get("status") or "failed"
        if job.cancel_requested and status == "failed":
            status = "cancelled"
        final["status"] = status
        job.final = final
        store = self.ls.store
        try:
            row = store.run(job.run_id)
            if row is None or row.status in ACTIVE or row.status != status:
                store.update_run(job.run_id, status=status, message=final.get("message", ""),
                                 **({"best_candidate": final["best"]} if final.get("best") else {}))
        except Exception:  # noqa: BLE001
            log.exception("recording the end of run %s", job.run_id)
        if job.token:
            self.ls.work_done_progress.end(job.token, types.WorkDoneProgressEnd(message=_end_message(job, final)))
            self.ls.work_done_progress.tokens.pop(job.token, None)
        # The store keeps the request (the run's config) and the events; the files were for the live job.
        for f in (job.request_file, *self.files(job.run_id)):
            f.unlink(missing_ok=True)
        try:
            best = store.candidate(final["best"]) if final.get("best") else None
            if best is not None and best.timing:
                log.info("%s %s (%s): timing method: %s", job.kind, job.kernel, job.run_id, best.timing.get("method"))
        except Exception:  # noqa: BLE001 - a log line only
            pass
        if status == "failed" and job.stderr_tail.strip():
            log.error("%s %s (%s): the worker's stderr ends with:\n%s", job.kind, job.kernel, job.run_id,
                      job.stderr_tail.strip()[-1500:])
        self.ls.results_changed(immediate=True)
        self.ls.on_job_finished(job, final)
        if not job.done.done():
            job.done.set_result(final)
        self._pump()
        self._announce()

    def _announce(self) -> None:
        best = next((j.best for j in self.running if j.best), None)
        self.ls.protocol.notify("ksearch/jobs", {"running": len(self.running), "queued": len(self.queue),
                                                 "best": best})


def _event(raw: bytes):
    line = raw.decode("utf-8", "replace").strip()
    if not line.startswith("{"):
        return None
    try:
        return parse_event(line)
    except Exception:  # noqa: BLE001 - a stray print from a library, not an event
        return None


def _end_message(job: Job, final: dict) -> str:
    status = final["status"]
    if status == "done":
        return f"done · {job.evals} evals" + (f" · best {job.best}" if job.best else "")
    if status == "cancelled":
        return "cancelled"
    return f"failed: {final.get('message', '')}"[:200]
