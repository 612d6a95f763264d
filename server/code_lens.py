"""Code lenses above each kernel: its actions, a running job (with Cancel), the best result so far, and
Accept | Reject | Next candidate while a result waits for a decision."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from . import documents
from .errors import guarded
from .summary import Best

if TYPE_CHECKING:
    from .state import KsearchServer


def _lens(rng: types.Range, title: str, command: str, args: list) -> types.CodeLens:
    return types.CodeLens(range=rng, command=types.Command(title=title, command=command, arguments=args))


def lenses_for(ls: "KsearchServer", uri: str) -> list[types.CodeLens]:
    path = ls.path_of(uri)
    entry = ls.index.get(path)
    if entry is None:
        return []
    out: list[types.CodeLens] = []
    store = ls.store
    for k in entry.kernels:
        rng = types.Range(start=k.name_range.start, end=k.name_range.start)
        job = ls.jobs.active_for(path, k.name)
        res = ls.results.for_kernel(store, path, k.name)
        if job is not None:
            state = "queued" if job.state == "queued" else job.progress_message(short=True)
            out.append(_lens(rng, f"⟳ {job.title}: {state}", "ksearch.cancel", [job.run_id]))
            out.append(_lens(rng, "Cancel", "ksearch.cancel", [job.run_id]))
        elif res.runs and res.runs[0]["status"] in ("running", "queued"):
            other = res.runs[0]
            out.append(_lens(rng, f"⟳ {other['kind']} running in another session", "ksearch.cancel", [other["id"]]))
        elif res.pending is not None and res.ranked:
            rid = res.pending["id"]
            i = ls.offers.get(rid, 0) % len(res.ranked)
            cand = res.ranked[i]
            out.append(_lens(rng, "Accept", "ksearch.accept", [rid, cand["id"]]))
            out.append(_lens(rng, "Reject", "ksearch.reject", [rid, cand["id"]]))
            if len(res.ranked) > 1:
                out.append(_lens(rng, f"Next candidate ({i + 1}/{len(res.ranked)})", "ksearch.next", [rid]))
            label = Best(res.pending, cand, ls.results.baseline_name(res.pending)).lens_label()
            out.append(_lens(rng, f"Show diff · {label}", "ksearch.showDiff", [rid, cand["id"]]))
        if job is None:
            if k.is_cuda:
                out.append(_lens(rng, "Port to MLX", "ksearch.port", [uri, k.name]))
            if ls.tasks.find(path, k.name, entry.hash).has_task:
                out.append(_lens(rng, "Optimize kernel", "ksearch.optimize", [uri, k.name]))
            else:
                out.append(_lens(rng, "Create benchmark task", "ksearch.createTask", [uri, k.name]))
        if res.best is not None and res.pending is None:
            out.append(_lens(rng, res.best.lens_label(), "ksearch.showDiff", [res.best.run["id"], res.best.cand["id"]]))
    return out


def register(ls: "KsearchServer") -> None:

    @ls.feature(types.TEXT_DOCUMENT_CODE_LENS)
    @guarded(ls, "Showing kernel lenses", default=[])
    def code_lens(params: types.CodeLensParams) -> list[types.CodeLens]:
        documents.ensure_fresh(ls, params.text_document.uri)
        return lenses_for(ls, params.text_document.uri)
