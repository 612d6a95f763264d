"""Inlay hints at the end of each kernel's name line: its best measured result.

`⏱ 0.22 ms · 17.4× vs mlx-softmax · H200 (mlx-cuda)` for a timed result, `✓ verified (sim)` for a result
only checked (the simulator never yields a time), nothing where nothing was measured.
"""
from __future__ import annotations

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
        best = ls.results.for_kernel(ls.store, path, k.name).best
        if best is None:
            continue
        t = best.timing
        tip = (f"best of run {best.run['id']} ({best.run['kind']}), candidate #{best.cand['seq']}"
               + (f", workload {t.get('workload', '?')}, IQR {t.get('iqr_ms', 0):.3g} ms; {t.get('method', '')}" if t else
                  "; checked for correctness only, not timed"))
        out.append(types.InlayHint(position=k.name_line_end, label=best.inlay_label(), padding_left=True,
                                   tooltip=tip))
    return out


def register(ls: "KsearchServer") -> None:

    @ls.feature(types.TEXT_DOCUMENT_INLAY_HINT)
    @guarded(ls, "Showing kernel timings", default=[])
    def inlay_hint(params: types.InlayHintParams) -> list[types.InlayHint]:
        documents.ensure_fresh(ls, params.text_document.uri)
        return hints_for(ls, params.text_document.uri, params.range)
