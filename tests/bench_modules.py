"""Loading a bench/ script as a module (its SWEEPS and tables are tested): shared by the family tests."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str, tag: str = "test"):
    """bench/<name>.py as a module named bench_<name>_<tag>, with bench/ importable while it loads (common.py)."""
    path = BENCH / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}_{tag}", path)
    sys.path.insert(0, str(path.parent))
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod
