"""Results: the diff content (`ksearch/candidate`), Accept / Reject / Next candidate, and the diff for clients
that do not show one themselves (`ksearch.diff`).

Accept applies the candidate only when the kernel's document is still at the version the job started from
(otherwise it says so and offers to re-run) and only a candidate the run offers (one that beat the original).
It leaves the result saved: a module the editor does not hold open is written to disk by the server; a document
the editor holds gets a versioned WorkspaceEdit (the client's `applied` is honoured) and the answer says whether
it is saved. A module edited by hand since ksearch wrote it is replaced only when the user says so. The decision
goes to the store, and a message confirms it. Reject records it and the lenses go away. Next moves to the
next-ranked candidate.
"""
from __future__ import annotations

import asyncio
import difflib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ksearch_engine.store import Candidate, Run, source_hash

from . import edits
from .commands import _args, start_job
from .errors import UserError, guarded
from .summary import offer_list, plan_label

if TYPE_CHECKING:
    from .state import KsearchServer

log = logging.getLogger(__name__)
RERUN = "Re-run"
REPLACE = "Replace it"


def _load(ls: "KsearchServer", run_id: str, cand_id: str | None) -> tuple[Run, Candidate, list[Candidate]]:
    store = ls.store
    run = store.run(run_id) or store.find_run(run_id)
    if run is None:
        raise UserError(f"run {run_id} is not in the results store {store.path}; it may belong to another workspace")
    ranked = offer_list(store, run)
    if cand_id:
        cand = store.candidate(cand_id)
        if cand is None or cand.run_id != run.id:
            raise UserError(f"candidate {cand_id} is not part of run {run_id}")
    else:
        if not ranked:
            raise UserError(f"run {run_id} has no passing candidate to show")
        cand = ranked[ls.offers.get(run["id"], 0) % len(ranked)]
    return run, cand, ranked


def source_changed(ls: "KsearchServer", run: Run) -> str | None:
    """Why the kernel's source no longer matches the job's starting point, or None when it still does."""
    path = run.get("file") or ""
    name = Path(path).name
    doc = ls.document(ls.uri_of(path))
    if doc is not None and run.get("doc_version") is not None:
        if doc.version != run["doc_version"]:
            return f"{name} changed since the job started (version {run['doc_version']}, now {doc.version})"
        return None
    text = ls.current_text(path)
    if text is None:
        return f"{name} no longer exists"
    if run.get("source_hash") and source_hash(text) != run["source_hash"]:
        return f"{name} changed on disk since the job started"
    return None


def _position(cand: Candidate, ranked: list[Candidate]) -> str:
    pos = next((i for i, c in enumerate(ranked) if c.id == cand.id), None)
    return f"candidate {pos + 1}/{len(ranked)}" if pos is not None else f"candidate #{cand.seq}"


def candidate_payload(ls: "KsearchServer", run: Run, cand: Candidate, ranked: list[Candidate]) -> dict[str, Any]:
    p = edits.plan(ls, run, cand)
    label = ls.results.best(ls.store, run, cand).lens_label()
    # unique per kernel and candidate: two kernels of one file never share a title
    title = f"{run.kernel} → {Path(p.target).name}: {_position(cand, ranked)} · {label}"
    return {"uri": ls.uri_of(p.target), "original": p.original, "candidate": p.new_text, "language": p.language,
            "title": title, "runId": run.id, "candidateId": cand.id, "kernel": run.kernel,
            "plan": plan_label(cand), "isNew": not p.exists}


def unified_diff(payload: dict) -> str:
    name = Path(payload["uri"].replace("file://", "")).name
    lines = difflib.unified_diff(payload["original"].splitlines(keepends=True),
                                 payload["candidate"].splitlines(keepends=True),
                                 fromfile=f"{name} (now)" if payload["original"] else "/dev/null",
                                 tofile=f"{name} ({payload['title']})")
    return "".join(lines) or f"(no change: {name} already holds this candidate)\n"


def _hand_edited(ls: "KsearchServer", run: Run, p: "edits.PlannedEdit") -> bool:
    """The target module exists, differs from what Accept writes, and is no candidate ksearch ever wrote for this
    kernel: someone edited it by hand."""
    if not p.exists or p.replace is not None or p.original == p.new_text:
        return False
    return ls.store.by_text_hash(run.file or "", run.kernel or "", source_hash(p.original)) is None


def _write(target: Path, text: str) -> None:
    tmp = target.with_name(f".{target.name}.ksearch-tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)


async def _offer_rerun(ls: "KsearchServer", run: Run, reason: str) -> None:
    what = "Port to MLX" if run["kind"] == "port" else "Optimize kernel"
    message = f"ksearch: {reason}; the result may not fit it any more, so it was not applied. {RERUN} {what}?"
    try:
        choice = await ls.window_show_message_request_async(types.ShowMessageRequestParams(
            type=types.MessageType.Warning, message=message,
            actions=[types.MessageActionItem(title=RERUN), types.MessageActionItem(title="Dismiss")]))
    except Exception:  # noqa: BLE001 - a client without message requests gets a plain message
        ls.tell(f"{reason}; not applied. Run {what} again on the new version.", types.MessageType.Warning)
        return
    if choice is not None and getattr(choice, "title", None) == RERUN:
        try:
            job = start_job(ls, run["kind"], ls.uri_of(run["file"]), run["kernel"])
            await asyncio.shield(job.done)
        except UserError as e:
            ls.error(str(e))


def register(ls: "KsearchServer") -> None:

    @ls.feature("ksearch/candidate")
    @guarded(ls, "Showing the candidate")
    def candidate(params) -> dict | None:
        run_id = getattr(params, "runId", None) or (params[0] if isinstance(params, (list, tuple)) else None)
        cand_id = getattr(params, "candidateId", None) or (params[1] if isinstance(params, (list, tuple)) and len(params) > 1 else None)
        if not run_id:
            raise UserError("ksearch/candidate needs {runId, candidateId}")
        run, cand, ranked = _load(ls, run_id, cand_id)
        return candidate_payload(ls, run, cand, ranked)

    @ls.command("ksearch.accept")
    @guarded(ls, "Accept")
    async def accept(*args):
        a = _args(args, 1, "ksearch.accept [runId, candidateId]")
        run, cand, ranked = _load(ls, a[0], a[1] if len(a) > 1 else None)
        if cand.id not in {c.id for c in ranked}:
            why = ("it is your kernel as it is" if cand.is_original else
                   f"it did not beat your kernel" if cand.status == "passed" else f"it did not pass ({cand.status})")
            raise UserError(f"candidate #{cand.seq} of run {run.id} is not offered: {why}. Nothing was changed.")
        reason = source_changed(ls, run)
        if reason:
            asyncio.ensure_future(_offer_rerun(ls, run, reason))
            return {"applied": False, "reason": reason}
        p = edits.plan(ls, run, cand)
        target = Path(p.target)
        if _hand_edited(ls, run, p):
            ask = (f"ksearch: {target.name} was edited since ksearch wrote it. Replace it with candidate #{cand.seq} "
                   f"of {run.kernel}? (Your version is lost unless it is committed.)")
            try:
                choice = await ls.window_show_message_request_async(types.ShowMessageRequestParams(
                    type=types.MessageType.Warning, message=ask,
                    actions=[types.MessageActionItem(title=REPLACE), types.MessageActionItem(title="Keep mine")]))
            except Exception:  # noqa: BLE001 - a client without message requests: never overwrite silently
                choice = None
            if getattr(choice, "title", None) != REPLACE:
                ls.tell(f"{target.name} kept as you edited it; candidate #{cand.seq} was not applied.",
                        types.MessageType.Warning)
                return {"applied": False, "reason": f"{target.name} was edited by hand; kept"}
        held = ls.document(ls.uri_of(target)) is not None
        if not held:
            # Not open in the editor: written to disk here, so no client is left holding an unsaved buffer.
            _write(target, p.new_text)
            applied, why, saved = True, "", True
        else:
            result = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
                edit=edits.workspace_edit(ls, p), label=f"ksearch: accept {target.name}"))
            applied, why = result.applied, result.failure_reason
            saved = False
        if not applied:
            ls.error(f"the editor did not apply the change to {target.name}: {why or 'no reason given'}. "
                     f"Nothing was recorded; Accept again once the file can be edited.")
            return {"applied": False, "reason": why}
        ls.store.decide(run.id, cand.id, "accepted", {"target": str(target), "created": not p.exists})
        ls.offers.pop(run.id, None)
        ls.results_changed(immediate=True)
        label = ls.results.best(ls.store, run, cand).lens_label()
        verb = "created" if not p.exists else "updated"
        note = "" if saved else f" The change is in the open {target.name}, not saved yet: save it."
        ls.tell(f"Accepted for {run.kernel}: {label}. {target.name} {verb}.{note}")
        log.info("accepted candidate %s of run %s into %s (saved: %s)", cand.id, run.id, target, saved)
        return {"applied": True, "uri": ls.uri_of(target), "saved": saved}

    @ls.command("ksearch.reject")
    @guarded(ls, "Reject")
    def reject(*args):
        a = _args(args, 1, "ksearch.reject [runId, candidateId]")
        run, cand, _ = _load(ls, a[0], a[1] if len(a) > 1 else None)
        ls.store.decide(run.id, cand.id, "rejected", {})
        ls.offers.pop(run.id, None)
        ls.results_changed(immediate=True)
        ls.tell(f"Rejected the {run.kind} result for {run.kernel}; nothing was changed on disk.")
        log.info("rejected run %s (candidate %s)", run.id, cand.id)
        return {"rejected": True}

    @ls.command("ksearch.next")
    @guarded(ls, "Next candidate")
    def next_candidate(*args):
        a = _args(args, 1, "ksearch.next [runId]")
        run, cand, ranked = _load(ls, a[0], None)
        if a[1:] and a[1]:        # from a specific candidate: the one after it
            i = next((i for i, c in enumerate(ranked) if c.id == a[1]), -1)
        else:
            i = ls.offers.get(run.id, 0)
        if not ranked:
            raise UserError(f"run {run.id} has no passing candidates")
        nxt = (i + 1) % len(ranked)
        ls.offers[run.id] = nxt
        cid = ranked[nxt].id
        if ls.client_shows_diff():
            ls.protocol.notify("ksearch/showDiff", {"runId": run.id, "candidateId": cid})
        else:
            asyncio.ensure_future(show_diff_document(ls, run.id, cid))
        ls.results_changed(immediate=True)
        return {"runId": run.id, "candidateId": cid, "index": nxt, "count": len(ranked)}

    @ls.command("ksearch.diff")
    @guarded(ls, "Show diff")
    async def diff(*args):
        """The diff for any client: a unified diff (answered, and opened read-only through window/showDocument
        where the client can), for editors without ksearch's own diff view."""
        a = _args(args, 2, "ksearch.diff [runId, candidateId]")
        return await show_diff_document(ls, a[0], a[1])


async def show_diff_document(ls: "KsearchServer", run_id: str, cand_id: str) -> dict:
    """Write the candidate's unified diff to a read-only file (one per kernel, reused) and open it."""
    run, cand, ranked = _load(ls, run_id, cand_id)
    payload = candidate_payload(ls, run, cand, ranked)
    text = unified_diff(payload)
    folder = ls.store.path.parent / "diffs"
    folder.mkdir(parents=True, exist_ok=True)
    stem = Path(run.file or "kernel").stem
    out = folder / f"{stem}.{run.kernel}.diff"
    if out.exists():
        out.chmod(0o644)
    out.write_text(f"# {payload['title']}\n# Accept / Reject: the code lenses above {run.kernel}\n" + text)
    out.chmod(0o444)
    uri = ls.uri_of(out)
    shown = await ls.show_document(uri)   # the diff is answered either way
    return {"runId": run.id, "candidateId": cand.id, "title": payload["title"], "diff": text, "uri": uri,
            "shown": shown}
