"""The offline search loop on the GPU machine for one kernel family (default: the Mamba-1 scan): what
`run_search` finds within a budget, timed by the project's own sandboxed evaluator against the family baseline.

    python bench/search_scan.py [--family scan] [--max-evals 10] [--max-seconds 240] [--out bench/results/search_scan.json]

The evaluator times one call per mx.eval + mx.synchronize interleaved with the baseline (wall time), so for
sub-0.3 ms kernels its numbers include host overhead; bench/families.py reports GPU time as well.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ksearch_engine.events import SearchRequest  # noqa: E402
from ksearch_engine.search import run_search  # noqa: E402
from ksearch_engine.store import Store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="scan")
    ap.add_argument("--max-evals", type=int, default=10)
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="bench/results/search_scan.json")
    args = ap.parse_args()
    events = []

    def emit(ev):
        d = ev.model_dump(mode="json") if hasattr(ev, "model_dump") else dict(ev)
        events.append(d)
        brief = {k: v for k, v in d.items() if k in ("type", "stage", "message", "status", "summary", "candidate_id",
                                                     "node_id", "speedup", "median_ms")}
        print(json.dumps(brief), flush=True)

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        store = Store(str(Path(d) / "ksearch.db"))
        req = SearchRequest(store_path=str(Path(d) / "ksearch.db"), family=args.family, max_evals=args.max_evals,
                            max_seconds=args.max_seconds)
        done = run_search(req, store, emit, repeats=args.repeats)
        emit(done)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"family": args.family, "seconds": time.monotonic() - t0, "done": done.model_dump(mode="json"),
                               "events": events}, indent=1))
    print(done.message)


if __name__ == "__main__":
    main()
