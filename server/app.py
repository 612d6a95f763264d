"""Builds the server: the state object plus every feature module, and the session lifecycle
(initialize: root, encoding, secrets; initialized: settings, store, watching, workspace scan; shutdown)."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types

from . import code_actions, code_lens, commands, config, documents, hover, inlay_hints, results
from .errors import guarded
from .state import KsearchServer

log = logging.getLogger(__name__)
# Keys a client may hand over, and the environment variable each reaches the worker through (only there).
SECRETS = {"geminiApiKey": "GEMINI_API_KEY", "openaiApiKey": "OPENAI_API_KEY"}


def _set_secrets(ls: KsearchServer, given: Any) -> None:
    for field, env in SECRETS.items():
        key = given.get(field) if isinstance(given, dict) else getattr(given, field, None)
        if isinstance(key, str) and key.strip():
            ls.secret_env[env] = key.strip()
        elif isinstance(given, dict) and field in given or hasattr(given, field):
            ls.secret_env.pop(env, None)       # an explicit empty value forgets the key


async def _watch_store(ls: KsearchServer, every_s: float = 2.0) -> None:
    """Results written by other processes (the CLI in a terminal, a worker left from an earlier session)
    refresh the lenses and hints too."""
    while True:
        await asyncio.sleep(every_s)
        try:
            if ls.results.store_changed(ls.store):
                ls.results_changed()
        except Exception:  # noqa: BLE001 - a busy or moved store: try again later
            log.debug("store check failed", exc_info=True)


class ClientLog(logging.Handler):
    """The server's log, sent to the editor as `window/logMessage` at its own level (the VS Code output channel
    tags each line info/warning/error by it; stderr would make every line an error). Records from other threads
    are handed to the event loop first; secrets are redacted by the server's filter."""

    LEVELS = ((logging.ERROR, types.MessageType.Error), (logging.WARNING, types.MessageType.Warning),
              (logging.INFO, types.MessageType.Info))
    # pygls' notes about cancel notifications for requests that already ended are not the user's concern
    QUIET = ("Cancel notification for unknown message id", "cancel", "Ignoring notification for unknown method")

    def __init__(self, ls: KsearchServer):
        super().__init__(logging.INFO)
        self.ls = ls
        self.addFilter(ls.redactor)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            if record.name.startswith("pygls") and record.levelno < logging.ERROR and \
                    any(q.lower() in msg.lower() for q in self.QUIET):
                return
            kind = next(t for lvl, t in self.LEVELS if record.levelno >= lvl) if record.levelno >= logging.INFO \
                else types.MessageType.Log
            params = types.LogMessageParams(type=kind, message=msg)
            loop = getattr(self.ls, "loop", None) or asyncio.get_event_loop()
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                self.ls.window_log_message(params)
            else:
                loop.call_soon_threadsafe(self.ls.window_log_message, params)
        except Exception:  # noqa: BLE001 - logging must never break the server
            pass


def attach_client_log(ls: KsearchServer) -> None:
    handler = ClientLog(ls)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    for name, level in (("ksearch_server", logging.INFO), ("ksearch_engine", logging.INFO), ("pygls", logging.WARNING)):
        lg = logging.getLogger(name)
        lg.setLevel(level)
        lg.addHandler(handler)
        lg.propagate = False        # not to stderr as well (the client would show those lines as errors)


def create_server() -> KsearchServer:
    ls = KsearchServer()
    for module in (documents, config, commands, code_actions, code_lens, inlay_hints, hover, results):
        module.register(ls)
    ls.watch_mode = "none"
    ls.watch_stop = None

    @ls.feature(types.INITIALIZE)
    @guarded(ls, "Starting ksearch")
    def initialize(params: types.InitializeParams) -> None:
        root = ls.workspace.root_path
        if not root and params.workspace_folders:
            root = ls.path_of(params.workspace_folders[0].uri)
        ls.root = root
        enc = ls.workspace.position_encoding
        ls.index.encoding = str(getattr(enc, "value", enc) or "utf-16")
        opts = params.initialization_options if isinstance(params.initialization_options, dict) else {}
        _set_secrets(ls, opts)
        given = opts.get("clientCommands")
        ls.client_commands = {c for c in given if isinstance(c, str)} if isinstance(given, list) else set()
        section = opts.get("settings", {}).get("ksearch") if isinstance(opts.get("settings"), dict) else opts.get("ksearch")
        if isinstance(section, dict):
            config._apply(ls, section)

    @ls.feature(types.INITIALIZED)
    @guarded(ls, "Starting ksearch")
    async def initialized(params: types.InitializedParams) -> None:
        attach_client_log(ls)
        log.info("ksearch-lsp started: store %s, backend %s, proposer %s, %d evaluations per search",
                 ls.store_path(), ls.settings.backend_request or "best present", ls.settings.proposer,
                 ls.settings.evaluations)
        try:
            await config.load_settings(ls)
        finally:
            ls.settings_loaded.set()
        try:
            ls.store    # opens it; runs left 'running' by a dead worker become 'failed'
            ls.jobs.adopt_running()      # workers still running from an earlier session: follow them
        except Exception as e:  # noqa: BLE001
            ls.error(f"cannot open the results store {ls.store_path()}: {e}. Set ksearch.storePath to a "
                     f"writable location.")
        await documents.start_watching(ls)
        asyncio.ensure_future(guarded(ls, "Scanning the workspace for kernels")(documents.scan_workspace)(ls))
        asyncio.ensure_future(_watch_store(ls))

    @ls.feature(types.SHUTDOWN)
    def shutdown(params: None) -> None:
        ls.jobs.shutdown()
        # pygls cancels pending requests while iterating over them, and a cancelled executeCommand
        # removes itself from that dict at once (RuntimeError): cancel them here, over a copy.
        current = ls.protocol.msg_id
        for msg_id, fut in list(ls.protocol._request_futures.items()):
            if msg_id != current and not fut.done():
                fut.cancel()
        if ls.watch_stop is not None:
            ls.watch_stop.set()

    @ls.feature("ksearch/secret")
    def secret(params) -> None:
        _set_secrets(ls, params)

    return ls
