"""Defaults shared by the CLI, the language server, the worker and the search: one place for each."""
from __future__ import annotations

EVALUATIONS = 24          # candidate evaluations per Optimize run (ksearch.budget.evaluations, --budget)
MIN_GAIN = 0.02           # a new best must beat the old one by 2%: smaller gains are within timing noise
UNTIMED_BACKENDS = frozenset({"sim"})   # backends that verify candidates but never time them
DEVICE_INPUT_BYTES = 4 << 20   # input sets this large are drawn on the device by MLX (task.device_inputs)
