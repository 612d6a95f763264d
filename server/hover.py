"""Hover on a kernel: a Markdown table of its candidates from the newest runs — latency, spread, speedup
vs the task's baseline and vs the original, device and backend, correctness trials, and the plan path in
the world model that produced each one."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ksearch_engine.worldmodel import plan_brief

from . import documents
from .errors import guarded
from .summary import fmt_ms, timing_of, where

if TYPE_CHECKING:
    from .state import KsearchServer

MAX_ROWS = 10
MAX_RUNS = 2


def _cell(s: str, n: int = 70) -> str:
    s = " ".join(str(s).split()).replace("|", "\\|")
    return s if len(s) <= n else s[: n - 1] + "…"


def _original_ms(cands: list[dict]) -> float | None:
    """The run's starting point: the candidate the search calls 'original', else its first timed one."""
    ordered = sorted(cands, key=lambda c: (c.get("plan") != "original", c["seq"]))
    for c in ordered:
        t = timing_of(c)
        if t and c["status"] == "passed":
            return t["median_ms"]
    return None


def run_table(ls: "KsearchServer", run: dict) -> list[str]:
    store = ls.store
    cands = store.candidates(run["id"])
    ranked = store.ranked(run["id"])
    others = [c for c in cands if c["status"] != "passed"]
    rows = ranked + others
    decided = {d["candidate_id"]: d["decision"] for d in store.decisions(run["id"])}
    base = ls.results.baseline_name(run)
    orig = _original_ms(cands)
    lines = [f"**{run['kind']}** run `{run['id']}` · {run['status']}"
             + (f" · {run['proposer']}" if run.get("proposer") else "") + f" · {len(cands)} candidates",
             "",
             f"| # | status | latency | spread (IQR) | vs {_cell(base, 24)} | vs original | device (backend) | trials | plan |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in rows[:MAX_ROWS]:
        res = c.get("result") or {}
        t = timing_of(c)
        if t:
            lat, iqr = fmt_ms(t["median_ms"]), fmt_ms(t.get("iqr_ms") or 0)
            vs_base = f"{t.get('speedup', 0):.3g}×" + (" ⚠" if t.get("suspect") else "")
            vs_orig = f"{orig / t['median_ms']:.3g}×" if orig and t["median_ms"] else "—"
        elif c["status"] == "passed":
            lat, iqr, vs_base, vs_orig = f"✓ verified ({res.get('verified_by') or res.get('backend') or '?'})", "—", "—", "—"
        else:
            lat = iqr = vs_base = vs_orig = "—"
        status = c["status"] + (" ★" if c["id"] == run.get("best_candidate") else "") \
            + (f" ({decided[c['id']]})" if c["id"] in decided else "")
        place = where(res)
        trials = str(res.get("trials", "—")) if res else "—"
        plan = plan_brief(c.get("plan") or "", 70) if c.get("plan") else (c.get("message") or "")
        lines.append(f"| {c['seq']} | {_cell(status, 30)} | {lat} | {iqr} | {vs_base} | {vs_orig} | {_cell(place, 48)} "
                     f"| {trials} | {_cell(plan)} |")
    if len(rows) > MAX_ROWS:
        lines.append(f"\n…and {len(rows) - MAX_ROWS} more (`ksearch show {run['id']}`)")
    return lines


def hover_text(ls: "KsearchServer", path: str, kernel: str) -> str | None:
    res = ls.results.for_kernel(ls.store, path, kernel)
    runs = [r for r in res.runs if ls.store.candidates(r["id"])][:MAX_RUNS]
    job = ls.jobs.active_for(path, kernel)
    if not runs and job is None:
        return None
    parts = [f"### ksearch · `{kernel}`"]
    if job is not None:
        parts.append(f"⟳ {job.title}: {job.progress_message()}")
    if res.best is not None:
        parts.append(f"Best: {res.best.inlay_label()}")
    for r in runs:
        parts.append("\n".join(run_table(ls, r)))
    t = res.best.timing if res.best is not None else None
    if t:
        parts.append(f"_Timed at workload `{t.get('workload', '?')}`: {t.get('method', '')}. "
                     f"★ the search's best. Simulated checks verify correctness only and are never shown as a time._")
    else:
        parts.append("_★ the search's best. Simulated checks verify correctness only and are never shown as a time._")
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
