"""Soak test: run searches for N minutes while killing worker processes at random, then check nothing was lost.

    python bench/soak.py [MINUTES] [--workers 2] [--kill-every 6] [--child-share 0.25] [--family softmax]

Each job is a real `python -m ksearch_engine.worker REQUEST.json` process writing one shared store (as the
server runs them). A killer SIGKILLs a random running worker every `--kill-every` seconds on average (an
exponential wait), at whatever point it has reached, mid-write included. Every candidate a worker reported
on its event stream (a `candidate` event is printed only after its result is committed) is a finished
candidate that must survive. At the end the script

- runs `PRAGMA integrity_check` on the store,
- checks every finished candidate is still there with the same status and source hash,
- marks the runs of killed workers failed (as the server does on start) and checks none is left running,
  and that each killed run still has its last events in the store (what the editor shows),
- checks no sandboxed evaluator child outlived its worker, and sweeps the cgroups/temp folders of killed
  evaluators,

(a share of the kills, `--child-share`, hits a worker's sandboxed evaluator process instead: the evaluator
reports that candidate as killed and the search carries on)

and prints jobs run, workers killed, candidates kept and lost. It exits 1 when anything was lost or broken.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ksearch_engine.evaluate.sandbox import sweep_stale  # noqa: E402
from ksearch_engine.events import SearchRequest  # noqa: E402
from ksearch_engine.store import Store  # noqa: E402


class Job:
    """One worker process and what it reported."""

    def __init__(self, store_path: Path, work: Path, n: int, args):
        store = Store(store_path)
        self.req = SearchRequest(kind="optimize", store_path=str(store_path), family=args.family,
                                 backend=args.backend, max_evals=args.max_evals, max_seconds=args.job_seconds,
                                 seed=n)
        self.run_id = store.create_run("optimize", proposer="offline", backend=args.backend,
                                       config=self.req.model_dump(mode="json"))
        store.close()
        self.req.run_id = self.run_id
        path = work / f"job{n}.json"
        path.write_text(self.req.model_dump_json())
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen([sys.executable, "-m", "ksearch_engine.worker", str(path)], cwd=work, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.finished: dict[str, str] = {}   # candidate id -> status, as reported (committed before reporting)
        self.done = False
        self.killed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("type") == "candidate":
                self.finished[ev["candidate_id"]] = ev["status"]
            elif ev.get("type") == "done":
                self.done = True

    def alive(self) -> bool:
        return self.proc.poll() is None


def evaluator_children(worker_pids: set[int]) -> set[int]:
    """Pids of sandboxed evaluator processes started by the given workers (found by their pids cgroup,
    named ksearch-WORKERPID-N, or by a parent that is one of the workers)."""
    out = set()
    for p in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not p.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            if b"evaluate/child.py" not in cmd and b"ksearch_engine.evaluate.child" not in cmd:
                continue
            cg = Path(f"/proc/{p}/cgroup").read_text()
            ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid in worker_pids or any(f"/ksearch-{w}-" in cg for w in worker_pids):
            out.add(int(p))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("minutes", nargs="?", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=2, help="jobs running at once")
    ap.add_argument("--kill-every", type=float, default=6.0, help="mean seconds between SIGKILLs")
    ap.add_argument("--child-share", type=float, default=0.25,
                    help="share of the kills aimed at a worker's sandboxed evaluator processes instead")
    ap.add_argument("--family", default="softmax")
    ap.add_argument("--backend", default="mlx-cpu")
    ap.add_argument("--max-evals", type=int, default=6)
    ap.add_argument("--job-seconds", type=float, default=120.0)
    ap.add_argument("--store", type=Path, default=None, help="store file (default: a new one in a temp folder)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="ksearch-soak-"))
    store_path = args.store or work / "ksearch.db"
    jobs: list[Job] = []
    killed = children_killed = 0
    deadline = time.monotonic() + args.minutes * 60
    next_kill = time.monotonic() + rng.expovariate(1 / args.kill_every)
    print(f"soak: {args.minutes:g} min, {args.workers} workers, a SIGKILL every ~{args.kill_every:g} s, "
          f"family {args.family} on {args.backend}, store {store_path}", flush=True)
    while time.monotonic() < deadline:
        running = [j for j in jobs if j.alive()]
        while len(running) < args.workers:
            jobs.append(Job(store_path, work, len(jobs), args))
            running.append(jobs[-1])
        if time.monotonic() >= next_kill and running:
            sandboxed = sorted(evaluator_children({j.proc.pid for j in running}))
            if sandboxed and rng.random() < args.child_share:
                try:   # a sandboxed evaluator process: its candidate is reported as killed, the search goes on
                    os.kill(rng.choice(sandboxed), signal.SIGKILL)
                    children_killed += 1
                except ProcessLookupError:
                    pass
            else:
                victim = rng.choice(running)
                victim.proc.send_signal(signal.SIGKILL)
                victim.killed = True
                killed += 1
            next_kill = time.monotonic() + rng.expovariate(1 / args.kill_every)
        time.sleep(0.1)
    for j in jobs:   # let the last ones finish (bounded), then stop stragglers the same hard way
        try:
            j.proc.wait(timeout=args.job_seconds + 30)
        except subprocess.TimeoutExpired:
            j.proc.kill()
            j.killed = True
            killed += 1
            j.proc.wait()
        j.reader.join(timeout=5)

    # -- checks ------------------------------------------------------------------------------------------
    store = Store(store_path)
    problems: list[str] = []
    integrity = store.integrity()
    if integrity != "ok":
        problems.append(f"integrity_check: {integrity}")
    orphans = store.mark_orphans_failed()   # as the server does when it starts after a crash
    # A worker killed before it marked its run 'running' leaves it 'queued' with no pid: the job manager that
    # started it (the server's, here this script) sees the exit and fails the run, as server/jobs.py does.
    unstarted = [j.run_id for j in jobs if j.killed and (store.run(j.run_id) or {}).get("status") == "queued"]
    for rid in unstarted:
        store.update_run(rid, status="failed", message="the worker stopped before it started (killed); re-run it")
    kept = lost = 0
    for j in jobs:
        for cid, status in j.finished.items():
            row = store.candidate(cid)
            if row is None:
                lost += 1
                problems.append(f"candidate {cid} of run {j.run_id} was reported finished but is gone")
            elif row["status"] != status or not row["source"] or row["run_id"] != j.run_id:
                lost += 1
                problems.append(f"candidate {cid}: stored status {row['status']!r}, reported {status!r}")
            else:
                kept += 1
    still_running = store.query("SELECT id FROM runs WHERE status IN ('queued', 'running')")
    if still_running:
        problems.append(f"{len(still_running)} runs still marked running after the orphan sweep")
    killed_runs = [j for j in jobs if j.killed and not j.done]
    no_trace = [j.run_id for j in killed_runs if (store.run(j.run_id) or {}).get("status") != "failed"]
    if no_trace:
        problems.append(f"killed runs not marked failed: {no_trace[:5]}")
    with_events = sum(1 for j in killed_runs if store.events(j.run_id))
    worker_pids = {j.proc.pid for j in jobs}
    for _ in range(100):   # evaluator children die with their worker (PR_SET_PDEATHSIG, EOF on their pipe)
        leftover = evaluator_children(worker_pids)
        if not leftover:
            break
        time.sleep(0.1)
    if leftover:
        problems.append(f"{len(leftover)} sandboxed evaluator processes outlived their workers: {sorted(leftover)[:5]}")
    swept = sweep_stale()
    runs = store.query("SELECT status, COUNT(*) AS n FROM runs GROUP BY status")
    store.close()

    by_status = ", ".join(f"{r['n']} {r['status']}" for r in runs)
    print(f"jobs run:           {len(jobs)} ({by_status})")
    print(f"workers killed:     {killed} (SIGKILL; {len(orphans)} runs marked failed by the orphan sweep, "
          f"{len(unstarted)} killed before they started, failed by the job manager, "
          f"{with_events} of {len(killed_runs)} killed runs keep their last events)")
    print(f"evaluators killed:  {children_killed} sandboxed evaluator processes (SIGKILL; their searches went on: "
          f"{sum(1 for j in jobs if j.done)} jobs finished)")
    print(f"candidates kept:    {kept}")
    print(f"candidates lost:    {lost}")
    print(f"store integrity:    {integrity}")
    print(f"left behind:        {swept['cgroups']} cgroups and {swept['dirs']} temp folders of killed evaluators (swept)")
    for p in problems:
        print("PROBLEM:", p)
    if not problems and args.store is None:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
