"""Which benchmark task a kernel has, and the text of a new task file for 'Create benchmark task'.

Both answers come from the engine's resolver (ksearch_engine/resolve.py), shared with the CLI and the search:
a task file next to the kernel, a CUDA kernel (its own launches make the task), or a recognised family.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ksearch_engine.resolve import optimizable, prefilled_task_text, task_file_path  # noqa: F401 (re-exported)
from ksearch_engine.source import KernelInfo
from ksearch_engine.task import find_task_file


@dataclass
class TaskInfo:
    task_file: Path | None
    family: str | None
    own_kernel: bool = False          # the kernel itself makes the task (a CUDA kernel: its launches)

    @property
    def has_task(self) -> bool:
        return self.task_file is not None or self.family is not None or self.own_kernel


class TaskFinder:
    """Caches the answer per (file, kernel, text hash): code lenses ask on every keystroke."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, str], tuple[bool, str | None]] = {}

    def find(self, path: str, kernel: str, text_hash: str = "") -> TaskInfo:
        tf = find_task_file(path, kernel)
        if tf is not None:
            return TaskInfo(tf, None)
        key = (path, kernel, text_hash)
        if key not in self._cache:
            try:
                self._cache[key] = optimizable(path, kernel)
            except Exception:  # noqa: BLE001 - an engine without specs/families: the user writes a task
                self._cache[key] = (False, None)
        ok, fam = self._cache[key]
        return TaskInfo(None, fam, own_kernel=ok and Path(path).suffix in (".cu", ".cuh"))


def benchmark_task_text(source: str | Path, k: KernelInfo) -> str:
    """A task file for kernel `k`, with inputs and dims guessed from its signature, for the user to edit."""
    return prefilled_task_text(source, k)
