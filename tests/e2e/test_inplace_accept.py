"""Accepting an optimized MLX kernel edits the kernel's source string in place, in the open document, with a
versioned edit; the rest of the file is untouched. The run is written to the store the way a worker writes
it (the search itself is exercised in test_optimize_flow)."""
from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from ksearch_engine.store import Store, source_hash

from .conftest import start_editor, stop_editor
from .test_port_flow import doc, execute, lens_titles

USER_FILE = '''import mlx.core as mx

source = """
    uint i = thread_position_in_grid.x;
    out[i] = inp[i] * 2.0f;
"""

double_it = mx.fast.metal_kernel(name="double_it", input_names=["inp"], output_names=["out"], source=source)


def kernel(inp):
    return double_it(inputs=[inp], grid=(inp.size, 1, 1), threadgroup=(256, 1, 1),
                     output_shapes=[inp.shape], output_dtypes=[inp.dtype])[0]
'''

BETTER_LITERAL = '''"""
    uint i = thread_position_in_grid.x;
    out[i] = inp[i] + inp[i];
"""'''

CANDIDATE = f'''import mlx.core as mx

_k = mx.fast.metal_kernel(name="double_it", input_names=["inp"], output_names=["out"], source={BETTER_LITERAL})


def kernel(inp):
    return _k(inputs=[inp], grid=(inp.size, 1, 1), threadgroup=(256, 1, 1),
              output_shapes=[inp.shape], output_dtypes=[inp.dtype])[0]
'''


async def test_accept_replaces_the_kernel_source_in_place(workspace: Path):
    path = workspace / "double.py"
    path.write_text(USER_FILE)
    store = Store(workspace / ".ksearch" / "ksearch.db")
    run = store.create_run("optimize", file=str(path), kernel="double_it", status="done", doc_version=1,
                           source_hash=source_hash(USER_FILE), proposer="offline")
    cid = store.add_candidate(run, CANDIDATE, plan="n1: add instead of multiply", kind="metal", status="passed",
                              result={"status": "passed", "backend": "sim", "device": "CPU simulator",
                                      "verified_by": "sim", "trials": 3})
    store.update_run(run, best_candidate=cid)
    store.close()

    ed = await start_editor(workspace, "neovim")        # Neovim negotiates UTF-8 positions
    try:
        uri = ed.open(path, language="python")
        titles = await lens_titles(ed, uri)
        assert {"Accept", "Reject"} <= set(titles), titles
        actions = await ed.client.text_document_code_action_async(types.CodeActionParams(
            text_document=doc(uri), range=types.Range(start=types.Position(line=7, character=2),
                                                      end=types.Position(line=7, character=2)),
            context=types.CodeActionContext(diagnostics=[])))
        assert "Accept candidate for double_it" in [a.title for a in actions]
        payload = await ed.client.protocol.send_request_async("ksearch/candidate", {"runId": run, "candidateId": cid})
        assert payload.uri == uri and payload.original == USER_FILE
        assert payload.candidate == USER_FILE.replace('"""\n    uint i = thread_position_in_grid.x;\n    out[i] = inp[i] * 2.0f;\n"""', BETTER_LITERAL)

        accepted = await execute(ed, types.Command(title="Accept", command="ksearch.accept", arguments=[run, cid]))
        assert accepted["applied"] is True
        edit = ed.applied[-1].document_changes
        assert len(edit) == 1 and edit[0].text_document.version == 1      # versioned, no CreateFile
        assert ed.docs[uri][0] == payload.candidate
        assert "inp[i] + inp[i]" in ed.docs[uri][0] and "def kernel(inp):" in ed.docs[uri][0]
    finally:
        await stop_editor(ed)
