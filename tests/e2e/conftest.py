"""End-to-end harness: the real `ksearch-lsp` over stdio, driven by pytest-lsp's client.

The client plays the editor: it applies `workspace/applyEdit` to the files on disk (and to the documents it
holds open, sending didChange like an editor would), answers `window/showMessageRequest`, and records the
server's custom notifications. Two client profiles: VS Code's and Neovim's capabilities.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Union

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities, make_test_lsp_client

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PROFILES = {"vscode": "visual-studio-code", "neovim": "neovim"}


def _code_action_hook(converter):
    """pytest-lsp's converter reads a CodeAction that carries a `command` as a plain Command; tell them apart."""
    def structure(obj: Any, _t) -> Union[types.Command, types.CodeAction]:
        if isinstance(obj, dict) and isinstance(obj.get("command"), str):
            return converter.structure(obj, types.Command)
        return converter.structure(obj, types.CodeAction)
    converter.register_structure_hook(Union[types.Command, types.CodeAction], structure)


def _apply_text_edits(text: str, edits: list[types.TextEdit]) -> str:
    lines = text.split("\n")

    def offset(p: types.Position) -> int:
        return sum(len(line) + 1 for line in lines[:p.line]) + p.character

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[:offset(e.range.start)] + e.new_text + text[offset(e.range.end):]
        lines = text.split("\n")
    return text


class Editor:
    """What the test client holds: open documents and everything the server told it."""

    def __init__(self, client: LanguageClient, root: Path):
        self.client = client
        self.root = root
        self.docs: dict[str, tuple[str, int]] = {}       # uri -> (text, version)
        self.applied: list[types.WorkspaceEdit] = []
        self.apply_result = True
        self.show_diff: list[Any] = []
        self.jobs: list[Any] = []
        self.message_requests: list[types.ShowMessageRequestParams] = []
        self.message_choice: str | None = None
        self.registrations: list[types.Registration] = []
        self.refreshes = {"codeLens": 0, "inlayHint": 0}

    # -- documents -----------------------------------------------------------------------------------
    def open(self, path: Path, language: str = "cuda-cpp") -> str:
        uri = from_fs_path(str(path))
        text = path.read_text()
        self.docs[uri] = (text, 1)
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)))
        return uri

    def change(self, uri: str, text: str) -> int:
        version = self.docs[uri][1] + 1
        self.docs[uri] = (text, version)
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
        return version

    # -- what the editor does with an applyEdit ------------------------------------------------------
    def apply(self, edit: types.WorkspaceEdit) -> types.ApplyWorkspaceEditResult:
        self.applied.append(edit)
        if not self.apply_result:
            return types.ApplyWorkspaceEditResult(applied=False, failure_reason="the user closed the file")
        for change in edit.document_changes or []:
            if isinstance(change, types.CreateFile):
                p = Path(to_fs_path(change.uri))
                if p.exists() and not (change.options and (change.options.overwrite or change.options.ignore_if_exists)):
                    return types.ApplyWorkspaceEditResult(applied=False, failure_reason=f"{p} exists")
                if not p.exists() or (change.options and change.options.overwrite):
                    p.write_text("")
            elif isinstance(change, types.TextDocumentEdit):
                uri = change.text_document.uri
                if uri in self.docs:
                    text, version = self.docs[uri]
                    if change.text_document.version is not None and change.text_document.version != version:
                        return types.ApplyWorkspaceEditResult(applied=False, failure_reason="version mismatch")
                    self.change(uri, _apply_text_edits(text, change.edits))
                else:
                    p = Path(to_fs_path(uri))
                    p.write_text(_apply_text_edits(p.read_text() if p.exists() else "", change.edits))
        return types.ApplyWorkspaceEditResult(applied=True)

    # -- waiting -------------------------------------------------------------------------------------
    async def wait_for(self, predicate, timeout: float = 60.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    def progress(self) -> dict:
        return {k: v for k, v in self.client.progress_reports.items() if str(k).startswith("ksearch-")}


def make_client(holder: dict) -> LanguageClient:
    client = make_test_lsp_client()
    _code_action_hook(client.protocol._converter)

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams):
        return holder["editor"].apply(params.edit)

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    def show_message_request(params: types.ShowMessageRequestParams):
        ed = holder["editor"]
        ed.message_requests.append(params)
        if ed.message_choice is None:
            return None
        return next((a for a in params.actions or [] if a.title == ed.message_choice), None)

    @client.feature("ksearch/showDiff")
    def show_diff(params):
        holder["editor"].show_diff.append(params)

    @client.feature("ksearch/jobs")
    def jobs(params):
        holder["editor"].jobs.append(params)

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register_capability(params: types.RegistrationParams):
        holder["editor"].registrations.extend(params.registrations)

    @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def code_lens_refresh(params):
        holder["editor"].refreshes["codeLens"] += 1

    @client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)
    def inlay_refresh(params):
        holder["editor"].refreshes["inlayHint"] += 1

    return client


def capabilities(profile: str) -> types.ClientCapabilities:
    caps = client_capabilities(PROFILES[profile])
    if profile == "vscode":
        # The stored VS Code profile (1.65) predates inlay-hint refresh; VS Code 1.139 offers it.
        caps.workspace.inlay_hint = types.InlayHintWorkspaceClientCapabilities(refresh_support=True)
    return caps


async def start_editor(root: Path, profile: str, settings: dict | None = None,
                       init_options: dict | None = None, server_args: list[str] | None = None) -> Editor:
    holder: dict = {}
    env = dict(os.environ)
    env.pop("KSEARCH_STORE", None)
    config = ClientServerConfig(server_command=[sys.executable, "-m", "ksearch_server", *(server_args or [])],
                                client_factory=lambda: make_client(holder), server_env=env)
    client = await config.start()
    editor = Editor(client, root)
    holder["editor"] = editor
    client.set_configuration({"ksearch": settings or {"backend": "sim", "budget": {"evaluations": 4}}})
    await client.initialize_session(types.InitializeParams(
        capabilities=capabilities(profile), root_uri=from_fs_path(str(root)), initialization_options=init_options,
        workspace_folders=[types.WorkspaceFolder(uri=from_fs_path(str(root)), name="ws")]))
    return editor


async def stop_editor(editor: Editor) -> None:
    try:
        await asyncio.wait_for(editor.client.shutdown_session(), 20)
    finally:
        await editor.client.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace holding a copy of the softmax example."""
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(EXAMPLES / "softmax" / "softmax.cu", root / "softmax.cu")
    return root


@pytest.fixture(params=["vscode", "neovim"])
def profile(request) -> str:
    return request.param


@pytest_asyncio.fixture
async def editor(workspace: Path, profile: str):
    ed = await start_editor(workspace, profile)
    yield ed
    await stop_editor(ed)


class Ported:
    """A workspace where the real server already ran Port to MLX on softmax_kernel (result not decided)."""

    def __init__(self, root: Path, run_id: str, candidate_id: str, snapshot: Path, source_text: str):
        self.root, self.run_id, self.candidate_id = root, run_id, candidate_id
        self.snapshot, self.source_text = snapshot, source_text

    @property
    def db(self) -> Path:
        return self.root / ".ksearch" / "ksearch.db"

    def restore(self) -> "Ported":
        # A new inode each time: SQLite shares locks and WAL index per inode within a process.
        for suffix in ("", "-wal", "-shm"):
            Path(str(self.db) + suffix).unlink(missing_ok=True)
        shutil.copy(self.snapshot, self.db)
        (self.root / "softmax_mlx.py").unlink(missing_ok=True)
        (self.root / "softmax.cu").write_text(self.source_text)
        return self


@pytest.fixture(scope="session")
def ported_once(tmp_path_factory) -> Ported:
    """One real port, shared: later tests restore its store instead of porting again (each port takes ~10 s)."""
    root = tmp_path_factory.mktemp("ported") / "ws"
    root.mkdir()
    shutil.copy(EXAMPLES / "softmax" / "softmax.cu", root / "softmax.cu")

    async def port() -> dict:
        ed = await start_editor(root, "vscode")
        try:
            uri = ed.open(root / "softmax.cu")
            return await ed.client.workspace_execute_command_async(types.ExecuteCommandParams(
                command="ksearch.port", arguments=[uri, "softmax_kernel"]))
        finally:
            await stop_editor(ed)

    done = asyncio.run(port())
    assert done["status"] == "done", done
    import sqlite3
    con = sqlite3.connect(root / ".ksearch" / "ksearch.db")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    snapshot = root.parent / "ksearch.snapshot.db"
    shutil.copy(root / ".ksearch" / "ksearch.db", snapshot)
    return Ported(root, done["runId"], done["candidateId"], snapshot, (root / "softmax.cu").read_text())


@pytest.fixture
def ported(ported_once: Ported) -> Ported:
    return ported_once.restore()
