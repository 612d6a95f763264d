"""Byte offsets ⇄ LSP positions (0-based line, UTF-16 character) over UTF-8 source bytes."""
from __future__ import annotations

import bisect

from .models import Position, Range


class TextIndex:
    """Converts byte offsets of one UTF-8 buffer into LSP positions; line starts are built lazily."""

    def __init__(self, data: bytes):
        self.data = data
        self._starts: list[int] | None = None

    def _line_starts(self) -> list[int]:
        if self._starts is None:
            starts = [0]
            find = self.data.find
            i = find(b"\n")
            while i != -1:
                starts.append(i + 1)
                i = find(b"\n", i + 1)
            self._starts = starts
        return self._starts

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self._line_starts(), offset) - 1

    def position(self, offset: int, row: int | None = None, column: int | None = None) -> Position:
        """Position of a byte offset; pass tree-sitter's (row, column) when known to skip the lookup."""
        if row is None or column is None:
            row = self.line_of(offset)
            column = offset - self._line_starts()[row]
        prefix = self.data[offset - column:offset]
        if prefix.isascii():
            char = column
        else:
            char = len(prefix.decode("utf-8", errors="replace").encode("utf-16-le")) // 2
        return Position.model_construct(line=row, character=char)

    def range(self, start: int, end: int) -> Range:
        return Range.model_construct(start=self.position(start), end=self.position(end))

    def node_range(self, node, shift: int = 0) -> Range:
        """Range of a tree-sitter node (parsed from this buffer when shift == 0)."""
        if shift:
            return self.range(node.start_byte + shift, node.end_byte + shift)
        return Range.model_construct(
            start=self.position(node.start_byte, node.start_point[0], node.start_point[1]),
                     end=self.position(node.end_byte, node.end_point[0], node.end_point[1]))
