"""Defaults shared by the CLI, the language server, the worker and the search: one place for each."""
from __future__ import annotations

EVALUATIONS = 24          # candidate evaluations per Optimize run (ksearch.budget.evaluations, --budget)
MIN_GAIN = 0.02           # a new best must beat the old one by 2%: smaller gains are within timing noise
UNTIMED_BACKENDS = frozenset({"sim"})   # backends that verify candidates but never time them
DEVICE_INPUT_BYTES = 4 << 20   # input sets this large are drawn on the device by MLX (task.device_inputs)


def clearly_faster(median_ms: float, iqr_ms: float, than_ms: float, than_iqr_ms: float) -> bool:
    """The one rule for "faster" (a new best in the search, an offer in the store): the candidate's upper quartile,
    raised by MIN_GAIN, below the other's lower quartile (each time's median +- half its interquartile range). Two
    medians 2% apart whose spreads overlap are noise, not a speedup, and are never offered."""
    return (median_ms + max(iqr_ms, 0.0) / 2) * (1 + MIN_GAIN) < than_ms - max(than_iqr_ms, 0.0) / 2
