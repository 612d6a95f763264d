"""The commands that start and stop work: `ksearch.port`, `ksearch.optimize`, `ksearch.createTask`, `ksearch.cancel`.

Port and Optimize answer when their job ends (so that `$/cancelRequest` of the command can stop it) with
`{runId, status, candidateId}`; progress arrives meanwhile as work-done progress.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types

from ksearch_engine.store import source_hash

from . import code_lens, documents
from .errors import UserError, guarded
from .tasks import benchmark_task_text, task_file_path

if TYPE_CHECKING:
    from .state import KsearchServer

log = logging.getLogger(__name__)


def _args(args: tuple, n: int, usage: str) -> list:
    flat = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
    if len(flat) < n:
        raise UserError(f"{usage}: expected {n} argument(s), got {len(flat)}")
    return flat


def _kernel(ls: "KsearchServer", uri: str, name: str):
    documents.ensure_fresh(ls, uri)
    path = ls.path_of(uri)
    entry = ls.index.get(path)
    if entry is None:
        entry, _ = ls.index.update_from_disk(path)
    k = ls.index.kernel(path, name)
    if k is None:
        raise UserError(f"{Path(path).name}: no kernel named '{name}' (was it renamed? save the file and try again)")
    return path, ls.index.get(path), k


def start_job(ls: "KsearchServer", kind: str, uri: str, kernel: str):
    """Queue a Port or Optimize job for one kernel; raises UserError when it cannot start."""
    path, entry, k = _kernel(ls, uri, kernel)
    name = Path(path).name
    running = ls.jobs.active_for(path, kernel)
    if running is not None:
        raise UserError(f"{kernel} in {name} already has a {running.kind} job running; cancel it first")
    doc = ls.document(uri)
    disk = None
    try:
        disk = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        pass
    if doc is not None and disk is not None and doc.source != disk:
        raise UserError(f"{name} has unsaved changes; the job reads the file from disk. Save it and run "
                        f"{'Port to MLX' if kind == 'port' else 'Optimize kernel'} again.")
    text = doc.source if doc is not None else (disk or "")
    broken = documents.parse_errors(entry)
    if broken:
        action = "Port to MLX" if kind == "port" else "Optimize kernel"
        raise UserError(f"{name} does not parse ({broken}). {action} is disabled until it does: fix the file, "
                        f"save it, and run it again.")
    request: dict = {}
    if kind == "port":
        if not k.is_cuda:
            raise UserError(f"{kernel} in {name} is not a CUDA kernel: Port to MLX works on CUDA kernels "
                            f"(.cu/.cuh); use Optimize kernel for Metal and MLX kernels")
        title = f"Port {kernel} to MLX"
    else:
        info = ls.tasks.find(path, kernel, entry.hash if entry else "")
        if not info.has_task:
            raise UserError(f"{kernel} in {name} has no benchmark task: run 'Create benchmark task', fill in "
                            f"its shapes and reference, then Optimize again")
        if info.task_file is None and info.own_kernel:
            # the user's kernel itself makes the task (port + launch capture): resolved in the job's worker by
            # ksearch_engine.resolve, which takes seconds; the request names only the file and the kernel
            request = {}
        else:
            try:
                from ksearch_engine.resolve import resolve
                task = resolve(path, kernel, write_prefill=False).task
            except Exception as e:  # noqa: BLE001 - a task that does not load is the user's to fix
                raise UserError(f"the task for {kernel} in {name} does not load: {e}") from None
            # The resolved task travels as data (as the CLI sends it): a task file may be the `family = ...`
            # shortcut, which only the resolver understands.
            request = {"task": task.model_dump(mode="json"), "family": info.family}
        title = f"Optimize {kernel}"
    return ls.jobs.submit(kind=kind, uri=uri, path=path, kernel=kernel, title=title, request=request,
                          doc_version=doc.version if doc is not None else None, source_hash=source_hash(text))


def register(ls: "KsearchServer") -> None:

    async def run_command(kind: str, args: tuple) -> dict | None:
        uri, kernel = _args(args, 2, f"ksearch.{kind} [uri, kernel]")[:2]
        msg_id = ls.protocol.msg_id
        if not ls.settings_loaded.is_set():      # the client's settings are still on their way
            try:
                await asyncio.wait_for(ls.settings_loaded.wait(), 10)
            except asyncio.TimeoutError:
                ls.tell("the editor's ksearch settings did not arrive within 10 s; this job uses the defaults",
                        types.MessageType.Warning)
        job = start_job(ls, kind, uri, kernel)
        if msg_id is not None:
            job.request_ids.add(msg_id)
        final = await asyncio.shield(job.done)
        return {"runId": job.run_id, "status": final["status"], "candidateId": final.get("best"),
                "message": final.get("message", "")}

    @ls.command("ksearch.port")
    @guarded(ls, "Port to MLX")
    async def port(*args):
        return await run_command("port", args)

    @ls.command("ksearch.portAll")
    @guarded(ls, "Port all kernels in file")
    async def port_all(*args):
        """One Port job per CUDA kernel of the file (they share one capture of its program); answers when all
        have ended, with each kernel's run."""
        uri = _args(args, 1, "ksearch.portAll [uri]")[0]
        documents.ensure_fresh(ls, uri)
        path = ls.path_of(uri)
        entry = ls.index.get(path) or ls.index.update_from_disk(path)[0]
        broken = documents.parse_errors(entry)
        if broken:
            raise UserError(f"{Path(path).name} does not parse ({broken}). Port all kernels is disabled until it "
                            f"does: fix the file, save it, and run it again.")
        kernels = [k.name for k in (entry.kernels if entry else []) if k.is_cuda]
        if not kernels:
            held = code_lens.included_kernel_files(ls, path, entry)
            if held:
                raise UserError(f"{Path(path).name} has no CUDA kernel of its own; its kernels are in the files it "
                                f"includes: " + "; ".join(f"{Path(t).name} ({', '.join(n)})" for _, t, n in held)
                                + ". Open one (the lens above its #include) and run Port all kernels in file there.")
            raise UserError(f"{Path(path).name}: no CUDA kernel to port")
        jobs, skipped = [], []
        for name in kernels:
            if ls.jobs.active_for(path, name) is not None:
                skipped.append(name)
                continue
            jobs.append(start_job(ls, "port", uri, name))
        finals = [await asyncio.shield(j.done) for j in jobs]
        ported = sum(1 for f in finals if f["status"] == "done")
        ls.tell(f"{Path(path).name}: {ported} of {len(jobs)} kernel(s) ported"
                + (f"; already running: {', '.join(skipped)}" if skipped else ""))
        return {"runs": [{"kernel": j.kernel, "runId": j.run_id, "status": f["status"],
                          "candidateId": f.get("best"), "message": f.get("message", "")}
                         for j, f in zip(jobs, finals)], "skipped": skipped}

    @ls.command("ksearch.optimize")
    @guarded(ls, "Optimize kernel")
    async def optimize(*args):
        return await run_command("optimize", args)

    @ls.command("ksearch.cancel")
    @guarded(ls, "Cancel")
    def cancel(*args):
        run_id = _args(args, 1, "ksearch.cancel [runId]")[0]
        if ls.jobs.cancel(run_id):
            return {"cancelled": True}
        run = ls.store.run(run_id)
        pid = run.worker_pid if run is not None else None
        if run and run["status"] == "running" and pid:
            # A worker started by an earlier session of the server (or the CLI): it records 'cancelled' itself.
            try:
                os.kill(pid, signal.SIGTERM)
                return {"cancelled": True}
            except ProcessLookupError:
                ls.store.mark_orphans_failed()
        ls.tell(f"run {run_id} is not running (nothing to cancel)")
        return {"cancelled": False}

    @ls.command("ksearch.explain")
    @guarded(ls, "ksearch")
    def explain(*args):
        """The lens of a kernel whose file does not parse: say why Port and Optimize are disabled."""
        uri = _args(args, 1, "ksearch.explain [uri, kernel]")[0]
        documents.ensure_fresh(ls, uri)
        path = ls.path_of(uri)
        broken = documents.parse_errors(ls.index.get(path))
        message = (f"{Path(path).name} does not parse ({broken}): Port to MLX and Optimize kernel are disabled "
                   f"until it does. Fix it and save." if broken else f"{Path(path).name} parses: run the action again.")
        ls.tell(message, types.MessageType.Warning if broken else types.MessageType.Info)
        return {"parses": not broken, "message": message}

    @ls.command("ksearch.openFile")
    @guarded(ls, "Open file")
    async def open_file(*args):
        """The lens on an #include whose file holds kernels: open that file in the editor (window/showDocument),
        or say where it is for a client that cannot be asked to."""
        uri = _args(args, 1, "ksearch.openFile [uri]")[0]
        path = Path(ls.path_of(uri))
        if not path.is_file():
            raise UserError(f"{path} is not there any more")
        shown = await ls.show_document(uri)
        if not shown:
            ls.tell(f"the kernels are in {path}: open it to port them")
        return {"uri": uri, "shown": shown}

    @ls.command("ksearch.showRun")
    @guarded(ls, "Show run")
    def show_run(*args):
        """A run's outcome and log, in words (the 'no candidate beat your kernel' lens): a message, the log
        lines in the output channel, and the same as data for clients that show it themselves."""
        run_id = _args(args, 1, "ksearch.showRun [runId]")[0]
        from ksearch_engine.runlog import run_log_lines
        run = ls.store.find_run(run_id)
        if run is None:
            raise UserError(f"run {run_id} is not in the results store {ls.store.path}")
        lines = run_log_lines(ls.store, run)
        for line in lines:
            log.info("run %s: %s", run.id, line)
        ls.tell(f"run {run.id} ({run.kind} {run.kernel}): {run.status}; {run.message or ''}".rstrip("; ")
                + " — the full log is in the ksearch output channel (or `ksearch show " + run.id + "`).")
        return {"runId": run.id, "status": run.status, "message": run.message or "", "log": lines}

    @ls.command("ksearch.createTask")
    @guarded(ls, "Create benchmark task")
    async def create_task(*args):
        uri, kernel = _args(args, 2, "ksearch.createTask [uri, kernel]")[:2]
        edit, target = create_task_edit(ls, uri, kernel)
        result = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
            edit=edit, label=f"ksearch: create benchmark task for {kernel}"))
        if not result.applied:
            raise UserError(f"the editor did not create {target.name}: {result.failure_reason or 'no reason given'}")
        if ls.client_supports("window.show_document.support"):
            await ls.window_show_document_async(types.ShowDocumentParams(uri=ls.uri_of(target), take_focus=True))
        return {"taskFile": ls.uri_of(target)}


def create_task_edit(ls: "KsearchServer", uri: str, kernel: str) -> tuple[types.WorkspaceEdit, Path]:
    """CreateFile + insert of a new `<stem>.<kernel>.task.toml` with defaults from the kernel's signature."""
    path, _entry, k = _kernel(ls, uri, kernel)
    target = task_file_path(path, kernel)
    if target.exists():
        raise UserError(f"{target.name} already exists: edit it (it is next to {Path(path).name})")
    t_uri = ls.uri_of(target)
    edit = types.WorkspaceEdit(document_changes=[
        types.CreateFile(uri=t_uri, options=types.CreateFileOptions(overwrite=False, ignore_if_exists=True)),
        types.TextDocumentEdit(text_document=types.OptionalVersionedTextDocumentIdentifier(uri=t_uri, version=None),
                               edits=[types.TextEdit(range=types.Range(start=types.Position(line=0, character=0),
                                                                       end=types.Position(line=0, character=0)),
                                                     new_text=benchmark_task_text(path, k.info))]),
    ])
    return edit, target
