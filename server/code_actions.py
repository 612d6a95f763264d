"""Code actions on the kernel under the cursor: Port to MLX, Optimize kernel, Create benchmark task, and,
while a result waits for a decision, Accept / Reject / Next candidate."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types

from . import documents
from .commands import create_task_edit
from .diagnostics import NO_TASK
from .errors import guarded

if TYPE_CHECKING:
    from .state import KsearchServer

KINDS = [types.CodeActionKind.RefactorRewrite, types.CodeActionKind.QuickFix]


def _action(title: str, command: str, args: list, kind=types.CodeActionKind.RefactorRewrite, **kw) -> types.CodeAction:
    return types.CodeAction(title=title, kind=kind,
                            command=types.Command(title=title, command=command, arguments=args), **kw)


def register(ls: "KsearchServer") -> None:

    @ls.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=KINDS))
    @guarded(ls, "Listing kernel actions", default=[])
    def code_action(params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        documents.ensure_fresh(ls, uri)
        path = ls.path_of(uri)
        k = ls.index.kernel_at(path, params.range.start) or ls.index.kernel_at(path, params.range.end)
        if k is None:
            return []
        entry = ls.index.get(path)
        out: list[types.CodeAction] = []
        job = ls.jobs.active_for(path, k.name)
        if job is not None:
            out.append(_action(f"ksearch: cancel {job.title}", "ksearch.cancel", [job.run_id]))
        res = ls.kernel_results(path, k.name)
        if res.pending is not None and res.ranked:
            rid = res.pending.id
            cand = res.ranked[ls.offers.get(rid, 0) % len(res.ranked)]
            out.append(_action(f"Show diff of the candidate for {k.name}", ls.diff_command(), [rid, cand.id]))
            out.append(_action(f"Accept candidate for {k.name}", "ksearch.accept", [rid, cand.id]))
            out.append(_action(f"Reject candidate for {k.name}", "ksearch.reject", [rid, cand.id]))
            if len(res.ranked) > 1:
                out.append(_action("Next candidate", "ksearch.next", [rid]))
        broken = documents.parse_errors(entry) if entry is not None else None
        if broken:
            # disabled actions say why (clients that do not show disabled actions still get no job)
            why = types.CodeActionDisabled(reason=f"{Path(path).name} does not parse ({broken}): fix it first")
            if k.is_cuda:
                out.append(_action("Port to MLX", "ksearch.port", [uri, k.name], disabled=why))
            out.append(_action("Optimize kernel", "ksearch.optimize", [uri, k.name], disabled=why))
            return out
        if k.is_cuda:
            out.append(_action("Port to MLX", "ksearch.port", [uri, k.name]))
            if entry is not None and sum(1 for x in entry.kernels if x.is_cuda) > 1:
                out.append(_action("Port all kernels in file", "ksearch.portAll", [uri]))
        info = ls.tasks.find(path, k.name, entry.hash if entry else "")
        if info.has_task:
            out.append(_action("Optimize kernel", "ksearch.optimize", [uri, k.name]))
        else:
            no_task = [d for d in params.context.diagnostics if d.code == NO_TASK]
            try:
                edit, target = create_task_edit(ls, uri, k.name)
            except Exception:  # noqa: BLE001 - e.g. the task file exists after all
                edit = None
            if edit is not None:
                out.append(types.CodeAction(
                    title=f"Create benchmark task ({target.name})", kind=types.CodeActionKind.QuickFix,
                    diagnostics=no_task or None, edit=edit, is_preferred=bool(no_task)))
        return out
