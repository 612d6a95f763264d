"""Kernel files: diagnostics (unportable constructs, threadgroup memory, invalid task files), the
'Create benchmark task' quick fix and command, and files found on disk through watching."""
from __future__ import annotations

import shutil
import asyncio
from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path

from .conftest import EXAMPLES, Editor, start_editor, stop_editor
from .test_port_flow import doc, execute, lens_titles

UNPORTABLE = """\
#define TILE 128
__global__ void debug_kernel(const float* x, float* y, int n) {
    __shared__ float tile[TILE][TILE];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        printf("%d\\n", i);
        tile[0][threadIdx.x] = x[i];
        y[i] = tile[0][threadIdx.x];
    }
}
"""

BIG_METAL = """\
#include <metal_stdlib>
using namespace metal;
#define TILE 128
kernel void big_tile(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     uint tid [[thread_position_in_threadgroup]]) {
    threadgroup float tile[TILE][TILE];
    tile[0][tid] = x[tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tid] = tile[0][tid];
}
"""


# Diagnostics and tasks do not depend on the client profile; the Neovim profile runs the disk-watching test.
def pytest_generate_tests(metafunc):
    if "profile" in metafunc.fixturenames:
        metafunc.parametrize("profile", ["vscode"])


async def diagnostics_for(editor: Editor, uri: str, predicate=lambda ds: ds):
    return await editor.wait_for(lambda: predicate(editor.client.diagnostics.get(uri) or []),
                                 timeout=20, what=f"diagnostics for {uri}")


async def test_diagnostics_on_unportable_and_oversized_kernels(editor: Editor, workspace: Path):
    cu = workspace / "debug.cu"
    cu.write_text(UNPORTABLE)
    uri = editor.open(cu)
    ds = await diagnostics_for(editor, uri, lambda ds: [d for d in ds if "printf" in d.message])
    assert ds[0].range.start.line == 5 and ds[0].source == "ksearch"
    all_ds = editor.client.diagnostics[uri]
    shared = [d for d in all_ds if "32768" in d.message or "32 KB" in d.message]
    assert shared and shared[0].range.start.line == 2

    metal = workspace / "big.metal"
    metal.write_text(BIG_METAL)
    muri = editor.open(metal, language="metal")
    ds = await diagnostics_for(editor, muri, lambda ds: [d for d in ds if "threadgroup memory" in d.message])
    assert ds[0].severity == types.DiagnosticSeverity.Error and "64.0 KB" in ds[0].message
    assert ds[0].range.start.line == 3

    suri = editor.open(workspace / "softmax.cu")
    await editor.wait_for(lambda: suri in editor.client.diagnostics, what="softmax.cu diagnostics")
    clean = editor.client.diagnostics[suri]
    assert not [d for d in clean if d.severity in (types.DiagnosticSeverity.Error, types.DiagnosticSeverity.Warning)]


async def test_create_benchmark_task_then_optimize_is_offered(editor: Editor, workspace: Path):
    # A CUDA kernel is optimizable as it is (its program's launches make the task); a Metal kernel of no
    # family, with no program to capture, needs a task the user writes.
    (workspace / "gelu.metal").write_text(
        "#include <metal_stdlib>\nusing namespace metal;\n"
        "kernel void gelu_kernel(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n"
        "                        constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {\n"
        "    if (i < n) y[i] = 0.5f * x[i] * (1.0f + precise::tanh(0.79788456f * x[i]));\n}\n")
    uri = editor.open(workspace / "gelu.metal", language="metal")
    hint = await diagnostics_for(editor, uri, lambda ds: [d for d in ds if d.code == "no-task"])
    assert "Create benchmark task" in hint[0].message
    titles = await lens_titles(editor, uri)
    assert "Create benchmark task" in titles and "Optimize kernel" not in titles
    refused = await execute(editor, types.Command(title="Optimize", command="ksearch.optimize",
                                                  arguments=[uri, "gelu_kernel"]))
    assert refused is None
    told = await editor.wait_for(lambda: [m for m in editor.client.messages if "no benchmark task" in m.message],
                                 what="the reason Optimize cannot start")
    assert "gelu.metal" in told[0].message and "Create benchmark task" in told[0].message
    assert told[0].type == types.MessageType.Error and "Traceback" not in told[0].message

    actions = await editor.client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc(uri), range=hint[0].range, context=types.CodeActionContext(diagnostics=hint)))
    fix = next(a for a in actions if a.title.startswith("Create benchmark task"))
    assert fix.kind == types.CodeActionKind.QuickFix and fix.edit is not None
    assert isinstance(fix.edit.document_changes[0], types.CreateFile)
    assert editor.apply(fix.edit).applied
    task = workspace / "gelu.gelu_kernel.task.toml"
    text = task.read_text()
    assert 'name = "x"' in text and '"n"' in text and 'outputs = ["y"]' in text
    editor.client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[
        types.FileEvent(uri=from_fs_path(str(task)), type=types.FileChangeType.Created)]))
    await editor.wait_for(lambda: True)
    titles = await lens_titles(editor, uri)
    assert "Optimize kernel" in titles and "Create benchmark task" not in titles

    # The task as written still needs the user's reference; a broken edit of it is reported in the file.
    task.write_text(text.replace('dtype = "float32"', 'dtype = "float33"', 1))
    turi = editor.open(task, language="toml")
    ds = await diagnostics_for(editor, turi, lambda ds: ds)
    bad_line = next(i for i, line in enumerate(task.read_text().splitlines()) if "float33" in line)
    assert ds[0].severity == types.DiagnosticSeverity.Error and ds[0].range.start.line == bad_line
    assert "gelu.gelu_kernel.task.toml" in ds[0].message


async def test_create_task_command_and_files_found_on_disk(workspace: Path):
    ed = await start_editor(workspace, "neovim")     # no dynamic watcher registration: the server watches
    try:
        assert not ed.registrations
        soft = from_fs_path(str(workspace / "softmax.cu"))

        async def titles_of(uri: str, want) -> list[str]:
            for _ in range(150):
                titles = await lens_titles(ed, uri)          # asked without opening the file: from the index
                if want(titles):
                    return titles
                await asyncio.sleep(0.1)
            return titles

        assert (await titles_of(soft, lambda t: t)).count("Port to MLX") == 1     # found by the startup scan
        # Changed on disk, never opened: only the watcher can tell the server.
        extra = (EXAMPLES / "gelu" / "gelu.cu").read_text().split("#include <cuda_runtime.h>")[-1]
        (workspace / "softmax.cu").write_text((workspace / "softmax.cu").read_text() + extra)
        titles = await titles_of(soft, lambda t: t.count("Port to MLX") == 2)
        assert titles.count("Port to MLX") == 2, "a kernel added on disk was not picked up"
        shutil.copy(EXAMPLES / "rmsnorm" / "rmsnorm.cu", workspace / "later.cu")
        titles = await titles_of(from_fs_path(str(workspace / "later.cu")), lambda t: t)
        assert "Port to MLX" in titles, "a kernel file written on disk was not picked up"
        gelu = workspace / "gelu.cu"
        shutil.copy(EXAMPLES / "gelu" / "gelu.cu", gelu)
        guri = ed.open(gelu)
        made = await execute(ed, types.Command(title="Create", command="ksearch.createTask",
                                               arguments=[guri, "gelu_kernel"]))
        assert made["taskFile"].endswith("gelu.gelu_kernel.task.toml")
        assert (workspace / "gelu.gelu_kernel.task.toml").exists()
        assert ed.client.shown_documents and ed.client.shown_documents[-1].uri == made["taskFile"]
        again = await execute(ed, types.Command(title="Create", command="ksearch.createTask",
                                                arguments=[guri, "gelu_kernel"]))
        assert again is None
        msg = await ed.wait_for(lambda: [m for m in ed.client.messages if "already exists" in m.message])
        assert "gelu.gelu_kernel.task.toml" in msg[0].message
    finally:
        await stop_editor(ed)
