"""What accepting a candidate changes: which document, its text before and after, and the WorkspaceEdit.

- a port (or any candidate with `target_file`): the new module — `CreateFile` + an insert when it does not
  exist yet, a whole-document replacement when it does;
- an optimized MLX kernel in a `.py` file: the kernel's source string is replaced in place (versioned);
- an optimized CUDA/Metal kernel: the MLX module goes to the kernel's own module (`<stem>_mlx.py` for a
  one-kernel file, else `<stem>_<kernel>_mlx.py`: portfile.module_path_for), created or replaced as a whole.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types

from ksearch_engine.source import find_kernels

from .errors import UserError
from .positions import Positions

if TYPE_CHECKING:
    from .state import KsearchServer


@dataclass
class PlannedEdit:
    target: str                     # path of the document that changes
    exists: bool
    original: str                   # its current text ("" for a new file)
    new_text: str                   # its text after the edit
    replace: types.Range | None     # replace only this range (in-place kernel edits), else the whole text
    replacement: str
    version: int | None             # the open document's version the edit applies to

    @property
    def language(self) -> str:
        return {".py": "python", ".cu": "cuda-cpp", ".cuh": "cuda-cpp", ".metal": "metal"}.get(
            Path(self.target).suffix, "plaintext")


def _whole_range(text: str, encoding: str) -> types.Range:
    pos = Positions(text, encoding)
    return types.Range(start=types.Position(line=0, character=0), end=pos.end_of_line(len(pos.lines) - 1))


def _kernel_literal(module: str, name: str) -> str | None:
    """The source string (as written) of the MLX kernel named `name`, or of the only kernel, in a module."""
    ks = find_kernels(module, "python").kernels
    k = next((k for k in ks if k.name == name), ks[0] if len(ks) == 1 else None)
    return k.text if k else None


def plan(ls: "KsearchServer", run, cand) -> PlannedEdit:
    src_path = run.get("file") or ""
    kernel = run.get("kernel") or ""
    text = cand.get("target_text") or cand["source"]
    if cand.get("target_file"):
        return _to_file(ls, cand["target_file"], text)
    if src_path.endswith(".py"):
        current = ls.current_text(src_path)
        if current is None:
            raise UserError(f"{Path(src_path).name} no longer exists: re-create it or re-run the job")
        ls.index.update(src_path, current, getattr(ls.document(ls.uri_of(src_path)), "version", None))
        k = ls.index.kernel(src_path, kernel)
        literal = cand.get("target_text") or _kernel_literal(cand["source"], kernel)
        if k is not None and literal:
            r = k.info.range
            lines = current.split("\n")
            start = sum(len(line) + 1 for line in lines[:r.start.line]) + _py_index(lines[r.start.line], r.start.character)
            end = sum(len(line) + 1 for line in lines[:r.end.line]) + _py_index(lines[r.end.line], r.end.character)
            doc = ls.document(ls.uri_of(src_path))
            return PlannedEdit(target=src_path, exists=True, original=current,
                               new_text=current[:start] + literal + current[end:], replace=k.range,
                               replacement=literal, version=doc.version if doc else None)
    # A CUDA or Metal kernel's optimized MLX version: the kernel's own MLX module (where its port also goes), so
    # that accepting one kernel's result never overwrites another kernel's.
    return _to_file(ls, ls.module_path(src_path, kernel), text)


def _py_index(line: str, utf16_col: int) -> int:
    seen = 0
    for i, ch in enumerate(line):
        if seen >= utf16_col:
            return i
        seen += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


def _to_file(ls: "KsearchServer", target: str, text: str) -> PlannedEdit:
    current = ls.current_text(target)
    doc = ls.document(ls.uri_of(target))
    return PlannedEdit(target=target, exists=current is not None, original=current or "", new_text=text,
                       replace=None, replacement=text, version=doc.version if doc else None)


def workspace_edit(ls: "KsearchServer", p: PlannedEdit) -> types.WorkspaceEdit:
    uri = ls.uri_of(p.target)
    if p.replace is not None:
        rng = p.replace
    elif p.exists:
        rng = _whole_range(p.original, ls.index.encoding)
    else:
        rng = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))
    edit = types.TextEdit(range=rng, new_text=p.replacement)
    doc_edit = types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=p.version),
        edits=[edit])
    changes: list = []
    if not p.exists:
        changes.append(types.CreateFile(uri=uri, options=types.CreateFileOptions(overwrite=False, ignore_if_exists=True)))
    changes.append(doc_edit)
    return types.WorkspaceEdit(document_changes=changes)


def client_can_create(ls: "KsearchServer") -> bool:
    ops = []
    try:
        ops = ls.client_capabilities.workspace.workspace_edit.resource_operations or []
    except AttributeError:
        pass
    return any(str(getattr(o, "value", o)) == "create" for o in ops)
