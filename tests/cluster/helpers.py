"""Shared by the cluster tests."""
from __future__ import annotations

import time


def wait_until_busy(pool, timeout: float = 60.0, settle: float = 1.0) -> None:
    """Wait until one of `pool`'s workers reports a candidate in hand (then `settle` more seconds, so that
    `cluster status` sees it too)."""
    deadline = time.monotonic() + timeout
    while not any(w["busy"] for w in pool.workers()) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(settle)
