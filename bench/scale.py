"""Evaluations per minute of the scan task's candidates against the number of evaluation workers.

    python bench/scale.py                                   # this machine: 1, 2, 4 CPU workers on a one-node Ray
    python bench/scale.py --pool local                      # the same through LocalPool threads (no Ray)
    python bench/scale.py --workers 1,2,4,8 --candidates 24 --out bench/results/scale_cpu.json
    python bench/scale.py --gpu                             # GPU machine: the H200 as a Ray GPU resource beside
                                                            # its CPUs (mlx_cuda: 1 + mlx_cpu: N), both at once
    python bench/scale.py --cluster HOST:PORT --backends mlx-cuda,mlx-cpu   # an existing cluster

Each worker is a warm Evaluator (a sandboxed child process that verifies the candidate against the reference on
the task's small workloads, then times it interleaved with the baseline). The candidates are the scan family's
templates rendered with a sweep of knobs: MLX-ops candidates for mlx-cpu, CUDA-backend kernels for mlx-cuda.
Workers start (and compute the reference) before the clock starts; the number reported is steady-state
throughput: candidates evaluated per minute once every worker is warm, and the speed-up over one worker.

Timings measured while several workers share the CPU cores are not latencies to trust: this measures
throughput of the search's evaluation stage, not kernel speed. On a machine with C cores, CPU workers beyond C
only queue for the cores (the CI machine has 2).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ksearch_engine import families  # noqa: E402
from ksearch_engine.evaluate import Limits  # noqa: E402
from ksearch_engine.pool import LocalPool, PoolError  # noqa: E402

KINDS = {"mlx-cpu": "ops", "mlx-cuda": "cuda", "mlx-metal": "metal", "sim": "cuda"}


def candidates(backend: str, n: int) -> list[str]:
    """n distinct scan candidates of the kind `backend` runs, from the family's templates and their knobs."""
    fam = families.get("scan")
    kind = KINDS[backend]
    out = []
    for tpl in fam.templates:
        if kind not in tpl.kinds:
            continue
        names = list(tpl.knobs)
        for values in itertools.product(*(tpl.knobs[k] for k in names)):
            knobs = dict(zip(names, values))
            if tpl.valid(knobs):
                out.append(tpl.render(knobs, kind))
    if not out:
        raise SystemExit(f"the scan family has no {kind} template for {backend}")
    return [out[i % len(out)] for i in range(n)]


def make_pool(kind: str, workers: int, backends: list[str], cluster: str | None, gpu: bool, limits, repeats):
    if kind == "local":
        return LocalPool(workers=workers, limits=limits, repeats=repeats)
    from ksearch_engine.pool.ray_pool import RayPool, import_ray
    if cluster:
        return RayPool(cluster, limits=limits, repeats=repeats, max_workers=workers)
    ray = import_ray()
    res = {"mlx_cpu": workers, "sim": workers}
    if gpu:
        res["mlx_cuda"] = 1
    # a one-node Ray on this machine: its CPU workers, and with --gpu the GPU as a Ray GPU resource as well
    ray.init(address="local", num_cpus=workers, num_gpus=1 if gpu else 0, resources=res, include_dashboard=False,
             namespace="ksearch", logging_level="ERROR", log_to_driver=False)
    return RayPool("local", limits=limits, repeats=repeats, max_workers=workers)


def run(kind: str, workers: int, backends: list[str], n: int, cluster: str | None, gpu: bool, repeats: int) -> dict:
    task = families.get("scan").make_task()
    limits = Limits(wall_s=120)
    t0 = time.monotonic()
    load_before = os.getloadavg()[0]
    pool = make_pool(kind, workers, backends, cluster, gpu, limits, repeats)
    try:
        per_backend = {}
        for b in backends:
            pool.info(b)          # fails at once, saying why, where no worker can run this backend
            per = pool.slots(b)
            warm = [pool.submit(task, src, b) for src in candidates(b, per)]   # start + reference, one per worker
            for f in warm:
                f.result()
            per_backend[b] = per
        started_s = time.monotonic() - t0
        work = [(b, src) for b in backends for src in candidates(b, n)]
        t1 = time.monotonic()            # a one-worker LocalPool evaluates inside submit()
        jobs = [(b, pool.submit(task, src, b)) for b, src in work]
        results = [(b, f.result()) for b, f in jobs]
        wall = time.monotonic() - t1
    finally:
        pool.close()
        if kind == "ray" and not cluster:
            import ray
            ray.shutdown()          # this script started the one-node Ray
    statuses: dict[str, int] = {}
    errors: dict[str, str] = {}     # backend/status -> the first message (why candidates failed)
    nodes = set()
    for b, r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
        if r.status != "passed":
            errors.setdefault(f"{b}/{r.status}", (r.message or "")[:300])
        nodes.add((r.sandbox.get("node") or {}).get("node_id") or (r.sandbox.get("node") or {}).get("name"))
    return {"pool": kind, "workers": workers, "slots": per_backend, "backends": backends, "candidates": len(results),
            "wall_s": round(wall, 2), "evals_per_min": round(60 * len(results) / wall, 1), "startup_s": round(started_s, 1),
            "statuses": statuses, "errors": errors, "nodes": len(nodes),
            "load_avg_1min": [round(load_before, 1), round(os.getloadavg()[0], 1)],   # other work on the machine
            "mean_eval_s": round(sum(r.eval_ms for _, r in results) / 1e3 / len(results), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", choices=["ray", "local"], default="ray")
    ap.add_argument("--workers", default="1,2,4", help="comma-separated worker counts (CPU workers)")
    ap.add_argument("--candidates", type=int, default=12, help="candidates per backend per measurement")
    ap.add_argument("--backends", default="mlx-cpu", help="comma-separated: mlx-cpu, mlx-cuda, mlx-metal, sim")
    ap.add_argument("--cluster", help="an existing Ray cluster (HOST:PORT or ray://HOST:PORT) instead of a local one")
    ap.add_argument("--gpu", action="store_true", help="GPU machine: add the GPU (mlx_cuda, a Ray GPU) beside the CPU "
                                                       "workers and evaluate CUDA-backend candidates on it at the same time")
    ap.add_argument("--repeats", type=int, default=5, help="timing repeats per candidate")
    ap.add_argument("--rounds", type=int, default=2, help="measure every worker count this many times (median)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    backends = args.backends.split(",")
    if args.gpu and "mlx-cuda" not in backends:
        backends.append("mlx-cuda")
    rows = []
    counts = [int(x) for x in args.workers.split(",")]
    for w in counts * args.rounds:      # rounds interleaved: load from other work on the machine hits all counts
        try:
            r = run(args.pool, w, backends, args.candidates, args.cluster, args.gpu, args.repeats)
        except PoolError as e:
            raise SystemExit(f"bench/scale.py: {e}") from None
        rows.append(r)
        print(f"{r['pool']:5} workers={w:<2} slots={r['slots']} {r['candidates']} evals in {r['wall_s']:7.1f} s · "
              f"{r['evals_per_min']:6.1f} evals/min · startup {r['startup_s']} s · "
              f"{r['statuses']} · load {r['load_avg_1min']}", flush=True)
        for k, msg in r["errors"].items():
            print(f"      {k}: {msg}", flush=True)
    summary = []
    for w in counts:
        rates = sorted(r["evals_per_min"] for r in rows if r["workers"] == w)
        summary.append({"workers": w, "evals_per_min_median": statistics.median(rates), "runs": rates})
    for s in summary:
        s["speedup_vs_first"] = round(s["evals_per_min_median"] / summary[0]["evals_per_min_median"], 2)
        print(f"workers={s['workers']:<2} median {s['evals_per_min_median']:6.1f} evals/min "
              f"(runs {s['runs']}) · x{s['speedup_vs_first']:.2f} vs {counts[0]} worker(s)")
    info = {"machine": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "task": "scan", "pool": args.pool, "summary": summary, "results": rows}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(info, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
