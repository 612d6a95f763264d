"""Optimize kernel on softmax.cu with the offline proposer on mlx-cpu: one truth per kernel.

The editor offers exactly what the engine's rule offers (`Store.offers`, the same rule the CLI prints): a
candidate that beat the user's original on the same backend and workload, each source measured once. When one
did, its headline everywhere (lens, hint, diff title, toast) is the speedup over the original with the
workload named; when none did, the editor says so and there is nothing to accept. CPU timings are noisy, so
the test follows whichever outcome the run measured and checks that every surface agrees with it.
"""
from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types

from ksearch_engine.store import Store

from .conftest import start_editor, stop_editor
from .test_port_flow import KERNEL, doc, execute, kernel_line, lens_titles


async def test_optimize_offers_only_what_beat_the_original(workspace: Path):
    ed = await start_editor(workspace, "vscode", settings={"budget": {"evaluations": 4}, "backend": "mlx-cpu"})
    try:
        source = workspace / "softmax.cu"
        uri = ed.open(source)
        line = kernel_line(source)
        assert "Optimize kernel" in await lens_titles(ed, uri)
        done = await execute(ed, types.Command(title="Optimize", command="ksearch.optimize", arguments=[uri, KERNEL]))
        assert done["status"] == "done", done["message"]
        store = Store(workspace / ".ksearch" / "ksearch.db")
        run = store.run(done["runId"])
        cands = store.candidates(run.id)
        original = store.original(run.id)
        assert original is not None and original.timing, "the user's kernel is measured first"
        hashes = [c.hash for c in cands]
        assert len(hashes) == len(set(hashes)), "a source was measured twice"
        offers = store.offers(run.id)
        assert all(o.timing["median_ms"] < original.timing["median_ms"] for o in offers)
        titles = await lens_titles(ed, uri)
        hints = await ed.client.text_document_inlay_hint_async(types.InlayHintParams(
            text_document=doc(uri), range=types.Range(start=types.Position(line=0, character=0),
                                                      end=types.Position(line=100, character=0))))
        assert len(hints) == 1 and hints[0].position.line == line
        hover = (await ed.client.text_document_hover_async(types.HoverParams(
            text_document=doc(uri), position=types.Position(line=line, character=20)))).contents.value
        assert "| — |" not in hover and "1.00× (yours)" in hover and "@ " in hover
        assert f"{len(cands)} evals" in hover

        if not offers:
            # nothing beat the original: said everywhere, nothing to accept
            assert run.best_candidate in (None, original.id) or run.best_candidate == original.id
            said = await ed.wait_for(lambda: [m for m in ed.client.messages if "no candidate beat your kernel" in m.message],
                                     what="the no-improvement message")
            assert "nothing to accept" in said[0].message and "@ " in said[0].message
            assert not ed.show_diff
            assert "Accept" not in titles and any(t.startswith("No candidate beat your kernel (") for t in titles), titles
            assert hints[0].label == "no gain over your kernel"
            assert "nothing to accept" in hover
            faster = next((c for c in cands if c.status == "passed" and not c.is_original), None)
            if faster is not None:
                refused = await execute(ed, types.Command(title="Accept", command="ksearch.accept",
                                                          arguments=[run.id, faster.id]))
                assert refused is None or not refused.get("applied")
                assert not (workspace / "softmax_mlx.py").exists()
            shown = await execute(ed, types.Command(title="log", command="ksearch.showRun", arguments=[run.id]))
            assert shown["log"] and any("done" in line for line in shown["log"])
        else:
            first = offers[0]
            shown = await ed.wait_for(lambda: ed.show_diff, what="ksearch/showDiff")
            assert shown[-1].candidateId == first.id
            assert {"Accept", "Reject"} <= set(titles), titles
            head = next(t for t in titles if t.startswith("Show diff · "))
            assert re.match(r"Show diff · ✓ [\d.]+× vs original · [\d.]+ (ms|µs) @ \S+ · [\d.]+× vs mx\.softmax", head), head
            assert re.fullmatch(r"⏱ [\d.]+× vs original · [\d.]+ (ms|µs) @ \S+ \(not accepted\)", hints[0].label)
            payload = await ed.client.protocol.send_request_async(
                "ksearch/candidate", {"runId": run.id, "candidateId": first.id})
            assert "vs original" in payload.title and KERNEL in payload.title
            accepted = await execute(ed, types.Command(title="Accept", command="ksearch.accept",
                                                       arguments=[run.id, first.id]))
            assert accepted["applied"] is True and accepted["saved"] is True
            assert (workspace / "softmax_mlx.py").read_text() == payload.candidate
            assert [d.decision for d in store.decisions(run.id)] == ["accepted"]
        store.close()
    finally:
        await stop_editor(ed)
