"""The results store: SQLite in WAL mode, one file per workspace (`.ksearch/ksearch.db` by default).

Runs, candidates (source text and hash), measurements, decisions, world-model snapshots and the event log.
Every write is one transaction, so a process killed mid-write leaves the last committed state.
Connections are per thread (SQLite's rule); several processes may write (WAL + busy timeout).

Rows come back as pydantic models (`Run`, `Candidate`, `Decision`, `Event`); they still answer `row["x"]` and
`row.get("x")` for older callers. What a run *offers* (`Store.offers`) is decided here, once, for the CLI and the
editor alike: a passing candidate that beats the user's original on the same backend and workload, each source
once.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, TypeVar

from pydantic import BaseModel, ConfigDict

from .defaults import UNTIMED_BACKENDS, clearly_faster
from .procs import pid_alive as _pid_alive

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  id TEXT PRIMARY KEY, kind TEXT NOT NULL, task_name TEXT, family TEXT, file TEXT, kernel TEXT,
  status TEXT NOT NULL, backend TEXT, proposer TEXT, config TEXT, doc_version INTEGER, source_hash TEXT,
  created REAL NOT NULL, updated REAL NOT NULL, finished REAL, message TEXT, log_tail TEXT,
  best_candidate TEXT, worker_pid INTEGER
);
CREATE TABLE IF NOT EXISTS candidates (
  id TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), seq INTEGER NOT NULL, node_id TEXT,
  plan TEXT, kind TEXT, source TEXT NOT NULL, hash TEXT NOT NULL, status TEXT NOT NULL, message TEXT,
  target_file TEXT, target_text TEXT, result TEXT, created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS candidates_run ON candidates(run_id, seq);
CREATE TABLE IF NOT EXISTS measurements (
  id INTEGER PRIMARY KEY AUTOINCREMENT, candidate_id TEXT NOT NULL REFERENCES candidates(id),
  backend TEXT, device TEXT, mlx_version TEXT, method TEXT, workload TEXT, median_ms REAL, iqr_ms REAL,
  baseline_ms REAL, baseline_iqr_ms REAL, speedup REAL, suspect INTEGER, repeats INTEGER, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS decisions (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, candidate_id TEXT NOT NULL, decision TEXT NOT NULL,
  detail TEXT, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS trees (
  run_id TEXT NOT NULL, seq INTEGER NOT NULL, tree TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL, created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, id);
"""

ACTIVE = ("queued", "running")
_DOC_QUOTES = ("\"\"\"", "'''")
ORIGINAL = "original"       # the plan of the user's kernel as it is (the search's root)


class Row(BaseModel):
    """A stored row. Attribute access is the way; `row["x"]` / `row.get("x")` keep dict-era callers working."""
    model_config = ConfigDict(extra="allow")

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    def __contains__(self, key: str) -> bool:
        return hasattr(self, key)


class Run(Row):
    id: str
    kind: str
    task_name: str | None = None
    family: str | None = None
    file: str | None = None
    kernel: str | None = None
    status: str
    backend: str | None = None
    proposer: str | None = None
    config: dict = {}
    doc_version: int | None = None
    source_hash: str | None = None
    created: float
    updated: float
    finished: float | None = None
    message: str | None = None
    log_tail: str | None = None
    best_candidate: str | None = None
    worker_pid: int | None = None


class Candidate(Row):
    id: str
    run_id: str
    seq: int
    node_id: str | None = None
    plan: str | None = None
    kind: str | None = None
    source: str
    hash: str
    status: str
    message: str | None = None
    target_file: str | None = None
    target_text: str | None = None
    result: dict | None = None
    created: float

    @property
    def timing(self) -> dict | None:
        """The main timing, unless the backend cannot time (the simulator verifies only: never a latency)."""
        res = self.result or {}
        if res.get("backend") in UNTIMED_BACKENDS:
            return None
        t = res.get("timing")
        return t if isinstance(t, dict) and t.get("median_ms") is not None else None

    @property
    def text_hash(self) -> str:
        """Hash of what accepting this candidate writes (the module's text), to find it again on disk."""
        return source_hash(self.target_text or self.source)

    @property
    def is_original(self) -> bool:
        return (self.plan or "") == ORIGINAL

    def label(self, n: int = 60) -> str:
        """What the candidate is, from its own text: a template candidate's module docstring names its template
        and knob values (`softmax.ops (ops): formulation=lse, upcast=True, compile=False`), which the plan path
        in the tree may not (a node's wording is written before its knobs are chosen)."""
        if self.is_original:
            return "your kernel, as it is"
        head = (self.source or "").lstrip()
        doc = ""
        if head[:3] in _DOC_QUOTES:
            body = head[3:].split(head[:3], 1)[0].strip()
            doc = body.splitlines()[0].strip() if body else ""
            if " from template " in doc:
                doc = doc.split(" from template ", 1)[1].rstrip(".")
            elif "=" not in doc:
                doc = ""          # a prose docstring (a port's): the plan says more
        if not doc:
            doc = " ".join((self.plan or "").split())
            if len(doc) > n:
                tail = doc[-(n - 1):]
                cut = tail.find(" ")
                doc = "…" + (tail[cut + 1:] if 0 <= cut < 12 else tail)
        return doc if len(doc) <= n else doc[: n - 1] + "…"


class Decision(Row):
    id: int
    run_id: str
    candidate_id: str
    decision: str
    detail: dict = {}
    created: float


class Event(Row):
    id: int
    run_id: str
    type: str
    data: dict = {}
    created: float


R = TypeVar("R", bound=Row)


def _typed(model: type[R], row: dict | None) -> R | None:
    if row is None:
        return None
    return model.model_validate({k: v for k, v in row.items() if v is not None or k in ("result",)})


def vs_original(c: Candidate, original: Candidate | None) -> float | None:
    """The candidate's speedup over the user's original (same run: same backend and workload), when both were
    timed."""
    t = c.timing
    if t is None:
        return None
    stored = ((c.result or {}).get("vs_original") or {}).get("speedup")
    if stored:
        return float(stored)
    ot = original.timing if original is not None else None
    if ot and t["median_ms"] > 0 and ot.get("workload") == t.get("workload"):
        return ot["median_ms"] / t["median_ms"]
    return None


def beats(c: Candidate, original: Candidate | None) -> bool:
    """The search's own rule for an improvement (defaults.clearly_faster): its own median and spread clearly
    below the original's, same backend and workload. Without a timed original (it failed, or nothing can be timed here) a
    passing candidate counts when it is not flagged."""
    t, ot = c.timing, (original.timing if original is not None else None)
    if t is not None and t.get("suspect"):
        return False
    if t is None or ot is None:
        return True
    return clearly_faster(t["median_ms"], t.get("iqr_ms") or 0.0, ot["median_ms"], ot.get("iqr_ms") or 0.0)


def default_path(workspace: str | Path | None = None) -> Path:
    env = os.environ.get("KSEARCH_STORE")
    if env:
        return Path(env)
    return Path(workspace or os.getcwd()) / ".ksearch" / "ksearch.db"


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _row(r: sqlite3.Row | None) -> dict | None:
    if r is None:
        return None
    d = dict(r)
    for k in ("config", "result", "detail", "data"):
        if isinstance(d.get(k), str):
            try:
                d[k] = json.loads(d[k])
            except ValueError:
                pass
    return d


class Store:
    """Typed access to the results database."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._conn().executescript(SCHEMA)  # executescript manages its own transaction

    def _conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            c.row_factory = sqlite3.Row
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute("PRAGMA busy_timeout=30000")
            self._local.conn = c
        return c

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        c = self._conn()
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            c.execute("ROLLBACK")
            raise
        else:
            c.execute("COMMIT")

    def query(self, sql: str, args: tuple = ()) -> list[dict]:
        return [_row(r) for r in self._conn().execute(sql, args).fetchall()]

    def close(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    # -- runs --------------------------------------------------------------------------------------
    def create_run(self, kind: str, *, task_name: str = "", family: str = "", file: str | None = None,
                   kernel: str | None = None, backend: str = "", proposer: str = "", config: dict | None = None,
                   doc_version: int | None = None, source_hash: str | None = None, status: str = "queued",
                   run_id: str | None = None) -> str:
        rid = run_id or uuid.uuid4().hex[:12]
        now = time.time()
        with self.tx() as c:
            c.execute("INSERT INTO runs (id, kind, task_name, family, file, kernel, status, backend, proposer, config,"
                      " doc_version, source_hash, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      (rid, kind, task_name, family, file, kernel, status, backend, proposer,
                       json.dumps(config or {}), doc_version, source_hash, now, now))
        return rid

    def update_run(self, run_id: str, **fields: Any) -> None:
        if not fields:
            return
        if "config" in fields:
            fields["config"] = json.dumps(fields["config"])
        fields["updated"] = time.time()
        if fields.get("status") in ("done", "failed", "cancelled"):
            fields.setdefault("finished", fields["updated"])
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.tx() as c:
            c.execute(f"UPDATE runs SET {cols} WHERE id=?", (*fields.values(), run_id))

    def run(self, run_id: str) -> Run | None:
        return _typed(Run, _row(self._conn().execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()))

    def runs(self, *, file: str | None = None, kernel: str | None = None, limit: int = 50) -> list[Run]:
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if file is not None:
            sql += " AND file=?"
            args.append(file)
        if kernel is not None:
            sql += " AND kernel=?"
            args.append(kernel)
        sql += " ORDER BY created DESC LIMIT ?"
        args.append(limit)
        return [_typed(Run, r) for r in self.query(sql, tuple(args))]

    def find_run(self, prefix: str) -> Run | None:
        rows = self.query("SELECT * FROM runs WHERE id LIKE ? ORDER BY created DESC", (prefix + "%",))
        return _typed(Run, rows[0]) if rows else None

    def mark_orphans_failed(self, alive: set[int] | None = None) -> list[str]:
        """Runs left 'running' by a dead worker become 'failed' (they can be re-run)."""
        out = []
        # a queued run whose worker was started (it has a pid) and died before marking itself running counts too
        for r in self.query("SELECT id, worker_pid FROM runs WHERE status='running'"
                            " OR (status='queued' AND worker_pid IS NOT NULL)"):
            pid = r.get("worker_pid")
            if pid and (alive is not None and pid in alive or alive is None and _pid_alive(pid)):
                continue
            self.update_run(r["id"], status="failed", message="the worker stopped before the run finished (killed or crashed); re-run it")
            out.append(r["id"])
        return out

    # -- candidates --------------------------------------------------------------------------------
    def add_candidate(self, run_id: str, source: str, *, node_id: str | None = None, plan: str = "", kind: str = "",
                      status: str = "pending", message: str = "", result: dict | None = None,
                      target_file: str | None = None, target_text: str | None = None) -> str:
        cid = uuid.uuid4().hex[:12]
        now = time.time()
        with self.tx() as c:
            seq = c.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM candidates WHERE run_id=?", (run_id,)).fetchone()[0]
            c.execute("INSERT INTO candidates (id, run_id, seq, node_id, plan, kind, source, hash, status, message,"
                      " target_file, target_text, result, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      (cid, run_id, seq, node_id, plan, kind, source, source_hash(source), status, message,
                       target_file, target_text, json.dumps(result) if result is not None else None, now))
            self._add_measurements(c, cid, result)
        return cid

    def record_result(self, candidate_id: str, status: str, message: str, result: dict) -> None:
        with self.tx() as c:
            c.execute("UPDATE candidates SET status=?, message=?, result=? WHERE id=?",
                      (status, message, json.dumps(result), candidate_id))
            self._add_measurements(c, candidate_id, result)

    @staticmethod
    def _add_measurements(c: sqlite3.Connection, cid: str, result: dict | None) -> None:
        if not result:
            return
        for t in result.get("timings") or []:
            c.execute("INSERT INTO measurements (candidate_id, backend, device, mlx_version, method, workload, median_ms,"
                      " iqr_ms, baseline_ms, baseline_iqr_ms, speedup, suspect, repeats, created)"
                      " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      (cid, result.get("backend"), result.get("device"), result.get("mlx_version"), t["method"],
                       t["workload"], t["median_ms"], t["iqr_ms"], t["baseline_ms"], t["baseline_iqr_ms"],
                       t["speedup"], int(t["suspect"]), t["repeats"], time.time()))

    def candidate(self, cid: str) -> Candidate | None:
        return _typed(Candidate, _row(self._conn().execute("SELECT * FROM candidates WHERE id=?", (cid,)).fetchone()))

    def candidates(self, run_id: str) -> list[Candidate]:
        return [_typed(Candidate, r) for r in self.query("SELECT * FROM candidates WHERE run_id=? ORDER BY seq", (run_id,))]

    def measured(self, run_id: str, text_hash: str) -> Candidate | None:
        """A candidate of this run whose source is `text_hash` (sources are measured once per run)."""
        r = self._conn().execute("SELECT * FROM candidates WHERE run_id=? AND hash=? ORDER BY seq LIMIT 1",
                                 (run_id, text_hash)).fetchone()
        return _typed(Candidate, _row(r))

    def by_text_hash(self, file: str, kernel: str, text_hash: str) -> Candidate | None:
        """The newest candidate for this kernel whose accepted text hashes to `text_hash` (what is on disk)."""
        for run in self.runs(file=file, kernel=kernel, limit=50):
            for c in reversed(self.candidates(run.id)):
                if c.text_hash == text_hash:
                    return c
        return None

    def measurements(self, cid: str) -> list[dict]:
        return self.query("SELECT * FROM measurements WHERE candidate_id=? ORDER BY id", (cid,))

    def ranked(self, run_id: str) -> list[Candidate]:
        """Passing candidates, fastest first (timed ones before those only verified)."""
        rows = [_typed(Candidate, r) for r in
                self.query("SELECT * FROM candidates WHERE run_id=? AND status='passed'", (run_id,))]

        def key(r: Candidate) -> tuple:
            t = r.timing
            return (0, t["median_ms"]) if t else (1, r.seq)
        return sorted(rows, key=key)

    def original(self, run_id: str) -> Candidate | None:
        """The user's kernel as it is, measured first by an optimize run (None for a port)."""
        r = self._conn().execute("SELECT * FROM candidates WHERE run_id=? AND plan=? ORDER BY seq LIMIT 1",
                                 (run_id, ORIGINAL)).fetchone()
        return _typed(Candidate, _row(r))

    def offers(self, run_id: str) -> list[Candidate]:
        """What the run offers to accept, in the order Next walks them: passing candidates that beat the user's
        original (`beats`), each source once and never the original's own source; the search's best first,
        then the fastest. Empty when nothing beat the original: the CLI and the editor both say so."""
        run = self.run(run_id)
        if run is None or run.status != "done":
            return []
        original = self.original(run_id)
        seen = {original.hash} if original is not None else set()
        out = []
        for c in self.ranked(run_id):
            if c.is_original or c.hash in seen or c.status != "passed" or (c.result or {}).get("complete") is False:
                continue
            seen.add(c.hash)
            if beats(c, original):
                out.append(c)
        out.sort(key=lambda c: c.id != run.best_candidate)     # stable: keeps the fastest-first order otherwise
        return out

    # -- decisions, trees, events ------------------------------------------------------------------
    def decide(self, run_id: str, candidate_id: str, decision: str, detail: dict | None = None) -> None:
        with self.tx() as c:
            c.execute("INSERT INTO decisions (run_id, candidate_id, decision, detail, created) VALUES (?,?,?,?,?)",
                      (run_id, candidate_id, decision, json.dumps(detail or {}), time.time()))

    def decisions(self, run_id: str) -> list[Decision]:
        return [_typed(Decision, r) for r in self.query("SELECT * FROM decisions WHERE run_id=? ORDER BY id", (run_id,))]

    def save_tree(self, run_id: str, tree_json: str) -> int:
        with self.tx() as c:
            seq = c.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM trees WHERE run_id=?", (run_id,)).fetchone()[0]
            c.execute("INSERT INTO trees (run_id, seq, tree, created) VALUES (?,?,?,?)", (run_id, seq, tree_json, time.time()))
        return seq

    def latest_tree(self, run_id: str) -> str | None:
        r = self._conn().execute("SELECT tree FROM trees WHERE run_id=? ORDER BY seq DESC LIMIT 1", (run_id,)).fetchone()
        return r[0] if r else None

    def add_event(self, run_id: str, type_: str, data: dict) -> None:
        with self.tx() as c:
            c.execute("INSERT INTO events (run_id, type, data, created) VALUES (?,?,?,?)",
                      (run_id, type_, json.dumps(data), time.time()))

    def events(self, run_id: str, after: int = 0) -> list[Event]:
        return [_typed(Event, r) for r in
                self.query("SELECT * FROM events WHERE run_id=? AND id>? ORDER BY id", (run_id, after))]

    def integrity(self) -> str:
        return self._conn().execute("PRAGMA integrity_check").fetchone()[0]
