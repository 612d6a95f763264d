"""The local pool (the default): candidates evaluated on this machine by warm Evaluators.

With `workers=1` (the default) a candidate is evaluated in the calling thread when it is submitted, exactly
as the search did before pools existed: one warm sandboxed worker per (task, backend), nothing in parallel.
With more workers, up to that many Evaluators of the same (task, backend) run side by side in threads (each
Evaluator's sandboxed child is its own process, so they run in parallel on the CPU cores).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

from .. import backend as backends
from ..evaluate import EvalResult, Evaluator, Limits
from ..task import KernelTask
from .base import EvalPool, PoolError, local_node, task_key

MAX_TASKS = 4   # warm Evaluators kept for this many (task, backend) pairs; the least recently used are closed


class LocalPool(EvalPool):
    def __init__(self, *, workers: int = 1, limits: Limits | None = None, repeats: int = 20):
        if workers < 1:
            raise PoolError(f"a local pool needs at least one worker (got {workers})")
        self.workers, self.limits, self.repeats = workers, limits, repeats
        self._lock = threading.Lock()
        self._idle: OrderedDict[str, list[Evaluator]] = OrderedDict()   # key -> warm, idle Evaluators
        self._busy = 0
        self._all: set[Evaluator] = set()                                # every open Evaluator, for close()
        self._closed = False
        self._exec = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ksearch-eval") if workers > 1 else None
        self._node = local_node()

    def info(self, backend: str | None):
        try:
            return backends.info(backend)
        except ValueError as e:
            raise PoolError(str(e)) from None

    def slots(self, backend: str) -> int:
        return self.workers

    def capacity(self, backend: str) -> int:
        with self._lock:
            return self.workers - self._busy

    def submit(self, task: KernelTask, source: str, backend: str, *, timing: bool = True,
               bar: tuple[float, float] | None = None) -> "Future[EvalResult]":
        if self._exec is None:
            fut: Future = Future()
            fut.set_running_or_notify_cancel()
            try:
                fut.set_result(self._evaluate(task, source, backend, timing, bar))
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the future
                fut.set_exception(e)
                if not isinstance(e, Exception):
                    raise
            return fut
        return self._exec.submit(self._evaluate, task, source, backend, timing, bar)

    def _evaluate(self, task: KernelTask, source: str, backend: str, timing: bool,
                  bar: tuple[float, float] | None = None) -> EvalResult:
        key = task_key(task, backend)
        ev = None
        try:
            ev = self._checkout(key, task, backend)
            res = ev.evaluate(source, timing=timing, bar=bar)
        except BaseException:
            with self._lock:
                self._busy -= 1
                self._all.discard(ev)
            if ev is not None:
                ev.close()
            raise
        res.sandbox = {**res.sandbox, "node": dict(self._node)}
        self._checkin(key, ev)
        return res

    def _checkout(self, key: str, task: KernelTask, backend: str) -> Evaluator:
        with self._lock:
            self._busy += 1
            idle = self._idle.get(key)
            if idle:
                self._idle.move_to_end(key)
                return idle.pop()
            stale = []
            while len(self._idle) >= MAX_TASKS and key not in self._idle:
                old, evs = self._idle.popitem(last=False)
                stale += evs
            self._idle.setdefault(key, [])
        for ev in stale:
            self._all.discard(ev)
            ev.close()
        ev = Evaluator(task, backend, limits=self.limits, repeats=self.repeats, first_is_reference=True)
        with self._lock:
            self._all.add(ev)
        return ev

    def _checkin(self, key: str, ev: Evaluator) -> None:
        with self._lock:
            self._busy -= 1
            if not self._closed:
                self._idle.setdefault(key, []).append(ev)
                return
        ev.close()

    def close(self) -> None:
        if self._exec is not None:
            self._exec.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            self._closed = True
            evs = list(self._all)
            self._all.clear()
            self._idle.clear()
        for ev in evs:
            ev.close()
