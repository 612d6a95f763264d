"""Safe start-up (issue 17): a cloned workspace holding its own `ksearch_server/` and `ksearch_engine/` (which
would write a marker file and call a local listener) and a `.vscode/settings.json` that points
`ksearch.openaiBaseUrl` at that listener runs none of its code and reaches no endpoint.

The server is started exactly as the extension starts it (editor-client/src/interpreter.ts `serverLaunch`:
`python -P -m ksearch_server`, PYTHONSAFEPATH=1, the home folder as working directory) with the workspace as
rootUri, and the real pytest-lsp client runs a Port job from it (the job's worker is a process of its own).
The client answers `workspace/configuration` as VS Code does in Restricted Mode: the workspace's values of
restricted settings are not applied (the extension's package.json lists them; checked here too).
Guard off: the same `python -m` started from the workspace without -P runs the workspace's code.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.uris import from_fs_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the e2e harness's client
from e2e.conftest import EXAMPLES, Editor, capabilities, make_client  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

HOSTILE = '''
import socket
with open({marker!r}, "a") as f:
    f.write("ran " + __name__ + " from " + __file__ + "\\n")
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"hostile code ran")
except OSError:
    pass
'''


class Listener:
    """A TCP listener on 127.0.0.1 that counts connections and keeps what arrives."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections, self.got, self.stop = 0, b"", False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(2)
                try:
                    self.got += conn.recv(4096)
                except OSError:
                    pass

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture
def hostile_workspace(tmp_path, listener):
    root = tmp_path / "cloned"
    root.mkdir()
    marker = tmp_path / "hostile-code-ran.txt"
    code = HOSTILE.format(marker=str(marker), port=listener.port)
    for pkg in ("ksearch_server", "ksearch_engine"):
        (root / pkg).mkdir()
        (root / pkg / "__init__.py").write_text(code)
        (root / pkg / "__main__.py").write_text(code)
    (root / "ksearch_engine" / "worker.py").write_text(code)
    (root / ".vscode").mkdir()
    (root / ".vscode" / "settings.json").write_text(json.dumps({
        "ksearch.openaiBaseUrl": f"http://127.0.0.1:{listener.port}/v1", "ksearch.proposer": "openai",
        "ksearch.model": "exfiltrate", "ksearch.interpreter": str(root / "python")}))
    (root / "softmax.cu").write_text((EXAMPLES / "softmax" / "softmax.cu").read_text())
    return root, marker


def test_the_extension_marks_every_program_endpoint_and_model_setting_restricted():
    pkg = json.loads((REPO / "editor-client" / "package.json").read_text())
    restricted = set(pkg["capabilities"]["untrustedWorkspaces"]["restrictedConfigurations"])
    assert {"ksearch.interpreter", "ksearch.openaiBaseUrl", "ksearch.proposer", "ksearch.model",
            "ksearch.cluster", "ksearch.storePath"} <= restricted, restricted


async def test_cloned_workspace_runs_none_of_its_code_and_reaches_no_endpoint(hostile_workspace, listener):
    root, marker = hostile_workspace
    home = Path.home()
    assert not str(home.resolve()).startswith(str(root.resolve()))
    env = {k: v for k, v in os.environ.items() if k not in ("KSEARCH_STORE", "PYTHONPATH")}
    env.update(PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1", OPENAI_API_KEY="ksearch-test-openai-key")
    holder: dict = {}
    client = make_client(holder)
    # what serverLaunch() gives the language client: the interpreter, ["-P", "-m", "ksearch_server"], cwd home
    await client.start_io(sys.executable, "-P", "-m", "ksearch_server", env=env, cwd=str(home))
    editor = Editor(client, root)
    holder["editor"] = editor
    # Restricted Mode: the workspace's values of restricted settings are not applied; the user's are
    client.set_configuration({"ksearch": {"backend": "sim", "budget": {"evaluations": 2}}})
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=capabilities("vscode"), root_uri=from_fs_path(str(root)),
            workspace_folders=[types.WorkspaceFolder(uri=from_fs_path(str(root)), name="cloned")]))
        uri = editor.open(root / "softmax.cu")
        done = await asyncio.wait_for(client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="ksearch.port", arguments=[uri, "softmax_kernel"])), 600)
        assert done["status"] == "done", done
    finally:
        try:
            await asyncio.wait_for(client.shutdown_session(), 30)
        finally:
            await client.stop()
    await asyncio.sleep(0.5)
    assert not marker.exists(), f"the workspace's code ran: {marker.read_text()}"
    assert listener.connections == 0 and listener.got == b"", (listener.connections, listener.got)


@pytest.mark.parametrize("module", ["ksearch_server", "ksearch_engine.worker"])
def test_guard_off_started_from_the_workspace_without_safe_path_the_workspace_code_runs(hostile_workspace, listener,
                                                                                           module):
    """Shows -P / PYTHONSAFEPATH and a working directory outside the workspace are what protect: started the
    unsafe way (the workspace as working directory, no -P) the cloned repository's package runs instead."""
    root, marker = hostile_workspace
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    subprocess.run([sys.executable, "-m", module], cwd=root, env=env, stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=120)
    assert marker.exists() and "ran" in marker.read_text()
    for _ in range(50):
        if listener.got:
            break
        threading.Event().wait(0.1)
    assert b"hostile code ran" in listener.got
