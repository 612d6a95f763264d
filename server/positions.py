"""Positions in the encoding the client negotiated (UTF-16 by default, UTF-8 for Neovim).

`ksearch_engine.source` reports LSP positions in UTF-16 code units; a client that chose UTF-8 or UTF-32
needs them converted, or ranges drift on lines holding non-ASCII text.
"""
from __future__ import annotations

from lsprotocol import types


def _units(ch: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(ch.encode("utf-8"))
    if encoding == "utf-32":
        return 1
    return 2 if ord(ch) > 0xFFFF else 1


def convert_column(line: str, utf16_col: int, encoding: str) -> int:
    """A UTF-16 column on `line` as a column in `encoding`."""
    if encoding == "utf-16" or line.isascii():
        return utf16_col
    seen = out = 0
    for ch in line:
        if seen >= utf16_col:
            break
        seen += 2 if ord(ch) > 0xFFFF else 1
        out += _units(ch, encoding)
    return out


def line_length(line: str, encoding: str) -> int:
    return sum(_units(ch, encoding) for ch in line) if not line.isascii() else len(line)


class Positions:
    """Converts source-model positions (UTF-16) for one text into the client's encoding."""

    def __init__(self, text: str, encoding: str | None):
        self.lines = text.split("\n")
        self.encoding = str(encoding or "utf-16").lower()

    def line(self, n: int) -> str:
        return self.lines[n].rstrip("\r") if 0 <= n < len(self.lines) else ""

    def position(self, line: int, character: int) -> types.Position:
        return types.Position(line=line, character=convert_column(self.line(line), character, self.encoding))

    def range(self, r) -> types.Range:
        return types.Range(start=self.position(r.start.line, r.start.character),
                           end=self.position(r.end.line, r.end.character))

    def end_of_line(self, n: int) -> types.Position:
        return types.Position(line=n, character=line_length(self.line(n), self.encoding))
