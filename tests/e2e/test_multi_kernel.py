"""Two kernels of one file, each ported and accepted side by side: each kernel's port has its own module, and
accepting one never overwrites the other; each kernel's lens, hint and hover describe its own accepted module.
A file that does not parse gets its error and no job: the actions say why they are disabled."""
from __future__ import annotations

import asyncio
from pathlib import Path

from lsprotocol import types

from ksearch_engine.store import Store

from .conftest import start_editor, stop_editor
from .test_port_flow import at, doc, execute, kernel_line, lens_titles

TWO_KERNELS = """// two independent kernels in one file
__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i];
}

__global__ void offset(const float* x, float* y, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + b;
}
"""


async def lenses_by_line(editor, uri) -> dict[int, list[str]]:
    lenses = await editor.client.text_document_code_lens_async(types.CodeLensParams(text_document=doc(uri)))
    out: dict[int, list[str]] = {}
    for lens in lenses or []:
        out.setdefault(lens.range.start.line, []).append(lens.command.title)
    return out


async def test_two_kernels_accepted_side_by_side(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    src = root / "pair.cu"
    src.write_text(TWO_KERNELS)
    ed = await start_editor(root, "neovim")
    try:
        uri = ed.open(src)
        lines = {k: kernel_line(src, k) for k in ("scale", "offset")}
        by_line = await lenses_by_line(ed, uri)
        assert all("Port to MLX" in by_line[lines[k]] for k in lines), by_line

        modules = {}
        for k in ("scale", "offset"):
            done = await execute(ed, types.Command(title="Port", command="ksearch.port", arguments=[uri, k]))
            assert done["status"] == "done", done["message"]
            payload = await ed.client.protocol.send_request_async(
                "ksearch/candidate", {"runId": done["runId"], "candidateId": done["candidateId"]})
            assert payload.title.startswith(f"{k} → pair_{k}_mlx.py: "), payload.title
            # a client without its own diff view gets the server's: a unified diff, opened read-only
            diff = await execute(ed, types.Command(title="Show diff", command="ksearch.diff",
                                                   arguments=[done["runId"], done["candidateId"]]))
            assert diff["diff"].startswith("--- /dev/null") and f"+++ pair_{k}_mlx.py" in diff["diff"]
            assert Path(diff["uri"].replace("file://", "")).name == f"pair.{k}.diff"
            accepted = await execute(ed, types.Command(title="Accept", command="ksearch.accept",
                                                       arguments=[done["runId"], done["candidateId"]]))
            assert accepted["applied"] and accepted["saved"], accepted
            modules[k] = (root / f"pair_{k}_mlx.py", payload.candidate)

        for k, (path, text) in modules.items():
            assert path.read_text() == text, f"{path.name} was overwritten"
        assert not (root / "pair_mlx.py").exists()
        by_line = await lenses_by_line(ed, uri)
        for k in lines:
            assert any(t.startswith("Accepted: ✓ verified (sim)") for t in by_line[lines[k]]), by_line
            assert "Show diff" not in " ".join(by_line[lines[k]])
        hints = await ed.client.text_document_inlay_hint_async(types.InlayHintParams(
            text_document=doc(uri), range=types.Range(start=types.Position(line=0, character=0),
                                                      end=types.Position(line=50, character=0))))
        assert sorted(h.position.line for h in hints) == sorted(lines.values())
        for k in lines:
            hover = (await ed.client.text_document_hover_async(types.HoverParams(
                text_document=doc(uri), position=types.Position(line=lines[k], character=18)))).contents.value
            assert f"On disk (pair_{k}_mlx.py): ✓ verified (sim)" in hover, hover
    finally:
        await stop_editor(ed)


async def test_a_file_that_does_not_parse_is_refused(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    src = root / "pair.cu"
    broken = TWO_KERNELS.replace("if (i < n) x[i]", "if (i < n x[i]")
    src.write_text(broken)
    ed = await start_editor(root, "vscode")
    try:
        uri = ed.open(src)
        diags = await ed.wait_for(lambda: ed.client.diagnostics.get(uri), what="diagnostics")
        errors = [d for d in diags if d.severity == types.DiagnosticSeverity.Error]
        assert errors and errors[0].range.start.line == 3 and "missing ')'" in errors[0].message, errors
        titles = await lens_titles(ed, uri)
        assert "Port to MLX" not in titles and any(t.startswith("Port/Optimize disabled: line 4:") for t in titles)
        actions = await ed.client.text_document_code_action_async(types.CodeActionParams(
            text_document=doc(uri), range=at(kernel_line(src, "scale") + 1, 4),
            context=types.CodeActionContext(diagnostics=[])))
        port = next(a for a in actions if a.title == "Port to MLX")
        assert port.disabled is not None and "does not parse" in port.disabled.reason
        answer = await execute(ed, types.Command(title="Port", command="ksearch.port", arguments=[uri, "scale"]))
        assert answer is None
        said = await ed.wait_for(lambda: [m for m in ed.client.messages if "does not parse" in m.message],
                                 what="the refusal")
        assert "disabled until it does" in said[0].message and "ksim" not in said[0].message
        everything = await execute(ed, types.Command(title="Port all", command="ksearch.portAll", arguments=[uri]))
        assert everything is None
        await asyncio.sleep(0.2)
        assert Store(root / ".ksearch" / "ksearch.db").runs() == []       # no job was started

        # fixed and saved: the actions come back
        src.write_text(TWO_KERNELS)
        ed.change(uri, TWO_KERNELS)
        for _ in range(50):
            if "Port to MLX" in await lens_titles(ed, uri):
                break
            await asyncio.sleep(0.1)
        assert "Port to MLX" in await lens_titles(ed, uri)
    finally:
        await stop_editor(ed)


async def test_a_program_that_includes_its_kernel_files_points_to_them(tmp_path: Path):
    """Rodinia's main.cu has no kernel of its own and #includes the files that do: each such #include gets a lens
    naming the kernels there, which opens that file; an #include without kernels gets none."""
    root = tmp_path / "ws"
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "step.cu").write_text(TWO_KERNELS)
    (root / "util.h").write_text("#define N 64\n")
    main = root / "main.cu"
    main.write_text('#include <stdio.h>\n#include "util.h"\n#include "kernels/step.cu"\nint main() { return 0; }\n')
    ed = await start_editor(root, "neovim")
    try:
        uri = ed.open(main)
        by_line = await lenses_by_line(ed, uri)
        assert by_line == {2: ["step.cu: 2 CUDA kernels (scale, offset) · open to port"]}, by_line
        lenses = await ed.client.text_document_code_lens_async(types.CodeLensParams(text_document=doc(uri)))
        opened = await execute(ed, lenses[0].command)
        assert Path(opened["uri"].replace("file://", "")) == root / "kernels" / "step.cu"
        # Port all kernels in file on main.cu says where the kernels are instead of only "none"
        await execute(ed, types.Command(title="Port all", command="ksearch.portAll", arguments=[uri]))
        said = await ed.wait_for(lambda: [m for m in ed.client.messages if "main.cu has no CUDA kernel" in m.message],
                                 what="the message naming the included kernel files")
        assert "its kernels are in the files it includes: step.cu (scale, offset)" in said[0].message
    finally:
        await stop_editor(ed)
