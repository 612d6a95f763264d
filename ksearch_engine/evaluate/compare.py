"""Compare a candidate's output with the expected one: the one comparison every check uses.

Used by the evaluator for verification and timed calls alike, on every backend, so ports checked in the
simulator are judged by it too. Special values are compared exactly: NaN must sit where the expected output
has NaN, and an infinity must sit where the expected output has the same infinity (same sign); everything
else must be finite and within `atol + rtol * |expected|`. No arithmetic on infinities is done, so an
infinity in the expected output can never turn the error into NaN (which compares as "not worse" and would
let anything pass).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Worst:
    """The worst element of one comparison: `excess` > 0 means it is outside the tolerance."""
    excess: float
    index: tuple[int, ...]
    got: float
    expected: float
    abs_err: float
    max_abs_err: float   # largest finite |got - expected| over the array


def excess(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """Per element, how far outside `atol + rtol * |expected|` it is (> 0: outside); specials exactly: a NaN
    or an infinity that does not sit where the expected output has the same one is +inf, never NaN."""
    g, e = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    fin_g, fin_e = np.isfinite(g), np.isfinite(e)
    both = fin_g & fin_e
    special_ok = ~fin_g & ~fin_e & ((np.isnan(g) & np.isnan(e)) | (g == e))  # NaN~NaN, +inf~+inf, -inf~-inf
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(both, np.abs(np.where(both, g, 0.0) - np.where(both, e, 0.0)), np.where(special_ok, 0.0, np.inf))
        allowed = np.where(fin_e, atol + rtol * np.abs(np.where(fin_e, e, 0.0)), 0.0)
        return err - allowed


FAST_MIN = 1 << 20      # elements from which a large float output is first checked in float32 chunks
_CHUNK = 1 << 20
_MARGIN = 1e-5          # float32 rounding of |got - expected| and of the bound stays far inside this


def _fast(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> Worst | None:
    """A large all-finite float32/float16 output that is clearly inside the tolerance, checked in float32
    chunks (a 33M-element output: ~15 float64 temporaries of 268 MB each otherwise). None when any element is
    not finite or is within _MARGIN of its bound: the exact float64 path decides those."""
    g, e = got.reshape(-1), expected.reshape(-1)
    best = (-np.inf, 0, 0.0, 0.0, 0.0)        # (excess, flat index, got, expected, abs err)
    max_abs = 0.0
    for s in range(0, g.size, _CHUNK):
        gc = g[s:s + _CHUNK].astype(np.float32, copy=False)
        ec = e[s:s + _CHUNK].astype(np.float32, copy=False)
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.abs(gc - ec)
            lim = np.float32(atol) + np.float32(rtol) * np.abs(ec)
            if not bool(np.all(d <= lim * np.float32(1 - _MARGIN))):   # NaN/inf anywhere compares False
                return None
        x = d - lim
        i = int(np.argmax(x))
        if float(x[i]) > best[0]:
            best = (float(x[i]), s + i, float(gc[i]), float(ec[i]), float(d[i]))
        max_abs = max(max_abs, float(d.max()))
    idx = tuple(int(k) for k in np.unravel_index(best[1], got.shape)) if got.ndim else ()
    return Worst(excess=best[0], index=idx, got=best[2], expected=best[3], abs_err=best[4], max_abs_err=max_abs)


def compare(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float, *, exact_specials: bool = True) -> Worst | None:
    """The worst element of `got` against `expected` (same shape), or None for empty arrays.
    `exact_specials=False` is the old arithmetic, kept only so a test can show what it let through."""
    ga, ea = np.asarray(got), np.asarray(expected)
    if (exact_specials and ga.size >= FAST_MIN and ga.shape == ea.shape
            and ga.dtype in (np.float16, np.float32) and ea.dtype in (np.float16, np.float32)):
        w = _fast(ga, ea, atol, rtol)
        if w is not None:
            return w
    g, e = np.asarray(ga, dtype=np.float64), np.asarray(ea, dtype=np.float64)
    if g.size == 0:
        return None
    if not exact_specials:
        err = np.abs(g - e)
        err = np.where(np.isnan(g) & np.isnan(e), 0.0, err)
        err = np.where(np.isnan(g) != np.isnan(e), np.inf, err)
        excess = err - (atol + rtol * np.abs(e))
        i = int(np.argmax(np.where(np.isnan(excess), np.inf, excess)))   # lands on a NaN: 'not worse'
        err = np.where(np.isnan(err), np.inf, err)
    else:
        fin_g, fin_e = np.isfinite(g), np.isfinite(e)
        both = fin_g & fin_e
        special_ok = ~fin_g & ~fin_e & ((np.isnan(g) & np.isnan(e)) | (g == e))  # NaN~NaN, +inf~+inf, -inf~-inf
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.where(both, np.abs(np.where(both, g, 0.0) - np.where(both, e, 0.0)), np.where(special_ok, 0.0, np.inf))
            allowed = np.where(fin_e, atol + rtol * np.abs(np.where(fin_e, e, 0.0)), 0.0)
            excess = err - allowed   # never NaN: err is 0, finite or +inf; allowed is finite
        i = int(np.argmax(excess))
    fin_err = np.abs(g - e)[np.isfinite(g) & np.isfinite(e)] if exact_specials else err[np.isfinite(err)]
    idx = tuple(int(k) for k in np.unravel_index(i, g.shape)) if g.ndim else ()
    return Worst(excess=float(excess.flat[i]), index=idx, got=float(g.flat[i]), expected=float(e.flat[i]),
                 abs_err=float(err.flat[i]),
                 max_abs_err=float(fin_err.max()) if fin_err.size else 0.0)
