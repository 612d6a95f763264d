"""Evaluator pools: where a search evaluates its candidates (this machine, or the nodes of a Ray cluster)."""
from __future__ import annotations

from .base import EvalPool, PoolError, task_key
from .local import LocalPool

__all__ = ["EvalPool", "LocalPool", "PoolError", "make_pool", "task_key"]


def make_pool(cluster: str | None = None, *, limits=None, repeats: int = 20, workers: int | None = None) -> EvalPool:
    """The pool a search uses: LocalPool (one warm worker, or `workers`) unless `cluster` names a Ray cluster
    (`ray://HOST:PORT`, `HOST:PORT`, `auto`, or `local` for a one-node Ray on this machine)."""
    if not cluster:
        return LocalPool(workers=workers or 1, limits=limits, repeats=repeats)
    from .ray_pool import RayPool
    return RayPool(cluster, limits=limits, repeats=repeats, max_workers=workers, local_workers=workers)
