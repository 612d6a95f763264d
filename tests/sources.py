"""Writing CUDA test sources to disk and finding their lines: shared by the capture and port tests."""
from __future__ import annotations

import textwrap
from pathlib import Path


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line of `text` holding `needle` (as written to disk by write())."""
    return next(i for i, ln in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in ln)


def write(tmp_path: Path, name: str, text: str) -> Path:
    """`text`, dedented, as tmp_path/name (folders made)."""
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p
