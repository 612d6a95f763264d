"""The results store: SQLite in WAL mode, one file per workspace (`.ksearch/ksearch.db` by default).

Runs, candidates (source text and hash), measurements, decisions, world-model snapshots and the event log.
Every write is one transaction, so a process killed mid-write leaves the last committed state.
Connections are per thread (SQLite's rule); several processes may write (WAL + busy timeout).
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
from typing import Any, Iterator

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
    for k in ("config", "result", "detail"):
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

    def run(self, run_id: str) -> dict | None:
        return _row(self._conn().execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone())

    def runs(self, *, file: str | None = None, kernel: str | None = None, limit: int = 50) -> list[dict]:
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if file is not None:
            sql += " AND file=?"
            args.append(file)
        if kernel is not None:
            sql += " AND kernel=?"
            args.append(kernel)
        sql += " ORDER BY created DESC LIMIT ?"
        args.append(limit)
        return self.query(sql, tuple(args))

    def find_run(self, prefix: str) -> dict | None:
        rows = self.query("SELECT * FROM runs WHERE id LIKE ? ORDER BY created DESC", (prefix + "%",))
        return rows[0] if len(rows) >= 1 else None

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

    def candidate(self, cid: str) -> dict | None:
        return _row(self._conn().execute("SELECT * FROM candidates WHERE id=?", (cid,)).fetchone())

    def candidates(self, run_id: str) -> list[dict]:
        return self.query("SELECT * FROM candidates WHERE run_id=? ORDER BY seq", (run_id,))

    def measurements(self, cid: str) -> list[dict]:
        return self.query("SELECT * FROM measurements WHERE candidate_id=? ORDER BY id", (cid,))

    def ranked(self, run_id: str) -> list[dict]:
        """Passing candidates, fastest first (timed ones before those only verified)."""
        rows = self.query("SELECT * FROM candidates WHERE run_id=? AND status='passed'", (run_id,))

        def key(r: dict) -> tuple:
            t = (r.get("result") or {}).get("timing")
            return (0, t["median_ms"]) if t else (1, r["seq"])
        return sorted(rows, key=key)

    # -- decisions, trees, events ------------------------------------------------------------------
    def decide(self, run_id: str, candidate_id: str, decision: str, detail: dict | None = None) -> None:
        with self.tx() as c:
            c.execute("INSERT INTO decisions (run_id, candidate_id, decision, detail, created) VALUES (?,?,?,?,?)",
                      (run_id, candidate_id, decision, json.dumps(detail or {}), time.time()))

    def decisions(self, run_id: str) -> list[dict]:
        return self.query("SELECT * FROM decisions WHERE run_id=? ORDER BY id", (run_id,))

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

    def events(self, run_id: str, after: int = 0) -> list[dict]:
        return self.query("SELECT * FROM events WHERE run_id=? AND id>? ORDER BY id", (run_id, after))

    def integrity(self) -> str:
        return self._conn().execute("PRAGMA integrity_check").fetchone()[0]
