"""Results: the diff content (`ksearch/candidate`), and Accept / Reject / Next candidate.

Accept applies a versioned WorkspaceEdit only when the kernel's document is still at the version the job
started from (otherwise it says so and offers to re-run), honours the client's `applied`, and records the
decision in the store. Reject records it and the lenses go away. Next moves to the next-ranked candidate.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ksearch_engine.store import source_hash

from . import edits
from .commands import _args, start_job
from .errors import UserError, guarded
from .summary import Best, offer_list

if TYPE_CHECKING:
    from .state import KsearchServer

RERUN = "Re-run"


def _load(ls: "KsearchServer", run_id: str, cand_id: str | None) -> tuple[dict, dict, list[dict]]:
    store = ls.store
    run = store.run(run_id) or store.find_run(run_id)
    if run is None:
        raise UserError(f"run {run_id} is not in the results store {store.path}; it may belong to another workspace")
    ranked = offer_list(store, run)
    if cand_id:
        cand = store.candidate(cand_id)
        if cand is None or cand["run_id"] != run["id"]:
            raise UserError(f"candidate {cand_id} is not part of run {run_id}")
    else:
        if not ranked:
            raise UserError(f"run {run_id} has no passing candidate to show")
        cand = ranked[ls.offers.get(run["id"], 0) % len(ranked)]
    return run, cand, ranked


def source_changed(ls: "KsearchServer", run: dict) -> str | None:
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


def candidate_payload(ls: "KsearchServer", run: dict, cand: dict, ranked: list[dict]) -> dict[str, Any]:
    p = edits.plan(ls, run, cand)
    pos = next((i for i, c in enumerate(ranked) if c["id"] == cand["id"]), None)
    where = f"candidate {pos + 1}/{len(ranked)}" if pos is not None else f"candidate #{cand['seq']}"
    label = Best(run, cand, ls.results.baseline_name(run)).lens_label()
    return {"uri": ls.uri_of(p.target), "original": p.original, "candidate": p.new_text, "language": p.language,
            "title": f"{run.get('kernel')}: {Path(p.target).name} ({where} · {label})",
            "runId": run["id"], "candidateId": cand["id"]}


async def _offer_rerun(ls: "KsearchServer", run: dict, reason: str) -> None:
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
        run, cand, _ = _load(ls, a[0], a[1] if len(a) > 1 else None)
        reason = source_changed(ls, run)
        if reason:
            asyncio.ensure_future(_offer_rerun(ls, run, reason))
            return {"applied": False, "reason": reason}
        p = edits.plan(ls, run, cand)
        target = Path(p.target)
        if not p.exists and not edits.client_can_create(ls):
            # A client that cannot create files over LSP: the server writes the new module itself.
            target.write_text(p.new_text)
            applied, why = True, ""
        else:
            result = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
                edit=edits.workspace_edit(ls, p), label=f"ksearch: accept {target.name}"))
            applied, why = result.applied, result.failure_reason
        if not applied:
            ls.error(f"the editor did not apply the change to {target.name}: {why or 'no reason given'}. "
                     f"Nothing was recorded; Accept again once the file can be edited.")
            return {"applied": False, "reason": why}
        ls.store.decide(run["id"], cand["id"], "accepted", {"target": str(target), "created": not p.exists})
        ls.offers.pop(run["id"], None)
        ls.results_changed(immediate=True)
        return {"applied": True, "uri": ls.uri_of(target)}

    @ls.command("ksearch.reject")
    @guarded(ls, "Reject")
    def reject(*args):
        a = _args(args, 1, "ksearch.reject [runId, candidateId]")
        run, cand, _ = _load(ls, a[0], a[1] if len(a) > 1 else None)
        ls.store.decide(run["id"], cand["id"], "rejected", {})
        ls.offers.pop(run["id"], None)
        ls.results_changed(immediate=True)
        return {"rejected": True}

    @ls.command("ksearch.next")
    @guarded(ls, "Next candidate")
    def next_candidate(*args):
        a = _args(args, 1, "ksearch.next [runId]")
        run, cand, ranked = _load(ls, a[0], None)
        if a[1:] and a[1]:        # from a specific candidate: the one after it
            i = next((i for i, c in enumerate(ranked) if c["id"] == a[1]), -1)
        else:
            i = ls.offers.get(run["id"], 0)
        if not ranked:
            raise UserError(f"run {run['id']} has no passing candidates")
        nxt = (i + 1) % len(ranked)
        ls.offers[run["id"]] = nxt
        cid = ranked[nxt]["id"]
        ls.protocol.notify("ksearch/showDiff", {"runId": run["id"], "candidateId": cid})
        ls.results_changed(immediate=True)
        return {"runId": run["id"], "candidateId": cid, "index": nxt, "count": len(ranked)}
