"""Jobs: each Port / Optimize runs `python -m ksearch_engine.worker REQUEST.json` in its own process.

The server reads the worker's JSON-line events without blocking its event loop (asyncio subprocess), turns
them into work-done progress, and queues jobs beyond the `ksearch.concurrency` limit. Cancelling (the
`ksearch.cancel` command, `$/cancelRequest` of the executeCommand that started the job, or the progress
bar's cancel button) sends SIGTERM to the worker, which records the run as 'cancelled'; a worker that does
not stop within the grace period is killed with its whole process group and the server records it.
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
from ksearch_engine.store import ACTIVE

if TYPE_CHECKING:
    from .state import KsearchServer

log = logging.getLogger(__name__)

GRACE_S = 5.0
REPORT_INTERVAL_S = 0.2


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
    token: str | None = None
    cancel_requested: bool = False
    request_ids: set = field(default_factory=set)
    stage: str = "queued"
    round: int = 0
    evals: int = 0
    best: str | None = None
    errors: list[str] = field(default_factory=list)
    stderr_tail: str = ""
    final: dict | None = None
    _last_report: float = 0.0

    def progress_message(self) -> str:
        parts = [self.stage]
        if self.round:
            parts.append(f"round {self.round}")
        parts.append(f"{self.evals}/{self.request.max_evals} evals" if self.kind == "optimize" else f"{self.evals} checks")
        if self.best:
            parts.append(f"best {self.best}")
        return " · ".join(parts)


class JobManager:
    """Queue, run, watch and cancel worker processes for one server."""

    def __init__(self, ls: "KsearchServer"):
        self.ls = ls
        self.jobs: dict[str, Job] = {}
        self.queue: list[Job] = []
        # KSEARCH_WORKER_CMD runs another worker command (e.g. under a profiler) with the request file appended.
        cmd = os.environ.get("KSEARCH_WORKER_CMD")
        self.worker_argv = shlex.split(cmd) if cmd else [sys.executable, "-m", "ksearch_engine.worker"]

    # -- queries -----------------------------------------------------------------------------------
    @property
    def running(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state == "running"]

    def active_for(self, path: str, kernel: str) -> Job | None:
        return next((j for j in self.jobs.values()
                     if j.state != "finished" and j.path == path and j.kernel == kernel), None)

    # -- submit ------------------------------------------------------------------------------------
    def submit(self, *, kind: str, uri: str, path: str, kernel: str, title: str, request: dict[str, Any],
               doc_version: int | None, source_hash: str | None) -> Job:
        store = self.ls.store
        s = self.ls.settings
        req = SearchRequest(kind=kind, store_path=str(store.path), source_file=path, kernel=kernel,
                            doc_version=doc_version, proposer=s.proposer, model=s.model,
                            base_url=s.openai_base_url if s.proposer == "openai" else None,
                            backend=s.backend_request, max_evals=s.evaluations, **request)
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
        if job.proc is not None and job.proc.returncode is None:
            try:
                job.proc.send_signal(signal.SIGTERM)
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
        proc = job.proc
        try:
            await asyncio.wait_for(proc.wait(), GRACE_S)
        except asyncio.TimeoutError:
            try:
                os.killpg(proc.pid, signal.SIGKILL)   # the worker and every evaluator child it started
            except (ProcessLookupError, PermissionError):
                pass

    def shutdown(self) -> None:
        """Server exit: stop queued jobs and ask running workers to stop (they record 'cancelled')."""
        for job in list(self.queue):
            self.cancel(job.run_id)
        for job in self.running:
            if job.proc is not None and job.proc.returncode is None:
                try:
                    job.proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    # -- run ---------------------------------------------------------------------------------------
    async def _run(self, job: Job) -> None:
        final: dict = {}
        try:
            await self._begin_progress(job)
            env = dict(os.environ, PYTHONUNBUFFERED="1", **self.ls.secret_env)
            cwd = self.ls.root or os.path.dirname(job.path) or None
            job.proc = await asyncio.create_subprocess_exec(
                *self.worker_argv, str(job.request_file), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd,
                start_new_session=True, limit=16 * 1024 * 1024)
            if job.cancel_requested:       # cancelled while the process was starting
                job.proc.send_signal(signal.SIGTERM)
                asyncio.ensure_future(self._kill_after_grace(job))
            err_task = asyncio.ensure_future(self._read_stderr(job))
            async for raw in job.proc.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("{"):
                    continue
                try:
                    ev = parse_event(line)
                except Exception:  # noqa: BLE001 - a stray print from a library, not an event
                    continue
                self._on_event(job, ev)
                if ev.type == "done":
                    final = {"status": ev.status, "best": ev.best_candidate, "message": ev.message,
                             "evals": ev.evals}
            await job.proc.wait()
            await err_task
            if not final:
                rc = job.proc.returncode
                if job.cancel_requested:
                    final = {"status": "cancelled", "message": "cancelled by the user"}
                else:
                    tail = job.stderr_tail.strip().splitlines()[-1:] or [f"exit code {rc}"]
                    final = {"status": "failed", "message": f"the worker stopped without finishing ({tail[0]})"}
        except Exception as e:  # noqa: BLE001 - the job fails, the server carries on
            log.exception("job %s", job.run_id)
            final = {"status": "failed", "message": f"could not run the worker: {e}"}
        self._finish(job, final)

    async def _read_stderr(self, job: Job) -> None:
        async for raw in job.proc.stderr:
            job.stderr_tail = (job.stderr_tail + raw.decode("utf-8", "replace"))[-4000:]

    def _on_event(self, job: Job, ev) -> None:
        changed = False
        if ev.type == "stage":
            job.stage = ev.stage + (f": {ev.message}" if ev.message else "")
        elif ev.type == "node":
            job.round = ev.round or job.round
        elif ev.type == "candidate":
            job.evals = ev.evals
            changed = True
        elif ev.type == "best":
            job.best = ev.summary
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
            row = store.run(job.run_id) or {}
            if row.get("status") in ACTIVE or row.get("status") != status:
                store.update_run(job.run_id, status=status, message=final.get("message", ""),
                                 **({"best_candidate": final["best"]} if final.get("best") else {}))
        except Exception:  # noqa: BLE001
            log.exception("recording the end of run %s", job.run_id)
        if job.token:
            self.ls.work_done_progress.end(job.token, types.WorkDoneProgressEnd(message=_end_message(job, final)))
            self.ls.work_done_progress.tokens.pop(job.token, None)
        job.request_file.unlink(missing_ok=True)     # the run's config in the store keeps the request
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


def _end_message(job: Job, final: dict) -> str:
    status = final["status"]
    if status == "done":
        return f"done · {job.evals} evals" + (f" · best {job.best}" if job.best else "")
    if status == "cancelled":
        return "cancelled"
    return f"failed: {final.get('message', '')}"[:200]
