"""The evaluator's comparison of large outputs: a float32 chunked pass accepts what is clearly inside the
tolerance, and everything else (NaN, infinities, elements near or past their bound) is decided by the exact
float64 path, so both paths give the same verdict."""
import numpy as np
import pytest

from ksearch_engine.evaluate import compare as C

N = C.FAST_MIN + 12345   # above the size where the fast pass is tried, not a multiple of its chunk


@pytest.fixture
def pair():
    rng = np.random.default_rng(7)
    e = rng.standard_normal(N).astype(np.float16)
    g = (e.astype(np.float32) * (1 + 1e-3)).astype(np.float16)
    return g, e


def exact(g, e, atol, rtol, monkeypatch):
    monkeypatch.setattr(C, "FAST_MIN", 1 << 62)
    try:
        return C.compare(g, e, atol, rtol)
    finally:
        monkeypatch.undo()


def test_inside_tolerance_agrees_with_the_exact_path(pair, monkeypatch):
    g, e = pair
    fast = C.compare(g, e, 1e-2, 1e-2)
    slow = exact(g, e, 1e-2, 1e-2, monkeypatch)
    assert fast.excess < 0 and slow.excess < 0
    assert fast.max_abs_err == pytest.approx(slow.max_abs_err, rel=1e-6)
    assert fast.excess == pytest.approx(slow.excess, abs=1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 0.75])
def test_one_bad_element_among_millions_is_found(pair, bad, monkeypatch):
    g, e = pair
    g = g.copy()
    g[N - 3] = np.float16(bad) if not np.isfinite(bad) else g[N - 3] + np.float16(bad)
    w = C.compare(g, e, 1e-2, 1e-2)
    assert w.excess > 0 and w.index == (N - 3,)
    x = exact(g, e, 1e-2, 1e-2, monkeypatch)
    assert (w.index, w.excess, w.max_abs_err) == (x.index, x.excess, x.max_abs_err)


def test_matching_infinities_still_pass(pair):
    g, e = pair
    g, e = g.copy(), e.copy()
    g[5] = e[5] = np.inf
    assert C.compare(g, e, 1e-2, 1e-2).excess <= 0


def test_an_element_just_past_its_bound_fails(monkeypatch):
    e = np.ones(N, dtype=np.float32)
    g = e.copy()
    g[-1] = np.float32(1 + 2e-4 + 1e-6)         # bound: 1e-4 + 1e-4 * 1 = 2e-4
    w = C.compare(g, e, 1e-4, 1e-4)
    assert w.excess > 0 and w.index == (N - 1,)
