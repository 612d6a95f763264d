"""The language server object: a pygls LanguageServer holding the workspace's state.

State lives here (settings, the kernel index, the store, the job manager, which candidate each pending result
shows); features live in their own modules and reach it through the server they are registered on.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
from pathlib import Path

from lsprotocol import types
from pygls.capabilities import get_capability
from pygls.lsp.server import LanguageServer
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol
from pygls.uris import from_fs_path, to_fs_path

from ksearch_engine.store import Store

from .config import Settings
from .index import WorkspaceIndex
from .jobs import Job, JobManager
from .summary import Results, fmt_ms, offer_list
from .tasks import TaskFinder

log = logging.getLogger(__name__)
VERSION = "0.1.0"
REFRESH_DELAY_S = 0.5


class KsearchProtocol(LanguageServerProtocol):
    """pygls' protocol, plus: `$/cancelRequest` of a running Port/Optimize command stops its worker.

    pygls cancels the request's future (the editor gets RequestCancelled) but not the coroutine behind a
    command, so the job manager is told which request went away.
    """

    def _handle_cancel_notification(self, msg_id):
        super()._handle_cancel_notification(msg_id)
        jobs = getattr(self._server, "jobs", None)
        if jobs is not None:
            jobs.cancel_for_request(msg_id)

    def structure_message(self, data):
        """pygls raises (and its reader only logs) when a request's params do not fit the method's types, so the
        editor would wait forever for a reply. Answer such a request with the JSON-RPC error instead
        (-32602 InvalidParams) and drop it; notifications are still only logged, as JSON-RPC wants."""
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "method" in data and data.get("id") is not None \
                    and isinstance(data["id"], (int, str)):
                self._send_response(data["id"], error=exc.to_response_error())
                return _ANSWERED
            raise

    def handle_message(self, message):
        if message is _ANSWERED:
            return
        super().handle_message(message)


_ANSWERED = object()      # a request already answered with an error while being read


class RedactSecrets(logging.Filter):
    """Keeps API keys out of every log line: pygls logs whole messages (initialize params at INFO, everything
    at DEBUG) before the server has read the key, so key fields are masked by name as well as by value."""

    FIELD = re.compile(r"""((?:gemini|openai)ApiKey['"]?\s*[:=]\s*['"]?)([^'",}\s)]+)""")

    def __init__(self, server: "KsearchServer"):
        super().__init__()
        self.server = server

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        clean = self.FIELD.sub(r"\1***", msg)
        for secret in (v for v in self.server.secret_env.values() if v):
            clean = clean.replace(secret, "***")
        if clean != msg:
            record.msg, record.args = clean, None
        return True


class KsearchServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("ksearch-lsp", VERSION, protocol_cls=KsearchProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        # set once the client's settings were pulled after `initialized` (or could not be): jobs wait for it, so
        # a command sent right after start-up runs with the user's settings, not the defaults
        self.settings_loaded = asyncio.Event()
        self.index = WorkspaceIndex()
        self.tasks = TaskFinder()
        self.results = Results()
        self.jobs = JobManager(self)
        self.offers: dict[str, int] = {}          # run id -> which ranked candidate the lenses offer
        self.secret_env: dict[str, str] = {}      # passed to workers only
        # commands the client implements itself (initializationOptions.clientCommands: the VS Code extension
        # names ksearch.showDiff); lenses of other clients use the server's client-neutral ksearch.diff
        self.client_commands: set[str] = set()
        self.root: str | None = None
        self._store: Store | None = None
        self._refresh_handle: asyncio.TimerHandle | None = None
        self.redactor = RedactSecrets(self)

    # -- paths ---------------------------------------------------------------------------------------
    @staticmethod
    def path_of(uri: str) -> str:
        return to_fs_path(uri) or uri

    @staticmethod
    def uri_of(path: str | Path) -> str:
        return from_fs_path(str(path)) or str(path)

    def document(self, uri: str):
        """The open document for `uri`, or None when the editor does not hold it."""
        return self.workspace.text_documents.get(uri)

    def current_text(self, path: str) -> str | None:
        """A file's text as the editor has it (open document) or as on disk; None when it does not exist."""
        doc = self.document(self.uri_of(path))
        if doc is not None:
            return doc.source
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    # -- store ---------------------------------------------------------------------------------------
    def store_path(self) -> Path:
        if self.settings.store_path:
            p = Path(os.path.expanduser(self.settings.store_path))
            return p if p.is_absolute() else Path(self.root or os.path.expanduser("~")) / p
        if os.environ.get("KSEARCH_STORE"):
            return Path(os.environ["KSEARCH_STORE"])
        if self.root:
            return Path(self.root) / ".ksearch" / "ksearch.db"
        # A single file opened without a workspace folder: one store for such files, in the user's cache.
        return Path(os.path.expanduser("~/.cache/ksearch/ksearch.db"))

    @property
    def store(self) -> Store:
        want = self.store_path()
        if self._store is None or self._store.path != want:
            self._store = Store(want)
            ignore = want.parent / ".gitignore"
            if want.parent.name == ".ksearch" and not ignore.exists():
                try:   # results, requests and job logs are not source: keep them out of the user's commits
                    ignore.write_text("*\n")
                except OSError:
                    pass
            failed = self._store.mark_orphans_failed()
            if failed:
                log.info("runs left running by a stopped worker marked failed: %s", failed)
            self.results.invalidate()
        return self._store

    # -- results -------------------------------------------------------------------------------------
    def module_path(self, path: str, kernel: str) -> str:
        """Where this kernel's MLX module goes: its own module per kernel (`x_mlx.py` for a one-kernel file,
        else `x_<kernel>_mlx.py`), so accepting one kernel's result never overwrites another's."""
        from ksearch_engine.portfile import module_path_for
        entry = self.index.get(path)
        n = len(entry.kernels) if entry is not None else 1
        return str(module_path_for(path, kernel, n))

    def kernel_results(self, path: str, kernel: str):
        """The kernel's runs, its pending offer and what is on disk (summary.Results.for_kernel)."""
        module = self.module_path(path, kernel) if not path.endswith(".py") else None
        return self.results.for_kernel(self.store, path, kernel, read=self.current_text, module=module)

    def client_shows_diff(self) -> bool:
        return "ksearch.showDiff" in self.client_commands

    def diff_command(self) -> str:
        return "ksearch.showDiff" if self.client_shows_diff() else "ksearch.diff"

    # -- capabilities --------------------------------------------------------------------------------
    def client_supports(self, dotted: str) -> bool:
        try:
            return bool(get_capability(self.client_capabilities, dotted, False))
        except Exception:  # noqa: BLE001 - before initialize
            return False

    async def show_document(self, uri: str) -> bool:
        """Open `uri` in the editor (window/showDocument) where the client can be asked to; whether it was."""
        if not self.client_supports("window.show_document.support"):
            return False
        try:
            r = await self.window_show_document_async(types.ShowDocumentParams(uri=uri, take_focus=True))
            return bool(getattr(r, "success", False))
        except Exception:  # noqa: BLE001 - the caller says where the document is instead
            return False

    # -- messages ------------------------------------------------------------------------------------
    def tell(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=f"ksearch: {message}"))

    def error(self, message: str) -> None:
        self.tell(message, types.MessageType.Error)

    # -- results changed -----------------------------------------------------------------------------
    def results_changed(self, immediate: bool = False) -> None:
        """Drop cached summaries and ask the client to re-request lenses and inlay hints (coalesced)."""
        self.results.invalidate()
        loop = asyncio.get_event_loop()
        if self._refresh_handle is not None:
            if not immediate:
                return
            self._refresh_handle.cancel()
        self._refresh_handle = loop.call_later(0 if immediate else REFRESH_DELAY_S, self._refresh)

    def _refresh(self) -> None:
        self._refresh_handle = None
        self.results.invalidate()
        if self.client_supports("workspace.code_lens.refresh_support"):
            self.workspace_code_lens_refresh(None)
        if self.client_supports("workspace.inlay_hint.refresh_support"):
            self.workspace_inlay_hint_refresh(None)

    def on_job_finished(self, job: Job, final: dict) -> None:
        """The toast at a job's end: the same words as the lens (summary.Best), and what to do next."""
        name = f"{job.kernel} in {Path(job.path).name}"
        what = "Port to MLX" if job.kind == "port" else "Optimize"
        status = final["status"]
        store = self.store
        log.info("%s of %s ended: %s %s", what, name, status, final.get("message") or "")
        if status == "done":
            run = store.run(job.run_id)
            ranked = offer_list(store, run) if run is not None else []
            if ranked:
                self.offers[job.run_id] = 0
                label = self.results.best(store, run, ranked[0]).lens_label()
                self.protocol.notify("ksearch/showDiff", {"runId": job.run_id, "candidateId": ranked[0].id})
                if not self.client_shows_diff():
                    from .results import show_diff_document
                    asyncio.ensure_future(show_diff_document(self, job.run_id, ranked[0].id))
                more = f" ({len(ranked)} candidates beat it; Next shows the others)" if len(ranked) > 1 else ""
                self.tell(f"{what} of {name}: {label}{more}. Review the diff, then Accept or Reject it (code lenses "
                          f"above the kernel).")
            elif job.kind == "optimize" and store.ranked(job.run_id):
                orig = store.original(job.run_id)
                t = orig.timing if orig is not None else None
                at = f" ({fmt_ms(t['median_ms'])} @ {t.get('workload') or '?'})" if t else ""
                self.tell(f"{what} of {name}: no candidate beat your kernel{at}; nothing to accept. Try a larger "
                          f"budget (ksearch.budget.evaluations) or another proposer (ksearch.proposer).",
                          types.MessageType.Warning)
            else:
                self.tell(f"{what} of {name} finished without a passing candidate "
                          f"({final.get('message') or 'see the run log'}). The output channel has the run's log "
                          f"(or run `ksearch show {job.run_id}`).", types.MessageType.Warning)
        elif status == "failed":
            detail = final.get("message") or (job.errors[-1] if job.errors else "unknown error")
            log.error("%s of %s failed: %s", what, name, detail)
            self.error(f"{what} of {name} failed: {detail}. The run's log: `ksearch show {job.run_id}`.")
        elif status == "cancelled":
            self.tell(f"{what} of {name} cancelled.")
