"""Inlay hints at the end of each kernel's name line: its best measured result.

`⏱ 1.13× vs original · 0.22 ms @ large` for a timed result (the accepted one, read back from disk), `✓ verified (sim)` for a result
only checked (the simulator never yields a time), nothing where nothing was measured.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types

from . import documents
from .errors import guarded

if TYPE_CHECKING:
    from .state import KsearchServer


def hints_for(ls: "KsearchServer", uri: str, rng: types.Range | None) -> list[types.InlayHint]:
    path = ls.path_of(uri)
    entry = ls.index.get(path)
    if entry is None:
        return []
    out = []
    for k in entry.kernels:
        line = k.name_line_end.line
        if rng is not None and not (rng.start.line <= line <= rng.end.line):
            continue
        res = ls.kernel_results(path, k.name)
        if res.accepted is not None:
            a = res.accepted
            label, state = a.inlay_label(), f"accepted, {a.state} ({Path(a.target).name})"
            best = a.best
        elif res.pending_best is not None:
            best = res.pending_best
            label, state = best.inlay_label() + " (not accepted)", "waiting for Accept or Reject"
        elif res.no_gain is not None:
            out.append(types.InlayHint(position=k.name_line_end, label="no gain over your kernel", padding_left=True,
                                       tooltip=f"run {res.no_gain.run.id}: {res.no_gain.label()}"))
            continue
        else:
            continue
        t = best.timing
        tip = (f"{state}; run {best.run.id} ({best.run.kind}), candidate #{best.cand.seq}"
               + (f"; {best.lens_label()}; IQR {t.get('iqr_ms', 0):.3g} ms; {t.get('method', '')}" if t else
                  "; checked for correctness only, not timed"))
        out.append(types.InlayHint(position=k.name_line_end, label=label, padding_left=True, tooltip=tip))
    return out


def register(ls: "KsearchServer") -> None:

    @ls.feature(types.TEXT_DOCUMENT_INLAY_HINT)
    @guarded(ls, "Showing kernel timings", default=[])
    def inlay_hint(params: types.InlayHintParams) -> list[types.InlayHint]:
        documents.ensure_fresh(ls, params.text_document.uri)
        return hints_for(ls, params.text_document.uri, params.range)
