"""The workspace index: kernels found in each file (open documents and files on disk), keyed by path.

A file is re-parsed only when its text hash changes, so watcher events can be treated as hints: any event on
a path means "rescan and hash it".
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types

from ksearch_engine.source import KernelInfo, ParseResult, find_kernels

from .positions import Positions

KERNEL_SUFFIXES = (".cu", ".cuh", ".metal", ".py")
SKIP_DIRS = {".git", ".ksearch", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache",
             ".pytest_cache", "build", "dist", ".editor-deps"}
MAX_SCAN_FILES = 5000
MAX_FILE_BYTES = 4 * 1024 * 1024


def is_kernel_file(path: str | Path) -> bool:
    return str(path).lower().endswith(KERNEL_SUFFIXES)


def may_hold_kernels(path: str, text: str) -> bool:
    """Python files are parsed only when they mention an MLX custom-kernel constructor."""
    if path.lower().endswith(".py"):
        return "metal_kernel" in text or "cuda_kernel" in text
    return True


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


@dataclass
class KernelEntry:
    info: KernelInfo
    range: types.Range           # whole definition, client encoding
    name_range: types.Range
    name_line_end: types.Position

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def is_cuda(self) -> bool:
        return self.info.language == "cuda"

    def contains(self, pos: types.Position) -> bool:
        """Inside the definition, or on the line naming it (an MLX kernel's name sits apart from its source)."""
        s, e = self.range.start, self.range.end
        return ((s.line, s.character) <= (pos.line, pos.character) <= (e.line, e.character)
                or pos.line == self.name_range.start.line)


@dataclass
class FileEntry:
    path: str
    text: str
    hash: str
    version: int | None             # editor version when open, None when read from disk
    parse: ParseResult | None
    kernels: list[KernelEntry] = field(default_factory=list)
    positions: Positions | None = None


class WorkspaceIndex:
    """Kernels by file. Methods are cheap and synchronous; parsing one file takes milliseconds."""

    def __init__(self) -> None:
        self.files: dict[str, FileEntry] = {}
        self.encoding = "utf-16"

    def update(self, path: str, text: str, version: int | None = None) -> tuple[FileEntry, bool]:
        """Index `text` as the content of `path`; returns the entry and whether its kernels may have changed."""
        h = text_hash(text)
        old = self.files.get(path)
        if old is not None and old.hash == h:
            old.version = version if version is not None else old.version
            return old, False
        entry = FileEntry(path=path, text=text, hash=h, version=version, parse=None)
        if may_hold_kernels(path, text):
            entry.parse = find_kernels(text, path)
            entry.positions = Positions(text, self.encoding)
            for k in entry.parse.kernels:
                line = k.name_range.start.line
                entry.kernels.append(KernelEntry(
                    info=k, range=entry.positions.range(k.range), name_range=entry.positions.range(k.name_range),
                    name_line_end=entry.positions.end_of_line(line)))
        self.files[path] = entry
        return entry, True

    def update_from_disk(self, path: str) -> tuple[FileEntry | None, bool]:
        """Rescan one file on disk (a watcher hint). A vanished file is dropped from the index."""
        try:
            if os.path.getsize(path) > MAX_FILE_BYTES:
                return None, False
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None, self.files.pop(path, None) is not None
        return self.update(path, text, None)

    def remove(self, path: str) -> None:
        self.files.pop(path, None)

    def get(self, path: str) -> FileEntry | None:
        return self.files.get(path)

    def kernel(self, path: str, name: str) -> KernelEntry | None:
        entry = self.files.get(path)
        return next((k for k in entry.kernels if k.name == name), None) if entry else None

    def kernel_at(self, path: str, pos: types.Position) -> KernelEntry | None:
        entry = self.files.get(path)
        if entry is None:
            return None
        inside = [k for k in entry.kernels if k.contains(pos)]
        # Innermost first: an MLX source string sits inside nothing else, but be safe with nesting.
        return min(inside, key=lambda k: (k.range.end.line - k.range.start.line), default=None)

    def all_kernels(self) -> list[tuple[str, KernelEntry]]:
        return [(p, k) for p, e in self.files.items() for k in e.kernels]


def walk_kernel_files(root: str) -> list[str]:
    """Kernel files under `root` (skipping VCS, build and environment folders), at most MAX_SCAN_FILES."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        for f in filenames:
            if is_kernel_file(f) or f.endswith(".task.toml"):
                out.append(os.path.join(dirpath, f))
                if len(out) >= MAX_SCAN_FILES:
                    return out
    return out
