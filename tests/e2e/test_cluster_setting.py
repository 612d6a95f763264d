"""The editor's `ksearch.cluster` setting reaches the search: with `local` (a one-node Ray started by the job) the
candidates are evaluated by Ray actors, and the inlay hint and the hover name the node each ran on. An invalid
value is refused with a message naming the setting, and the job runs on this machine."""
from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from lsprotocol import types

from ksearch_engine.store import Store

from .conftest import start_editor, stop_editor
from .test_port_flow import KERNEL, doc, execute, kernel_line

pytest.importorskip("ray")


async def test_optimize_on_a_local_ray_cluster_names_the_node(workspace: Path):
    ed = await start_editor(workspace, "vscode", settings={"budget": {"evaluations": 3}, "backend": "mlx-cpu",
                                                            "cluster": "local"})
    try:
        source = workspace / "softmax.cu"
        uri = ed.open(source)
        done = await execute(ed, types.Command(title="Optimize", command="ksearch.optimize", arguments=[uri, KERNEL]))
        assert done["status"] == "done", done["message"]
        store = Store(workspace / ".ksearch" / "ksearch.db")
        run = store.run(done["runId"])
        assert run["config"]["cluster"] == "local"
        cands = store.candidates(run["id"])
        assert cands and all((c["result"] or {}).get("sandbox", {}).get("node", {}).get("pool") == "ray" for c in cands)
        host = socket.gethostname()

        line = kernel_line(source)
        hints = await ed.client.text_document_inlay_hint_async(types.InlayHintParams(
            text_document=doc(uri), range=types.Range(start=types.Position(line=0, character=0),
                                                      end=types.Position(line=100, character=0))))
        # the hint is short (the headline vs the original, or that nothing beat it); the node is in the hover
        assert len(hints) == 1 and (hints[0].label == "no gain over your kernel"
                                    or re.match(r"⏱ [\d.]+× vs original · ", hints[0].label)), hints[0].label
        hover = (await ed.client.text_document_hover_async(types.HoverParams(
            text_document=doc(uri), position=types.Position(line=line, character=20)))).contents.value
        assert f"(mlx-cpu) @ {host}" in hover
        store.close()
    finally:
        await stop_editor(ed)


async def test_an_invalid_cluster_setting_is_named_and_ignored(workspace: Path):
    ed = await start_editor(workspace, "vscode", settings={"budget": {"evaluations": 2}, "backend": "mlx-cpu",
                                                            "cluster": "http://evil.example; rm -rf ~"})
    try:
        warned = await ed.wait_for(lambda: [m for m in ed.client.messages if "ksearch.cluster" in m.message],
                                   what="a warning naming ksearch.cluster")
        assert "ray://HOST:PORT" in warned[0].message
        uri = ed.open(workspace / "softmax.cu")
        done = await execute(ed, types.Command(title="Optimize", command="ksearch.optimize", arguments=[uri, KERNEL]))
        assert done["status"] == "done", done["message"]
        run = Store(workspace / ".ksearch" / "ksearch.db").run(done["runId"])
        assert run["config"]["cluster"] is None
    finally:
        await stop_editor(ed)
