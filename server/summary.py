"""Reads results from the store and words them for lenses, inlay hints and hovers.

A simulated check is a correctness result, never a latency: it is shown as `✓ verified (sim)`.
Summaries are cached per (file, kernel) and dropped whenever a job reports something new.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ksearch_engine.store import Store

UNTIMED_BACKENDS = {"sim"}


def short_device(device: str | None) -> str:
    d = (device or "").strip()
    for prefix in ("NVIDIA ", "Apple "):
        if d.startswith(prefix):
            d = d[len(prefix):]
    return d or "?"


def where(res: dict | None) -> str:
    """`device (backend)`, and `@ node` when a cluster node measured it (results from a Ray pool name their node)."""
    if not res:
        return "—"
    sandbox = res.get("sandbox")
    node = sandbox.get("node") if isinstance(sandbox, dict) else None
    # only a cluster's node is worth naming: a local pool's results all come from this machine
    name = (node.get("name") or node.get("ip") or "") if isinstance(node, dict) and node.get("pool") == "ray" else ""
    return f"{short_device(res.get('device'))} ({res.get('backend') or '?'})" + (f" @ {name}" if name else "")


def timing_of(cand: dict) -> dict | None:
    """The candidate's main timing, unless it came from a backend that cannot time (the simulator)."""
    res = cand.get("result") or {}
    if not isinstance(res, dict) or res.get("backend") in UNTIMED_BACKENDS:
        return None
    t = res.get("timing")
    return t if isinstance(t, dict) and t.get("median_ms") is not None else None


def fmt_ms(ms: float) -> str:
    return f"{ms:.3g} ms" if ms >= 0.01 else f"{ms * 1000:.3g} µs"


def offer_list(store: Store, run: dict) -> list[dict]:
    """The run's passing candidates worth offering, in the order Next walks them: the search's own best first,
    then fastest first. The unchanged original (plan 'original') is measured but never offered."""
    ranked = [c for c in store.ranked(run["id"]) if (c.get("plan") or "") != "original"]
    best = run.get("best_candidate")
    ranked.sort(key=lambda c: c["id"] != best)      # stable: keeps store.ranked's order otherwise
    return ranked


@dataclass
class Best:
    run: dict
    cand: dict
    baseline_name: str

    @property
    def timing(self) -> dict | None:
        return timing_of(self.cand)

    @property
    def where(self) -> str:
        return where(self.cand.get("result") or {})

    def verified_label(self) -> str:
        res = self.cand.get("result") or {}
        return f"✓ verified ({res.get('verified_by') or res.get('backend') or 'check'})"

    def inlay_label(self) -> str:
        t = self.timing
        if t is None:
            return self.verified_label()
        suspect = " ⚠ re-measure" if t.get("suspect") else ""
        return (f"⏱ {fmt_ms(t['median_ms'])} · {t.get('speedup', 0):.3g}× vs {self.baseline_name}{suspect}"
                f" · {self.where}")

    def lens_label(self) -> str:
        t = self.timing
        if t is None:
            return self.verified_label()
        return f"✓ {t.get('speedup', 0):.3g}× · {fmt_ms(t['median_ms'])} · {self.where}"


@dataclass
class KernelResults:
    runs: list[dict] = field(default_factory=list)       # newest first
    best: Best | None = None                              # best candidate of the newest finished, not rejected run
    pending: dict | None = None                           # that run, when no accept/reject was recorded yet
    ranked: list[dict] = field(default_factory=list)      # its passing candidates, best first


class Results:
    """Cached access to runs and candidates per (file, kernel)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], KernelResults] = {}
        self._baselines: dict[str, str] = {}
        self._data_version: int | None = None

    def invalidate(self) -> None:
        self._cache.clear()

    def store_changed(self, store: Store) -> bool:
        """Whether another process (a worker, the CLI in a terminal) committed to the store since last asked."""
        try:
            v = store.query("PRAGMA data_version")[0]["data_version"]
        except Exception:  # noqa: BLE001
            return False
        changed = self._data_version is not None and v != self._data_version
        self._data_version = v
        if changed:
            self._cache.clear()
        return changed

    def for_kernel(self, store: Store | None, path: str, kernel: str) -> KernelResults:
        key = (path, kernel)
        if store is not None:
            self.store_changed(store)
        if key in self._cache:
            return self._cache[key]
        out = KernelResults()
        if store is not None:
            out.runs = store.runs(file=path, kernel=kernel, limit=20)
            for run in out.runs:
                if run["status"] != "done":
                    continue
                decided = {d["decision"] for d in store.decisions(run["id"])}
                if "rejected" in decided and "accepted" not in decided:
                    continue
                offered = offer_list(store, run)
                measured = offered or store.ranked(run["id"])
                if measured:
                    out.best = Best(run, measured[0], self.baseline_name(run))
                    if offered and not decided & {"accepted", "rejected"}:
                        out.pending, out.ranked = run, offered
                    break
        self._cache[key] = out
        return out

    def baseline_name(self, run: dict) -> str:
        """The name of what speedups are measured against (the task's baseline), for labels."""
        rid = run["id"]
        if rid not in self._baselines:
            self._baselines[rid] = _baseline_name(run.get("config") or {})
        return self._baselines[rid]


def _baseline_name(config: dict) -> str:
    try:
        task = config.get("task") if isinstance(config, dict) else None
        if isinstance(task, dict) and task.get("baseline_name"):
            return str(task["baseline_name"])
        if isinstance(config, dict) and config.get("task_file"):
            from ksearch_engine.task import KernelTask
            return KernelTask.load(config["task_file"]).baseline_name
        if isinstance(config, dict) and config.get("family"):
            from ksearch_engine import families
            return families.get(config["family"]).make_task().baseline_name
    except Exception:  # noqa: BLE001 - a label only
        pass
    return "baseline"
