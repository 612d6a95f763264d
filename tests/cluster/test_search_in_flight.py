"""The search keeps as many candidates in flight as its pool has devices, and no more than its budget."""
from __future__ import annotations

import threading

from ksearch_engine.evaluate import Limits
from ksearch_engine.events import SearchRequest
from ksearch_engine.pool import LocalPool
from ksearch_engine.search import run_search
from ksearch_engine.store import Store
from tests.cluster.test_search_on_cluster import family


class CountingPool(LocalPool):
    """A LocalPool with two workers that records how many candidates were in flight at once."""

    def __init__(self, **kw):
        super().__init__(workers=2, **kw)
        self.now = self.most = self.submitted = 0
        self._n = threading.Lock()

    def submit(self, task, source, backend, *, timing=True, bar=None):
        with self._n:
            self.now += 1
            self.submitted += 1
            self.most = max(self.most, self.now)
        fut = super().submit(task, source, backend, timing=timing, bar=bar)
        fut.add_done_callback(lambda f: self._done())
        return fut

    def _done(self):
        with self._n:
            self.now -= 1


def test_two_devices_keep_two_candidates_in_flight_within_the_budget(tmp_path):
    store = Store(tmp_path / "ks.db")
    req = SearchRequest(store_path=str(store.path), backend="sim", max_evals=5, seed=3, family="double")
    with CountingPool(limits=Limits(wall_s=120)) as pool:
        done = run_search(req, store, lambda e: None, family=family(), limits=Limits(wall_s=120), pool=pool)
    cands = store.candidates(req.run_id)
    assert pool.most == 2                                   # two evaluated at once, never more
    assert pool.submitted == done.evals == len(cands) == 5  # the budget holds with candidates in flight
    assert all(c["status"] != "running" for c in cands)     # every result taken and stored
    firsts = [c["node_id"] for c in cands if "(debug" not in c["plan"]]
    assert len(firsts) == len(set(firsts))                  # no plan node handed out twice
