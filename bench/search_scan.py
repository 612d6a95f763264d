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


def summarize(store: Store, run_id: str) -> dict:
    """From the store: the starting (naive) candidate, the best, the baseline, and how many evaluations the search
    needed to come within 10% of its final best (counted in evaluation order, the original being evaluation 1)."""
    rows = store.candidates(run_id)
    timed = []
    for i, c in enumerate(rows, 1):
        t = (c.get("result") or {}).get("timing")
        if c["status"] == "passed" and t and not t.get("suspect"):
            timed.append((i, c, t))
    if not timed:
        return {"evals": len(rows), "error": "no passing, timed candidate"}
    first = rows[0]
    t0 = (first.get("result") or {}).get("timing")
    best_i, best, tb = min(timed, key=lambda x: x[2]["median_ms"])
    within = next(i for i, _, t in timed if t["median_ms"] <= 1.10 * tb["median_ms"])
    return {"evals": len(rows), "passed": len(timed), "workload": tb["workload"], "method": tb["method"],
            "device": (best.get("result") or {}).get("device"), "backend": (best.get("result") or {}).get("backend"),
            "naive_ms": t0 and t0["median_ms"], "naive_status": first["status"],
            "best_ms": tb["median_ms"], "best_iqr_ms": tb["iqr_ms"], "best_eval": best_i, "best_plan": best["plan"],
            "baseline_ms": tb["baseline_ms"], "speedup_vs_baseline": tb["speedup"],
            "speedup_vs_naive": (t0["median_ms"] / tb["median_ms"]) if t0 else None,
            "evals_to_within_10pct": within}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="scan")
    ap.add_argument("--workload", default="b1_l4096_d2048_n16",
                    help="the timed workload (one of the family's bench workloads; 'all' keeps them all)")
    ap.add_argument("--max-evals", type=int, default=24)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default="bench/results/search_scan.json")
    args = ap.parse_args()
    events = []

    def emit(ev):
        d = ev.model_dump(mode="json") if hasattr(ev, "model_dump") else dict(ev)
        events.append(d)
        brief = {k: v for k, v in d.items() if k in ("type", "stage", "message", "status", "summary", "candidate_id",
                                                     "node_id", "speedup", "median_ms")}
        print(json.dumps(brief), flush=True)

    from ksearch_engine import families
    task = families.get(args.family).make_task()
    if args.workload != "all":
        keep = [w for w in task.bench_workloads if w.name == args.workload]
        if not keep:
            raise SystemExit(f"no bench workload {args.workload!r} in {args.family}: "
                             f"{[w.name for w in task.bench_workloads]}")
        task = task.model_copy(update={"bench_workloads": keep})
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        store = Store(str(Path(d) / "ksearch.db"))
        req = SearchRequest(store_path=str(Path(d) / "ksearch.db"), family=args.family, task=task.model_dump(mode="json"),
                            max_evals=args.max_evals, max_seconds=args.max_seconds, max_rounds=50)
        done = run_search(req, store, emit, repeats=args.repeats)
        emit(done)
        summary = summarize(store, req.run_id)
        tree = store.latest_tree(req.run_id)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"family": args.family, "seconds": time.monotonic() - t0, "summary": summary,
                               "done": done.model_dump(mode="json"), "tree": tree, "events": events}, indent=1))
    print(done.message)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
