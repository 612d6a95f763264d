"""The evaluator pool: where candidates are evaluated, and how many can be in flight at once.

The search hands a pool (task, candidate source, backend) and gets back a `concurrent.futures.Future` that
resolves to an `EvalResult`. A pool says how many devices of a backend it has (`slots`) and how many of them
are free right now (`capacity`); the search keeps at most `slots` candidates in flight. `LocalPool` (the
default) runs them on this machine, `RayPool` on the nodes of a Ray cluster. Each result names the node it ran
on in `result.sandbox["node"]`. Sandboxing is the Evaluator's, per candidate, wherever the pool runs it.
"""
from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from concurrent.futures import Future

from ..backend import BackendInfo
from ..evaluate import EvalResult
from ..task import KernelTask


class PoolError(RuntimeError):
    """The pool cannot evaluate on a backend (no node offers it, the cluster is gone); the message says what to do."""


class EvalPool(ABC):
    """Somewhere to evaluate candidates: one warm Evaluator per device, several devices."""

    @abstractmethod
    def info(self, backend: str | None) -> BackendInfo:
        """The backend candidates will run on (None: the best one the pool has), with its device name."""

    @abstractmethod
    def submit(self, task: KernelTask, source: str, backend: str, *, timing: bool = True,
               bar: tuple[float, float] | None = None) -> "Future[EvalResult]":
        """Queue one candidate; the future gives its EvalResult (never raises for a bad candidate). `bar`: the
        run's best (median ms, IQR ms), for a staged verification (Evaluator.evaluate)."""

    @abstractmethod
    def slots(self, backend: str) -> int:
        """Devices of this backend the pool can use (busy or not): the most candidates worth keeping in flight."""

    @abstractmethod
    def capacity(self, backend: str) -> int:
        """Devices of this backend free right now."""

    @abstractmethod
    def close(self) -> None:
        """Stop every worker the pool started."""

    def __enter__(self) -> "EvalPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def task_key(task: KernelTask, backend: str) -> str:
    """Which warm Evaluator a candidate needs: same task (by content) on the same backend."""
    import hashlib

    return backend + ":" + hashlib.sha256(task.model_dump_json().encode()).hexdigest()[:16]


def local_node() -> dict:
    """This machine, as a result's `sandbox["node"]` names it."""
    host = socket.gethostname()
    return {"name": host, "ip": "local", "pool": "local"}
