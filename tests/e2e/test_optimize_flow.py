"""Optimize kernel on softmax.cu (a family the engine knows) with the offline proposer on mlx-cpu: timed results
appear as `⏱ … ms · …× vs mx.softmax · device (mlx-cpu)`, Next walks the candidates, Accept writes the module."""
from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types

from ksearch_engine.store import Store

from .conftest import start_editor, stop_editor
from .test_port_flow import KERNEL, doc, execute, kernel_line, lens_titles


async def test_optimize_then_next_then_accept(workspace: Path):
    ed = await start_editor(workspace, "vscode", settings={"budget": {"evaluations": 3}, "backend": "mlx-cpu"})
    try:
        source = workspace / "softmax.cu"
        uri = ed.open(source)
        line = kernel_line(source)
        assert "Optimize kernel" in await lens_titles(ed, uri)
        done = await execute(ed, types.Command(title="Optimize", command="ksearch.optimize", arguments=[uri, KERNEL]))
        assert done["status"] == "done", done["message"]
        store = Store(workspace / ".ksearch" / "ksearch.db")
        run = store.run(done["runId"])
        passing = [c for c in store.candidates(run["id"]) if c["status"] == "passed" and c["plan"] != "original"]
        assert len(passing) >= 2, "the offline search should find at least two passing variants"

        # First offered: the search's best, or (when none beat the original by its margin) the fastest variant.
        fastest = [c["id"] for c in store.ranked(run["id"]) if c["plan"] != "original"]
        first = run["best_candidate"] or fastest[0]
        shown = await ed.wait_for(lambda: ed.show_diff, what="ksearch/showDiff")
        assert shown[-1].candidateId == first
        titles = await lens_titles(ed, uri)
        assert {"Accept", "Reject", f"Next candidate (1/{len(passing)})"} <= set(titles), titles

        hints = await ed.client.text_document_inlay_hint_async(types.InlayHintParams(
            text_document=doc(uri), range=types.Range(start=types.Position(line=0, character=0),
                                                      end=types.Position(line=100, character=0))))
        assert len(hints) == 1 and hints[0].position.line == line
        assert re.fullmatch(r"⏱ [\d.]+ (ms|µs) · [\d.]+× vs mx\.softmax · .+ \(mlx-cpu\)", hints[0].label), hints[0].label

        hover = (await ed.client.text_document_hover_async(types.HoverParams(
            text_document=doc(uri), position=types.Position(line=line, character=20)))).contents.value
        assert "vs mx.softmax" in hover and "vs original" in hover and "(mlx-cpu)" in hover
        rows = [r for r in hover.splitlines() if r.startswith("| ") and "ms |" in r]
        assert len(rows) >= 3 and any("| original |" in r for r in rows)

        nxt = await execute(ed, types.Command(title="Next", command="ksearch.next", arguments=[run["id"]]))
        assert nxt["index"] == 1 and nxt["candidateId"] != first
        assert ed.show_diff[-1].candidateId == nxt["candidateId"]
        assert f"Next candidate (2/{len(passing)})" in await lens_titles(ed, uri)

        payload = await ed.client.protocol.send_request_async(
            "ksearch/candidate", {"runId": run["id"], "candidateId": nxt["candidateId"]})
        assert payload.uri.endswith("/softmax_mlx.py") and payload.original == ""
        assert payload.candidate == store.candidate(nxt["candidateId"])["source"]

        accepted = await execute(ed, types.Command(title="Accept", command="ksearch.accept",
                                                   arguments=[run["id"], nxt["candidateId"]]))
        assert accepted["applied"] is True
        assert (workspace / "softmax_mlx.py").read_text() == payload.candidate
        assert [d["decision"] for d in store.decisions(run["id"])] == ["accepted"]
        store.close()
    finally:
        await stop_editor(ed)
