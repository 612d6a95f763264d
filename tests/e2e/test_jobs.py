"""Jobs: cancelling a running Optimize (three ways), the API key reaching only the worker's environment,
settings changes reaching the next job, and results surviving a server restart."""
from __future__ import annotations

import asyncio
import time
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from lsprotocol import types

from ksearch_engine.store import Store

from .conftest import EXAMPLES, Editor, start_editor, stop_editor
from .test_port_flow import KERNEL, execute, lens_titles

SECRET = "test-gemini-key-3141"


def store_of(root: Path) -> Store:
    return Store(root / ".ksearch" / "ksearch.db")


# Jobs these tests cancel, kill or queue behind must outlast the test's steps: on mlx-cpu the offline search on
# softmax runs out of plans in ~7 s (once faster than a Cancel); on the simulator it takes ~45 s.
LONG_BACKEND = "sim"


async def wait_running(editor: Editor, root: Path) -> dict:
    store = store_of(root)

    def running():
        rows = [r for r in store.runs(limit=5) if r["status"] == "running" and r["worker_pid"]]
        return rows[0] if rows else None
    return await editor.wait_for(running, timeout=60, what="a running worker")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("how", ["cancelRequest", "progress", "command"])
async def test_cancel_a_running_optimize(workspace: Path, how: str):
    ed = await start_editor(workspace, "vscode", settings={"budget": {"evaluations": 500}, "backend": LONG_BACKEND})
    try:
        uri = ed.open(workspace / "softmax.cu")
        titles = await lens_titles(ed, uri)
        assert "Optimize kernel" in titles, titles         # softmax is a family the engine knows
        params = types.ExecuteCommandParams(command="ksearch.optimize", arguments=[uri, KERNEL])
        fut = ed.client.protocol.send_request(types.WORKSPACE_EXECUTE_COMMAND, params, msg_id="optimize-1")
        run = await wait_running(ed, workspace)
        assert alive(run["worker_pid"])
        if how == "cancelRequest":
            ed.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="optimize-1"))
        elif how == "progress":
            token = f"ksearch-{run['id']}"
            await ed.wait_for(lambda: ed.client.progress_reports.get(token), what="progress begin")
            ed.client.protocol.notify(types.WINDOW_WORK_DONE_PROGRESS_CANCEL,
                                      types.WorkDoneProgressCancelParams(token=token))
        else:
            assert (await execute(ed, types.Command(title="Cancel", command="ksearch.cancel",
                                                    arguments=[run["id"]])))["cancelled"] is True
        store = store_of(workspace)
        await ed.wait_for(lambda: store.run(run["id"])["status"] == "cancelled", timeout=30, what="status cancelled")
        await ed.wait_for(lambda: not alive(run["worker_pid"]), timeout=15, what="the worker to exit")
        reports = await ed.wait_for(lambda: [r for r in ed.client.progress_reports.get(f"ksearch-{run['id']}", [])
                                             if r.kind == "end"], what="progress end")
        assert "cancel" in reports[-1].message
        if how == "cancelRequest":
            with pytest.raises(Exception, match="cancel"):
                await asyncio.wrap_future(fut)
        else:
            assert (await asyncio.wrap_future(fut))["status"] == "cancelled"
        assert store.integrity() == "ok"
    finally:
        await stop_editor(ed)


@pytest.mark.parametrize("via", ["initializationOptions", "ksearch/secret"])
async def test_api_key_only_in_the_worker_environment(workspace: Path, via: str):
    settings = {"budget": {"evaluations": 500}, "backend": LONG_BACKEND}
    init = {"geminiApiKey": SECRET} if via == "initializationOptions" else {"geminiApiKey": "an-older-key"}
    log = workspace.parent / "server.log"
    ed = await start_editor(workspace, "vscode", settings=settings, init_options=init,
                            server_args=["--log-file", str(log), "--log-level", "DEBUG"])
    try:
        if via == "ksearch/secret":
            ed.client.protocol.notify("ksearch/secret", {"geminiApiKey": SECRET})
        uri = ed.open(workspace / "softmax.cu")
        params = types.ExecuteCommandParams(command="ksearch.optimize", arguments=[uri, KERNEL])
        ed.client.protocol.send_request(types.WORKSPACE_EXECUTE_COMMAND, params)
        run = await wait_running(ed, workspace)
        env = Path(f"/proc/{run['worker_pid']}/environ").read_bytes().split(b"\0")
        assert f"GEMINI_API_KEY={SECRET}".encode() in env
        request_files = list((workspace / ".ksearch" / "requests").glob("*.json"))
        assert request_files and all(SECRET not in f.read_text() for f in request_files)
        assert SECRET not in json.dumps(store_of(workspace).run(run["id"])["config"])
        assert not [m for m in ed.client.log_messages + ed.client.messages if SECRET in m.message]
        await execute(ed, types.Command(title="Cancel", command="ksearch.cancel", arguments=[run["id"]]))
    finally:
        await stop_editor(ed)
    logged = log.read_text()
    assert "geminiApiKey" in logged          # the messages carrying it were logged, masked
    assert SECRET not in logged and "an-older-key" not in logged


async def test_jobs_queue_beyond_the_concurrency_limit(workspace: Path):
    shutil.copy(EXAMPLES / "rmsnorm" / "rmsnorm.cu", workspace / "rmsnorm.cu")
    ed = await start_editor(workspace, "vscode", settings={"budget": {"evaluations": 500}, "backend": LONG_BACKEND,
                                                            "concurrency": 1})
    try:
        soft = ed.open(workspace / "softmax.cu")
        rms = ed.open(workspace / "rmsnorm.cu")
        rms_kernel = next(line.split("(")[0].split()[-1] for line in (workspace / "rmsnorm.cu").read_text().splitlines()
                          if line.startswith("__global__"))
        assert "Optimize kernel" in await lens_titles(ed, rms)
        for uri, kernel in ((soft, KERNEL), (rms, rms_kernel)):
            ed.client.protocol.send_request(types.WORKSPACE_EXECUTE_COMMAND, types.ExecuteCommandParams(
                command="ksearch.optimize", arguments=[uri, kernel]))
        first = await wait_running(ed, workspace)
        store = store_of(workspace)
        queued = await ed.wait_for(lambda: [r for r in store.runs(limit=5) if r["status"] == "queued"], what="a queued run")
        assert queued[0]["kernel"] == rms_kernel and not queued[0]["worker_pid"]
        assert any(j.running == 1 and j.queued == 1 for j in ed.jobs)          # ksearch/jobs for the status bar
        assert any(t.endswith("queued") for t in await lens_titles(ed, rms))
        await execute(ed, types.Command(title="Cancel", command="ksearch.cancel", arguments=[queued[0]["id"]]))
        assert store.run(queued[0]["id"])["status"] == "cancelled" and not store.run(queued[0]["id"])["worker_pid"]
        await execute(ed, types.Command(title="Cancel", command="ksearch.cancel", arguments=[first["id"]]))
        await ed.wait_for(lambda: store.run(first["id"])["status"] == "cancelled", what="the first run cancelled")
        await ed.wait_for(lambda: ed.jobs and ed.jobs[-1].running == 0 and ed.jobs[-1].queued == 0,
                          what="no jobs left")
    finally:
        await stop_editor(ed)


async def test_settings_change_reaches_the_next_job(workspace: Path):
    ed = await start_editor(workspace, "neovim", settings={"budget": {"evaluations": 3}, "backend": "sim"})
    try:
        uri = ed.open(workspace / "softmax.cu")
        ed.client.set_configuration({"ksearch": {"budget": {"evaluations": 321}, "backend": "mlx-cpu",
                                                 "proposer": "offline", "concurrency": 2}})
        ed.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await asyncio.sleep(0.3)
        params = types.ExecuteCommandParams(command="ksearch.optimize", arguments=[uri, KERNEL])
        ed.client.protocol.send_request(types.WORKSPACE_EXECUTE_COMMAND, params)
        run = await wait_running(ed, workspace)
        assert run["config"]["max_evals"] == 321 and run["config"]["backend"] == "mlx-cpu"
        await execute(ed, types.Command(title="Cancel", command="ksearch.cancel", arguments=[run["id"]]))
    finally:
        await stop_editor(ed)


async def test_a_search_started_elsewhere_shows_and_can_be_cancelled(workspace: Path):
    """`ksearch optimize` in a terminal writes the same store: the editor shows the run and can stop it."""
    # saxpy takes every edit the offline proposer has (block size, grid-stride, float4, restrict): many
    # evaluations on the simulator, so the run is still going when the Cancel arrives
    shutil.copy(Path(__file__).parents[1] / "data" / "optimize" / "saxpy.cu", workspace / "saxpy.cu")
    ed = await start_editor(workspace, "vscode")
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ksearch_engine.cli", "optimize", "saxpy.cu", "--kernel", "saxpy", "--budget", "500",
        "--backend", "sim", cwd=workspace, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "KSEARCH_STORE"})
    try:
        uri = ed.open(workspace / "saxpy.cu")
        run = await wait_running(ed, workspace)
        # cancelled at once: also while the run still ports and captures (a cancel there was once swallowed by the
        # port's per-kernel guards and the run went on to 'done')
        titles: list[str] = []
        deadline = time.monotonic() + 120      # a loaded machine: the lens follows the store when it can
        while time.monotonic() < deadline:
            titles = await lens_titles(ed, uri)
            if any("another session" in t for t in titles):
                break
            await asyncio.sleep(0.1)
        assert any("another session" in t for t in titles), titles
        answer = await execute(ed, types.Command(title="Cancel", command="ksearch.cancel", arguments=[run["id"]]))
        assert answer["cancelled"] is True
        await asyncio.wait_for(cli.wait(), 180)
        store = store_of(workspace)
        deadline = time.monotonic() + 60        # whoever stopped it records it: the run, or the server that killed it
        while store.run(run["id"])["status"] == "running" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert store.run(run["id"])["status"] == "cancelled"
        deadline = time.monotonic() + 120        # the store changed under the server: lenses follow
        while time.monotonic() < deadline:
            titles = await lens_titles(ed, uri)
            if not any("another session" in t for t in titles):
                break
            await asyncio.sleep(0.1)
        assert "Optimize kernel" in titles and not any("another session" in t for t in titles)
    finally:
        if cli.returncode is None:
            cli.kill()
        await stop_editor(ed)


async def test_a_running_job_survives_a_server_crash(workspace: Path):
    """The server dies mid-search; its worker goes on, and the next server follows it and can cancel it."""
    ed = await start_editor(workspace, "vscode", settings={"budget": {"evaluations": 500}, "backend": LONG_BACKEND})
    try:
        uri = ed.open(workspace / "softmax.cu")
        ed.client.protocol.send_request(types.WORKSPACE_EXECUTE_COMMAND, types.ExecuteCommandParams(
            command="ksearch.optimize", arguments=[uri, KERNEL]))
        run = await wait_running(ed, workspace)
        ed.client._server.kill()                 # no shutdown, no exit: a crash
        await ed.client._server.wait()
    finally:
        await ed.client.stop()
    await asyncio.sleep(1.0)
    assert alive(run["worker_pid"]), "the worker died with the server"
    store = store_of(workspace)
    assert store.run(run["id"])["status"] == "running"

    ed = await start_editor(workspace, "vscode")
    try:
        uri = ed.open(workspace / "softmax.cu")
        token = f"ksearch-{run['id']}"
        await ed.wait_for(lambda: ed.client.progress_reports.get(token), what="progress of the adopted job")
        titles = await lens_titles(ed, uri)
        assert any(t.startswith("⟳ Optimize softmax_kernel") for t in titles), titles
        running = next(t for t in titles if t.startswith("⟳"))
        # the lens is a glance: stage name, evaluations, best time; the plan text goes to the progress report
        assert "evals" in running and len(running) < 100 and "approach" not in running, running
        await execute(ed, types.Command(title="Cancel", command="ksearch.cancel", arguments=[run["id"]]))
        await ed.wait_for(lambda: store.run(run["id"])["status"] == "cancelled", timeout=30, what="cancelled")
        await ed.wait_for(lambda: not alive(run["worker_pid"]), timeout=15, what="the worker to exit")
        ends = await ed.wait_for(lambda: [r for r in ed.client.progress_reports[token] if r.kind == "end"],
                                 what="progress end")
        assert "cancel" in ends[-1].message
    finally:
        store.close()
        await stop_editor(ed)
