"""A run's log in words, from the events the store kept (`ksearch show RUN`, the editor's output channel)."""
from __future__ import annotations

import time

from .store import Event, Run, Store


def event_line(e: Event) -> tuple[str, str]:
    """(level, text) of one stored event."""
    d = e.data or {}
    t = e.type
    if t == "stage":
        return "info", f"{d.get('stage', '?')}" + (f": {d['message']}" if d.get("message") else "")
    if t == "node":
        return "info", f"plan node {d.get('node_id', '?')} (round {d.get('round', 0)}): {d.get('plan', '')}"
    if t == "candidate":
        bad = d.get("status") not in ("passed",)
        return ("warning" if bad else "info"), f"candidate {d.get('candidate_id', '?')}: {d.get('summary', d.get('status', ''))}"
    if t == "best":
        return "info", f"new best {d.get('candidate_id', '?')}: {d.get('summary', '')}"
    if t == "log":
        return d.get("level", "info"), d.get("message", "")
    if t == "error":
        return "error", d.get("message", "")
    if t == "done":
        level = {"done": "info", "cancelled": "warning"}.get(d.get("status"), "error")
        return level, f"{d.get('status', '?')}: {d.get('message', '')}"
    return "info", f"{t}: {d}"


def run_log_lines(store: Store, run: Run) -> list[str]:
    """Every stored event of the run, oldest first, `HH:MM:SS level  text`; the traceback of a crash last."""
    out = []
    for e in store.events(run.id):
        level, text = event_line(e)
        stamp = time.strftime("%H:%M:%S", time.localtime(e.created))
        out.append(f"{stamp} {level:<7} {text}")
    if not out:
        out.append(f"(no events stored for run {run.id}: {run.status}; {run.message or 'no message'})")
    if run.log_tail:
        out.append("traceback of the failure:")
        out.extend("  " + line for line in run.log_tail.rstrip().splitlines())
    return out
