"""Decisions on a result: Accept is refused once the kernel's document changed (and offers a re-run),
Reject records the decision and removes the lenses, an editor that refuses the edit leaves nothing recorded."""
from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from ksearch_engine.store import Store

from .conftest import Editor
from .test_port_flow import KERNEL, doc, execute, lens_titles


async def port(editor: Editor, uri: str) -> dict:
    done = await execute(editor, types.Command(title="Port", command="ksearch.port", arguments=[uri, KERNEL]))
    assert done["status"] == "done", done["message"]
    return done


def decisions(root: Path, run_id: str) -> list[str]:
    return [d["decision"] for d in Store(root / ".ksearch" / "ksearch.db").decisions(run_id)]


async def test_accept_after_the_document_changed_is_refused(editor: Editor, workspace: Path):
    source = workspace / "softmax.cu"
    uri = editor.open(source)
    done = await port(editor, uri)
    edited = source.read_text() + "\n// tuned by hand meanwhile\n"
    editor.change(uri, edited)
    source.write_text(edited)              # ... and saved
    editor.client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=doc(uri)))

    editor.message_choice = "Re-run"
    answer = await execute(editor, types.Command(title="Accept", command="ksearch.accept",
                                                 arguments=[done["runId"], done["candidateId"]]))
    assert answer["applied"] is False and "changed" in answer["reason"]
    assert not (workspace / "softmax_mlx.py").exists()
    assert decisions(workspace, done["runId"]) == []
    asked = await editor.wait_for(lambda: editor.message_requests, what="the re-run question")
    assert "Re-run" in [a.title for a in asked[0].actions] and "softmax.cu" in asked[0].message

    # The user chose Re-run: a new port of the same kernel starts from the current version.
    await editor.wait_for(lambda: len(editor.show_diff) >= 2, timeout=60, what="the re-run's result")
    rerun = {"runId": editor.show_diff[-1].runId, "candidateId": editor.show_diff[-1].candidateId}
    assert rerun["runId"] != done["runId"]
    accepted = await execute(editor, types.Command(title="Accept", command="ksearch.accept",
                                                   arguments=[rerun["runId"], rerun["candidateId"]]))
    assert accepted["applied"] is True and (workspace / "softmax_mlx.py").exists()


async def test_reject_removes_the_offer(editor: Editor, workspace: Path):
    uri = editor.open(workspace / "softmax.cu")
    done = await port(editor, uri)
    assert "Accept" in await lens_titles(editor, uri)
    rejected = await execute(editor, types.Command(title="Reject", command="ksearch.reject",
                                                   arguments=[done["runId"], done["candidateId"]]))
    assert rejected["rejected"] is True
    titles = await lens_titles(editor, uri)
    assert "Accept" not in titles and "Reject" not in titles and "Port to MLX" in titles
    assert decisions(workspace, done["runId"]) == ["rejected"]
    assert not (workspace / "softmax_mlx.py").exists()
    hints = await editor.client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc(uri), range=types.Range(start=types.Position(line=0, character=0),
                                                  end=types.Position(line=100, character=0))))
    assert not hints


async def test_an_edit_the_editor_refuses_is_not_recorded(editor: Editor, workspace: Path):
    uri = editor.open(workspace / "softmax.cu")
    done = await port(editor, uri)
    editor.apply_result = False
    answer = await execute(editor, types.Command(title="Accept", command="ksearch.accept",
                                                 arguments=[done["runId"], done["candidateId"]]))
    assert answer["applied"] is False
    assert decisions(workspace, done["runId"]) == []
    err = await editor.wait_for(lambda: [m for m in editor.client.messages if "did not apply" in m.message],
                                what="the error message")
    assert "softmax_mlx.py" in err[0].message and "Traceback" not in err[0].message
    assert "Accept" in await lens_titles(editor, uri)
