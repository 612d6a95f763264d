"""Hover on a kernel: first what is on disk (the accepted candidate, read back from the module's hash) or
what waits for a decision, then the newest runs — the current one first — as compact tables (only columns
with something in them): time at its workload, speedup over the original, over the task's baseline, where,
and what the candidate is (from its own knobs), with a one-line chart of the best speedup over evaluations."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from . import documents
from .errors import guarded
from pathlib import Path

from ksearch_engine.store import Candidate, Run

from .summary import fmt_ms, plan_label, where

if TYPE_CHECKING:
    from .state import KsearchServer

MAX_ROWS = 8
MAX_RUNS = 2
SPARK = "▁▂▃▄▅▆▇█"


def _cell(s: str, n: int = 70) -> str:
    s = " ".join(str(s).split()).replace("|", "\\|")
    return s if len(s) <= n else s[: n - 1] + "…"


def progress_chart(cands: list[Candidate], original: Candidate | None) -> str:
    """The best speedup over the original after each evaluation, as a one-line chart (a port: nothing)."""
    ot = original.timing if original is not None else None
    if not ot:
        return ""
    best, points = 1.0, []
    for c in cands:
        t = c.timing
        if c.status == "passed" and t and t["median_ms"] > 0:
            best = max(best, ot["median_ms"] / t["median_ms"])
        points.append(best)
    if len(points) < 2:
        return ""
    lo, hi = 1.0, max(points)
    span = (hi - lo) or 1.0
    bars = "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1)))] for v in points)
    return f"`{bars}` best {hi:.2f}× vs original after {len(points)} evals"


def run_table(ls: "KsearchServer", run: Run, live_status: str | None = None) -> list[str]:
    """One run: a title line, then a table whose columns are only those with something to show."""
    store = ls.store
    cands = store.candidates(run.id)
    original = store.original(run.id)
    offered = {c.id for c in store.offers(run.id)}
    decided = {d.candidate_id: d.decision for d in store.decisions(run.id)}
    base = ls.results.baseline_name(run)
    passing = sorted((c for c in cands if c.status == "passed"),
                     key=lambda c: (not c.is_original, (c.timing or {}).get("median_ms", float("inf")), c.seq))
    rows = passing + [c for c in cands if c.status != "passed"]
    evals = len(cands)
    status = live_status or run.status
    title = (f"**{run.kind}** `{run.id}` · {status} · {evals} eval{'s' if evals != 1 else ''}"
             + (f" · {run.proposer}" if run.proposer else ""))
    cols: dict[str, list[str]] = {"#": [], "result": [], "time": [], "vs original": [], f"vs {_cell(base, 24)}": [],
                                  "where": [], "what": []}
    for c in rows[:MAX_ROWS]:
        t = c.timing
        res = c.result or {}
        b = ls.results.best(store, run, c)
        mark = (" ★" if c.id in offered and c.id == run.best_candidate else "") + \
            (f" ({decided[c.id]})" if c.id in decided else "") + (" · offered" if c.id in offered and c.id != run.best_candidate else "")
        if c.status == "passed" and t is None:
            result = f"✓ verified ({res.get('verified_by') or res.get('backend') or '?'})"
        else:
            result = c.status
        cols["#"].append(str(c.seq))
        cols["result"].append(_cell(result + mark, 40))
        cols["time"].append(f"{fmt_ms(t['median_ms'])} @ {t.get('workload') or '?'}" if t else "")
        vo = b.vs_original
        cols["vs original"].append("1.00× (yours)" if c.is_original and t else (f"{vo:.2f}×" if vo else ""))
        cols[f"vs {_cell(base, 24)}"].append(f"{t['speedup']:.2f}×" + (" ⚠" if t.get("suspect") else "") if t else "")
        cols["where"].append(_cell(where(res), 40) if res else "")
        cols["what"].append(_cell(plan_label(c, 56) if c.status == "passed" else (c.message or plan_label(c, 56)), 60))
    keep = [k for k, v in cols.items() if any(x.strip() for x in v)]
    lines = [title]
    chart = progress_chart(cands, original)
    if chart:
        lines.append(chart)
    if keep and rows:
        lines += ["", "| " + " | ".join(keep) + " |", "|" + "---|" * len(keep)]
        for i in range(min(len(rows), MAX_ROWS)):
            lines.append("| " + " | ".join(cols[k][i] for k in keep) + " |")
    if len(rows) > MAX_ROWS:
        lines.append(f"\n…and {len(rows) - MAX_ROWS} more (`ksearch show {run.id}`)")
    return lines


def hover_text(ls: "KsearchServer", path: str, kernel: str) -> str | None:
    res = ls.kernel_results(path, kernel)
    job = ls.jobs.active_for(path, kernel)
    runs = [r for r in res.runs if r.status in ("done", "failed", "cancelled") or (job and r.id == job.run_id)]
    runs = [r for r in runs if ls.store.candidates(r.id) or (job and r.id == job.run_id)][:MAX_RUNS]
    if not runs and job is None and res.accepted is None:
        return None
    parts = [f"### ksearch · `{kernel}`"]
    if res.accepted is not None:
        a = res.accepted
        parts.append(f"On disk ({Path(a.target).name}): " + (a.best.full_label() if a.state == "on disk" else a.label()))
    elif res.pending_best is not None:
        parts.append(f"Offered, not accepted yet: {res.pending_best.full_label()}")
    elif res.no_gain is not None:
        parts.append(f"{res.no_gain.label()}: nothing to accept (run `{res.no_gain.run.id}`).")
    if job is not None:
        parts.append(f"⟳ {job.title}: {job.progress_message()}")
    for r in runs:
        live = job.state if job is not None and r.id == job.run_id else None
        parts.append("\n".join(run_table(ls, r, live)))
    parts.append("_Speedups are over your kernel as it is, on the same backend and workload; the task's baseline "
                 "op second. Simulated checks verify correctness only and are never shown as a time._")
    return "\n\n".join(parts)


def register(ls: "KsearchServer") -> None:

    @ls.feature(types.TEXT_DOCUMENT_HOVER)
    @guarded(ls, "Showing kernel results")
    def hover(params: types.HoverParams) -> types.Hover | None:
        uri = params.text_document.uri
        documents.ensure_fresh(ls, uri)
        path = ls.path_of(uri)
        k = ls.index.kernel_at(path, params.position)
        # Only over the kernel's signature: inside the body, hovers belong to the code.
        if k is None or params.position.line > k.name_range.end.line + 2:
            return None
        text = hover_text(ls, path, k.name)
        if text is None:
            return None
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text), range=k.name_range)
