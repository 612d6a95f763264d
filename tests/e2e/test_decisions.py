"""Decisions on a finished port (made by an earlier server process, so every test here also shows that
results survive a restart): Accept is refused once the kernel's document changed and offers a re-run,
Reject records the decision and removes the lenses, an edit the editor refuses leaves nothing recorded."""
from __future__ import annotations

import os

import pytest_asyncio
from lsprotocol import types

from ksearch_engine.store import Store

from .conftest import Ported, start_editor, stop_editor
from .test_port_flow import KERNEL, doc, execute, kernel_line, lens_titles


def decisions(p: Ported) -> list[str]:
    store = Store(p.db)
    try:
        return [d["decision"] for d in store.decisions(p.run_id)]
    finally:
        store.close()


@pytest_asyncio.fixture
async def editor(ported: Ported):
    ed = await start_editor(ported.root, "vscode")
    yield ed
    await stop_editor(ed)


async def test_results_survive_a_restart(editor, ported: Ported):
    source = ported.root / "softmax.cu"
    uri = editor.open(source)
    assert {"Accept", "Reject"} <= set(await lens_titles(editor, uri))    # still waiting for a decision
    payload = await editor.client.protocol.send_request_async(
        "ksearch/candidate", {"runId": ported.run_id, "candidateId": ported.candidate_id})
    assert "def kernel(" in payload.candidate and payload.original == ""
    hints = await editor.client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc(uri), range=types.Range(start=types.Position(line=0, character=0),
                                                  end=types.Position(line=100, character=0))))
    assert [(h.position.line, h.label) for h in hints] == [(kernel_line(source), "✓ verified (sim) (not accepted)")]
    hover = await editor.client.text_document_hover_async(types.HoverParams(
        text_document=doc(uri), position=types.Position(line=kernel_line(source), character=20)))
    assert ported.run_id in hover.contents.value


async def test_a_run_whose_worker_died_becomes_failed(ported: Ported):
    store = Store(ported.db)
    orphan = store.create_run("optimize", file=str(ported.root / "softmax.cu"), kernel=KERNEL, status="running")
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    store.update_run(orphan, worker_pid=dead)
    ed = await start_editor(ported.root, "vscode")
    try:
        await ed.wait_for(lambda: store.run(orphan)["status"] == "failed", timeout=10, what="orphan marked failed")
        assert "re-run" in store.run(orphan)["message"]
        assert store.run(ported.run_id)["status"] == "done"
    finally:
        store.close()
        await stop_editor(ed)


async def test_accept_after_the_document_changed_is_refused(editor, ported: Ported):
    source = ported.root / "softmax.cu"
    uri = editor.open(source)
    edited = source.read_text() + "\n// tuned by hand meanwhile\n"
    editor.change(uri, edited)
    source.write_text(edited)              # ... and saved
    editor.client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=doc(uri)))

    editor.message_choice = "Re-run"
    answer = await execute(editor, types.Command(title="Accept", command="ksearch.accept",
                                                 arguments=[ported.run_id, ported.candidate_id]))
    assert answer["applied"] is False and "changed" in answer["reason"]
    assert not (ported.root / "softmax_mlx.py").exists()
    assert decisions(ported) == []
    asked = await editor.wait_for(lambda: editor.message_requests, what="the re-run question")
    assert "Re-run" in [a.title for a in asked[0].actions] and "softmax.cu" in asked[0].message

    # The user chose Re-run: a new port of the same kernel starts (from the saved version); stop it there.
    store = Store(ported.db)
    rerun = await editor.wait_for(lambda: [r for r in store.runs(limit=5) if r["id"] != ported.run_id],
                                  what="the re-run")
    assert rerun[0]["kind"] == "port" and rerun[0]["kernel"] == KERNEL and rerun[0]["doc_version"] == 2
    await execute(editor, types.Command(title="Cancel", command="ksearch.cancel", arguments=[rerun[0]["id"]]))
    await editor.wait_for(lambda: store.run(rerun[0]["id"])["status"] == "cancelled", what="re-run cancelled")
    store.close()


async def test_reject_removes_the_offer(editor, ported: Ported):
    uri = editor.open(ported.root / "softmax.cu")
    assert "Accept" in await lens_titles(editor, uri)
    rejected = await execute(editor, types.Command(title="Reject", command="ksearch.reject",
                                                   arguments=[ported.run_id, ported.candidate_id]))
    assert rejected["rejected"] is True
    titles = await lens_titles(editor, uri)
    assert "Accept" not in titles and "Reject" not in titles and "Port to MLX" in titles
    assert decisions(ported) == ["rejected"]
    assert not (ported.root / "softmax_mlx.py").exists()
    hints = await editor.client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc(uri), range=types.Range(start=types.Position(line=0, character=0),
                                                  end=types.Position(line=100, character=0))))
    assert not hints


async def test_an_edit_the_editor_refuses_is_not_recorded(editor, ported: Ported):
    uri = editor.open(ported.root / "softmax.cu")
    # the module is open in the editor (a module the editor does not hold is written by the server itself), so
    # Accept goes through the editor's workspace edit, which it refuses here
    module = ported.root / "softmax_mlx.py"
    module.write_text("# an older port\n")
    from ksearch_engine.store import Store
    store = Store(ported.db)
    store.add_candidate(ported.run_id, "# an older port\n", status="failed")   # known to ksearch: not hand-edited
    store.close()
    editor.open(module, "python")
    editor.apply_result = False
    answer = await execute(editor, types.Command(title="Accept", command="ksearch.accept",
                                                 arguments=[ported.run_id, ported.candidate_id]))
    assert answer["applied"] is False
    assert decisions(ported) == []
    err = await editor.wait_for(lambda: [m for m in editor.client.messages if "did not apply" in m.message],
                                what="the error message")
    assert "softmax_mlx.py" in err[0].message and "Traceback" not in err[0].message
    assert "Accept" in await lens_titles(editor, uri)
