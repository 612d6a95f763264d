"""Code lenses above each kernel: its actions, a running job (with Cancel), the best result so far, and
Accept | Reject | Next candidate while a result waits for a decision."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types

from ksearch_engine.portfile import included_kernels

from . import documents
from .index import is_kernel_file
from .errors import guarded
from .summary import Best

if TYPE_CHECKING:
    from .state import KsearchServer


def _lens(rng: types.Range, title: str, command: str, args: list) -> types.CodeLens:
    return types.CodeLens(range=rng, command=types.Command(title=title, command=command, arguments=args))


def included_kernel_files(ls: "KsearchServer", path: str, entry) -> list[tuple[int, Path, list[str]]]:
    """A CUDA file with no kernel of its own (Rodinia's main.cu #includes its kernel files): portfile's
    included_kernels over the index's kernel files (parsed once per change, not on every lens request)."""
    if not path.lower().endswith((".cu", ".cuh")) or entry is None or entry.kernels:
        return []

    def kernels_of(f: Path) -> tuple[str, list[str]]:
        inc = (ls.index.get(str(f)) or ls.index.update_from_disk(str(f))[0]) if is_kernel_file(f) else None
        return (inc.text, [k.name for k in inc.kernels if k.is_cuda]) if inc else ("", [])
    return included_kernels(Path(path), entry.text, through=0, kernels_of=kernels_of)   # its own #includes


def include_lenses(ls: "KsearchServer", path: str, entry) -> list[types.CodeLens]:
    """A lens on each such #include, naming the kernels there, that opens that file (where Port to MLX is)."""
    out: list[types.CodeLens] = []
    for line, target, names in included_kernel_files(ls, path, entry):
        at = types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0))
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        out.append(_lens(at, f"{target.name}: {len(names)} CUDA kernel{'s' if len(names) > 1 else ''} "
                             f"({shown}) · open to port", "ksearch.openFile", [ls.uri_of(target)]))
    return out


def lenses_for(ls: "KsearchServer", uri: str) -> list[types.CodeLens]:
    path = ls.path_of(uri)
    entry = ls.index.get(path)
    if entry is None:
        return []
    out: list[types.CodeLens] = include_lenses(ls, path, entry)
    broken = documents.parse_errors(entry)
    for k in entry.kernels:
        rng = types.Range(start=k.name_range.start, end=k.name_range.start)
        job = ls.jobs.active_for(path, k.name)
        res = ls.kernel_results(path, k.name)
        if job is not None:
            state = "queued" if job.state == "queued" else job.progress_message(short=True)
            out.append(_lens(rng, f"⟳ {job.title}: {state}", "ksearch.cancel", [job.run_id]))
            out.append(_lens(rng, "Cancel", "ksearch.cancel", [job.run_id]))
        elif res.runs and res.runs[0].status in ("running", "queued"):
            other = res.runs[0]
            out.append(_lens(rng, f"⟳ {other.kind} running in another session", "ksearch.cancel", [other.id]))
        elif res.pending is not None and res.ranked:
            rid = res.pending.id
            i = ls.offers.get(rid, 0) % len(res.ranked)
            cand = res.ranked[i]
            label = ls.results.best(ls.store, res.pending, cand).lens_label()
            out.append(_lens(rng, f"Show diff · {label}", ls.diff_command(), [rid, cand.id]))
            out.append(_lens(rng, "Accept", "ksearch.accept", [rid, cand.id]))
            out.append(_lens(rng, "Reject", "ksearch.reject", [rid, cand.id]))
            if len(res.ranked) > 1:
                out.append(_lens(rng, f"Next candidate ({i + 1}/{len(res.ranked)})", "ksearch.next", [rid]))
        if job is None:
            if broken:
                # no job on a file that does not parse: the lens says why instead of offering the actions
                out.append(_lens(rng, f"Port/Optimize disabled: {broken}", "ksearch.explain",
                                 [uri, k.name]))
            else:
                if k.is_cuda:
                    out.append(_lens(rng, "Port to MLX", "ksearch.port", [uri, k.name]))
                if ls.tasks.find(path, k.name, entry.hash).has_task:
                    out.append(_lens(rng, "Optimize kernel", "ksearch.optimize", [uri, k.name]))
                else:
                    out.append(_lens(rng, "Create benchmark task", "ksearch.createTask", [uri, k.name]))
        if job is None and res.pending is None:
            if res.no_gain is not None and (res.accepted is None or res.no_gain.run.created > res.accepted.best.run.created):
                out.append(_lens(rng, res.no_gain.label(), "ksearch.showRun", [res.no_gain.run.id]))
            if res.accepted is not None:
                a = res.accepted
                out.append(_lens(rng, ("Accepted: " if a.state == "on disk" else "") + a.label(), ls.diff_command(),
                                 [a.best.run.id, a.best.cand.id]))
    return out


def register(ls: "KsearchServer") -> None:

    @ls.feature(types.TEXT_DOCUMENT_CODE_LENS)
    @guarded(ls, "Showing kernel lenses", default=[])
    def code_lens(params: types.CodeLensParams) -> list[types.CodeLens]:
        documents.ensure_fresh(ls, params.text_document.uri)
        return lenses_for(ls, params.text_document.uri)
