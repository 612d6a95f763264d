"""Watching kernels: open documents (re-parsed 300 ms after the last change) and files on disk.

Files on disk are watched through the client (`workspace/didChangeWatchedFiles`, registered dynamically when
the client allows it) or else with watchfiles in a thread. Either way an event is only a hint that a path
changed: the file is read again and re-parsed only if its hash differs.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

from lsprotocol import types

from . import diagnostics
from .errors import guarded
from .index import MAX_SCAN_FILES, is_kernel_file, walk_kernel_files

if TYPE_CHECKING:
    from .state import KsearchServer

log = logging.getLogger(__name__)
DEBOUNCE_S = 0.3
WATCH_GLOBS = ["**/*.cu", "**/*.cuh", "**/*.metal", "**/*.py", "**/*.task.toml"]


def _watched(path: str) -> bool:
    return is_kernel_file(path) or path.endswith(".task.toml")


def parse_errors(entry) -> str | None:
    """Why the file does not parse (its first error-level finding, `line N: ...`), or None when it does. Port and
    Optimize stay disabled on such a file: a job would start from code the compiler rejects."""
    if entry is None or getattr(entry, "parse", None) is None:
        return None
    errors = [(line, msg) for line, msg, sev in diagnostics.syntax_problems(entry) if sev == "error"]
    if not errors:
        return None
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"line {errors[0][0] + 1}: {errors[0][1]}{more}"


def reindex_document(ls: "KsearchServer", uri: str) -> None:
    """Parse an open document now (if its text changed) and publish its diagnostics."""
    doc = ls.document(uri)
    if doc is None:
        return
    path = ls.path_of(uri)
    pending = ls.debounce.pop(uri, None)
    if pending is not None:
        pending.cancel()
    if is_kernel_file(path):
        _, changed = ls.index.update(path, doc.source, doc.version)
        if changed:
            ls.results_changed()
    diagnostics.refresh_file(ls, uri)


def ensure_fresh(ls: "KsearchServer", uri: str) -> None:
    """Before answering a request about `uri`: index the editor's latest text if a parse is still pending."""
    doc = ls.document(uri)
    if doc is None:
        return
    entry = ls.index.get(ls.path_of(uri))
    if entry is None or entry.version != doc.version:
        reindex_document(ls, uri)


def on_disk_changes(ls: "KsearchServer", paths: set[str]) -> None:
    """Rescan changed files that the editor does not hold open (open ones follow the editor's text)."""
    task_changed = False
    for path in paths:
        if path.endswith(".task.toml"):
            task_changed = True
            uri = ls.uri_of(path)
            if ls.document(uri) is not None:
                diagnostics.refresh_file(ls, uri)
            continue
        if not is_kernel_file(path) or ls.document(ls.uri_of(path)) is not None:
            continue
        ls.index.update_from_disk(path)
    if task_changed:   # Optimize / Create-task lenses and the no-task hints depend on task files
        for uri in list(ls.workspace.text_documents):
            if is_kernel_file(ls.path_of(uri)):
                diagnostics.refresh_file(ls, uri)
    ls.results_changed()


async def scan_workspace(ls: "KsearchServer") -> None:
    """Index every kernel file under the workspace root (in a thread: parsing can take a while)."""
    if not ls.root:
        return

    def read_all() -> list[str]:
        return walk_kernel_files(ls.root)

    paths = await asyncio.to_thread(read_all)
    if len(paths) >= MAX_SCAN_FILES:
        log.warning("workspace scan stopped at %d files", MAX_SCAN_FILES)
    for path in paths:
        if path.endswith(".task.toml") or ls.document(ls.uri_of(path)) is not None:
            continue
        await asyncio.to_thread(ls.index.update_from_disk, path)


async def start_watching(ls: "KsearchServer") -> None:
    if ls.client_supports("workspace.did_change_watched_files.dynamic_registration"):
        try:
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
                id="ksearch-watch", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=types.DidChangeWatchedFilesRegistrationOptions(
                    watchers=[types.FileSystemWatcher(glob_pattern=g) for g in WATCH_GLOBS]))]))
            ls.watch_mode = "client"
            return
        except Exception as e:  # noqa: BLE001 - fall back to our own watcher
            log.warning("client refused file watching (%s); using watchfiles", e)
    if ls.root:
        start_watchfiles(ls)


def start_watchfiles(ls: "KsearchServer") -> None:
    try:
        import watchfiles
    except ImportError:
        log.warning("watchfiles is not installed: files changed outside the editor are seen on next open")
        return
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    ls.watch_stop = stop
    ls.watch_mode = "watchfiles"
    root = ls.root

    def run() -> None:
        try:
            for changes in watchfiles.watch(root, stop_event=stop, watch_filter=lambda _c, p: _watched(p),
                                            rust_timeout=1000, yield_on_timeout=False, raise_interrupt=False):
                paths = {p for _c, p in changes}
                loop.call_soon_threadsafe(on_disk_changes, ls, paths)
        except Exception as e:  # noqa: BLE001 - watching is a convenience; editing still works
            log.warning("watchfiles stopped: %s", e)

    threading.Thread(target=run, name="ksearch-watchfiles", daemon=True).start()


def register(ls: "KsearchServer") -> None:
    ls.debounce = {}

    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @guarded(ls, "reading the opened file")
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        reindex_document(ls, params.text_document.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @guarded(ls, "reading the change")
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        old = ls.debounce.pop(uri, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_event_loop()
        ls.debounce[uri] = loop.call_later(DEBOUNCE_S, lambda: guarded(ls, "re-reading the file")(reindex_document)(ls, uri))

    @ls.feature(types.TEXT_DOCUMENT_DID_SAVE)
    @guarded(ls, "reading the saved file")
    def did_save(params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        reindex_document(ls, uri)
        if ls.path_of(uri).endswith(".task.toml"):
            on_disk_changes(ls, {ls.path_of(uri)})

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @guarded(ls, "closing the file")
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        pending = ls.debounce.pop(uri, None)
        if pending is not None:
            pending.cancel()
        path = ls.path_of(uri)
        if is_kernel_file(path):
            ls.index.update_from_disk(path)    # back to the file on disk
        diagnostics.publish(ls, uri, [])

    @ls.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    @guarded(ls, "reading changed files")
    def did_change_watched(params: types.DidChangeWatchedFilesParams) -> None:
        on_disk_changes(ls, {ls.path_of(c.uri) for c in params.changes})
