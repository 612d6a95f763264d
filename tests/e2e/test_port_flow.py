"""The editor flow for a CUDA kernel, in VS Code's and Neovim's client profiles:
open softmax.cu → lens and code action → Port to MLX with progress → the diff content → Accept creates the
module → inlay hint and hover show the (simulator-verified, so untimed) result."""
from __future__ import annotations

import asyncio
from pathlib import Path

from lsprotocol import types

from .conftest import Editor

KERNEL = "softmax_kernel"


def doc(uri: str) -> types.TextDocumentIdentifier:
    return types.TextDocumentIdentifier(uri=uri)


def at(line: int, character: int = 0) -> types.Range:
    return types.Range(start=types.Position(line=line, character=character),
                       end=types.Position(line=line, character=character))


def kernel_line(path: Path, name: str = KERNEL) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines()) if f" {name}(" in line)


async def lens_titles(editor: Editor, uri: str) -> list[str]:
    lenses = await editor.client.text_document_code_lens_async(types.CodeLensParams(text_document=doc(uri)))
    return [lens.command.title for lens in lenses or []]


async def execute(editor: Editor, command: types.Command):
    return await editor.client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=command.command, arguments=command.arguments))


async def test_port_to_mlx_then_accept(editor: Editor, workspace: Path):
    client = editor.client
    source = workspace / "softmax.cu"
    uri = editor.open(source)
    line = kernel_line(source)

    assert "Port to MLX" in await lens_titles(editor, uri)
    if editor.client.capabilities.workspace.did_change_watched_files.dynamic_registration:
        await editor.wait_for(lambda: any(r.method == "workspace/didChangeWatchedFiles" for r in editor.registrations),
                              timeout=10, what="the file watcher registration")

    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc(uri), range=at(line + 10, 4), context=types.CodeActionContext(diagnostics=[])))
    port = next(a for a in actions if a.title == "Port to MLX")
    assert isinstance(port, types.CodeAction) and port.command.command == "ksearch.port"
    assert list(port.command.arguments) == [uri, KERNEL]
    outside = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc(uri), range=at(2, 0), context=types.CodeActionContext(diagnostics=[])))
    assert not [a for a in outside or [] if a.title == "Port to MLX"]

    done = await execute(editor, port.command)
    assert done["status"] == "done", done["message"]
    run_id, cand_id = done["runId"], done["candidateId"]
    assert cand_id

    kinds = [r.kind for r in client.progress_reports[f"ksearch-{run_id}"]]
    assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds

    assert any(j.running == 1 for j in editor.jobs) and editor.jobs[-1].running == 0   # status bar
    await editor.wait_for(lambda: editor.refreshes["inlayHint"], what="an inlay-hint refresh")
    if editor.client.capabilities.workspace.code_lens:     # VS Code asks for lens refreshes; Neovim 0.11 does not
        await editor.wait_for(lambda: editor.refreshes["codeLens"], what="a code-lens refresh")

    shown = await editor.wait_for(lambda: editor.show_diff, what="ksearch/showDiff")
    assert (shown[-1].runId, shown[-1].candidateId) == (run_id, cand_id)

    payload = await client.protocol.send_request_async("ksearch/candidate", {"runId": run_id, "candidateId": cand_id})
    target = workspace / "softmax_mlx.py"
    assert Path(payload.uri.replace("file://", "")).name == target.name
    assert payload.original == "" and payload.language == "python"
    assert "def kernel(" in payload.candidate and "metal_kernel" in payload.candidate

    titles = await lens_titles(editor, uri)
    assert {"Accept", "Reject"} <= set(titles)

    accepted = await execute(editor, types.Command(title="Accept", command="ksearch.accept", arguments=[run_id, cand_id]))
    assert accepted["applied"] is True and accepted["saved"] is True
    # not open in the editor: the server wrote the module itself, so no client holds an unsaved buffer of it
    assert target.read_text() == payload.candidate
    assert not editor.applied
    confirm = await editor.wait_for(lambda: [m for m in client.messages if "Accepted for" in m.message],
                                    what="the Accept confirmation")
    assert "softmax_mlx.py created" in confirm[-1].message
    titles = await lens_titles(editor, uri)
    assert "Accept" not in titles and any(t.startswith("Accepted: ✓ verified (sim)") for t in titles), titles

    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc(uri), range=types.Range(start=types.Position(line=0, character=0),
                                                  end=types.Position(line=200, character=0))))
    assert [h.position.line for h in hints] == [line]
    label = hints[0].label
    assert label == "✓ verified (sim)", label       # the simulator checks; it never yields a time

    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=doc(uri), position=types.Position(line=line, character=20)))
    text = hover.contents.value
    first = text.split("\n\n")[1]
    assert first.startswith("On disk (softmax_mlx.py): ✓ verified (sim)"), first
    assert "| # | result |" in text and run_id in text and "(accepted)" in text
    assert "| — |" not in text and " ms" not in text      # no empty columns, no time for a simulated check

    # edited by hand since: the lens and the hint say so (what is shown is what is on disk)
    target.write_text(payload.candidate + "\n# tuned by hand\n")
    editor.client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[
        types.FileEvent(uri=payload.uri, type=types.FileChangeType.Changed)]))
    titles: list[str] = []
    for _ in range(50):
        titles = await lens_titles(editor, uri)
        if any("edited since accepted" in t for t in titles):
            break
        await asyncio.sleep(0.1)
    assert any("✎ softmax_mlx.py edited since accepted" in t for t in titles), titles
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc(uri), range=types.Range(start=types.Position(line=0, character=0),
                                                  end=types.Position(line=200, character=0))))
    assert hints[0].label == "✎ edited since accepted", hints[0].label
