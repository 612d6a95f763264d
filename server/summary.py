"""Reads results from the store and words them for lenses, inlay hints, hovers, diff titles and toasts.

One truth per kernel: the headline number everywhere is the speedup over the user's ORIGINAL (same run, so the
same backend and workload), the task's baseline op second, and the workload named next to the time. A
simulated check is a correctness result, never a latency: it is shown as `✓ verified (sim)`.

What a kernel *shows* is what is on disk: the accepted candidate, found again from the hash of the module's
current text (`Store.by_text_hash`), flagged when the module was edited by hand since. What a run *offers*
is `Store.offers` (the engine's rule, shared with the CLI): nothing when no candidate beat the original.
Summaries are cached per (file, kernel) and dropped whenever a job reports something new.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ksearch_engine.defaults import UNTIMED_BACKENDS
from ksearch_engine.store import Candidate, Run, Store, source_hash, vs_original

__all__ = ["UNTIMED_BACKENDS", "Best", "KernelResults", "Results", "fmt_ms", "offer_list", "plan_label",
           "timing_of", "where"]


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


def timing_of(cand: Candidate | dict) -> dict | None:
    """The candidate's main timing, unless it came from a backend that cannot time (the simulator)."""
    if isinstance(cand, Candidate):
        return cand.timing
    res = cand.get("result") or {}
    if not isinstance(res, dict) or res.get("backend") in UNTIMED_BACKENDS:
        return None
    t = res.get("timing")
    return t if isinstance(t, dict) and t.get("median_ms") is not None else None


def fmt_ms(ms: float) -> str:
    return f"{ms:.3g} ms" if ms >= 0.01 else f"{ms * 1000:.3g} µs"


def fmt_x(x: float) -> str:
    return f"{x:.2f}×"


def offer_list(store: Store, run: Run) -> list[Candidate]:
    """What the run offers to accept (`Store.offers`: beats the original, each source once, best first)."""
    return store.offers(run.id)


def plan_label(c: Candidate, n: int = 60) -> str:
    """What the candidate is, from its own knobs (Candidate.label)."""
    return c.label(n)


@dataclass
class Best:
    """One candidate as the editor words it, measured against the original of its own run."""
    run: Run
    cand: Candidate
    baseline_name: str
    original: Candidate | None = None

    @property
    def timing(self) -> dict | None:
        return self.cand.timing

    @property
    def where(self) -> str:
        return where(self.cand.result or {})

    @property
    def vs_original(self) -> float | None:
        return vs_original(self.cand, self.original)

    def verified_label(self) -> str:
        res = self.cand.result or {}
        return f"✓ verified ({res.get('verified_by') or res.get('backend') or 'check'})"

    def headline(self) -> str:
        """`1.13× vs original`, or against the baseline when the original could not be timed."""
        t = self.timing
        if t is None:
            return self.verified_label()
        vo = self.vs_original
        suspect = " ⚠ re-measure" if t.get("suspect") else ""
        if vo is not None:
            return f"{fmt_x(vo)} vs original{suspect}"
        return f"{fmt_x(t.get('speedup', 0))} vs {self.baseline_name}{suspect}"

    def time_at(self) -> str:
        t = self.timing
        return f"{fmt_ms(t['median_ms'])} @ {t.get('workload') or '?'}" if t else ""

    def baseline_part(self) -> str:
        t = self.timing
        if t is None or self.vs_original is None:
            return ""
        return f"{fmt_x(t.get('speedup', 0))} vs {self.baseline_name}"

    def inlay_label(self) -> str:
        """Short: the headline and the time at its workload."""
        t = self.timing
        if t is None:
            return self.verified_label()
        return f"⏱ {self.headline()} · {self.time_at()}"

    def lens_label(self) -> str:
        t = self.timing
        if t is None:
            return self.verified_label()
        parts = [f"✓ {self.headline()}", self.time_at(), self.baseline_part(), self.where]
        return " · ".join(p for p in parts if p)

    def full_label(self) -> str:
        """Hover's first line: everything, the method last."""
        t = self.timing
        if t is None:
            return f"{self.verified_label()} · correctness only, not timed"
        parts = [f"**{self.headline()}**", self.time_at(), self.baseline_part(), self.where]
        return " · ".join(p for p in parts if p) + (f" · {t.get('method')}" if t.get("method") else "")


@dataclass
class Accepted:
    """The accepted candidate as found on disk."""
    best: Best
    target: str
    state: str              # "on disk" | "edited" (changed by hand since) | "missing" (the module is gone)

    def label(self) -> str:
        if self.state == "on disk":
            return self.best.lens_label()
        if self.state == "edited":
            return f"✎ {Path(self.target).name} edited since accepted (was {self.best.headline()})"
        return f"⚠ {Path(self.target).name} missing (accepted {self.best.headline()})"

    def inlay_label(self) -> str:
        if self.state == "on disk":
            return self.best.inlay_label()
        return "✎ edited since accepted" if self.state == "edited" else "⚠ accepted module missing"


@dataclass
class NoGain:
    """A finished Optimize run in which no candidate beat the original."""
    run: Run
    original: Candidate | None
    passed: int             # candidates that passed (none faster)

    def label(self) -> str:
        t = self.original.timing if self.original is not None else None
        at = f" ({fmt_ms(t['median_ms'])} @ {t.get('workload') or '?'})" if t else ""
        if self.passed:
            return f"No candidate beat your kernel{at}"
        return "No candidate passed"


@dataclass
class KernelResults:
    runs: list[Run] = field(default_factory=list)         # newest first
    pending: Run | None = None                            # newest finished run with offers and no decision yet
    ranked: list[Candidate] = field(default_factory=list) # its offers, best first
    accepted: Accepted | None = None                      # what is on disk for this kernel
    no_gain: NoGain | None = None                         # newest finished optimize run offered nothing
    pending_best: Best | None = None

    @property
    def best(self) -> Best | None:
        """What the kernel's hint and hover headline describe: the accepted candidate on disk, else the result
        waiting for a decision."""
        if self.accepted is not None:
            return self.accepted.best
        return self.pending_best


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

    def best(self, store: Store, run: Run, cand: Candidate) -> Best:
        return Best(run, cand, self.baseline_name(run), store.original(run.id))

    def for_kernel(self, store: Store | None, path: str, kernel: str, read=None,
                   module: str | None = None) -> KernelResults:
        """`read(path) -> text | None` reads a file as the editor has it (to find the accepted text on disk);
        `module` is where this kernel's MLX module goes (found there even when the CLI wrote it)."""
        key = (path, kernel)
        if store is not None:
            self.store_changed(store)
        if key in self._cache:
            return self._cache[key]
        out = KernelResults()
        if store is not None:
            out.runs = store.runs(file=path, kernel=kernel, limit=20)
            accepted_at: float | None = None
            for run in out.runs:
                if run.status != "done":
                    continue
                decisions = store.decisions(run.id)
                last = decisions[-1] if decisions else None
                if last is not None and last.decision == "accepted" and out.accepted is None:
                    cand = store.candidate(last.candidate_id)
                    if cand is not None:
                        out.accepted = self._on_disk(store, run, cand, last.detail.get("target") or "", path,
                                                     kernel, read)
                        accepted_at = last.created
                if decisions or out.pending is not None or out.no_gain is not None:
                    continue
                if accepted_at is not None and run.created < accepted_at:
                    continue
                offers = store.offers(run.id)
                if offers:
                    out.pending, out.ranked = run, offers
                    out.pending_best = self.best(store, run, offers[0])
                elif run.kind == "optimize":
                    out.no_gain = NoGain(run, store.original(run.id), len(store.ranked(run.id)))
            if out.accepted is None and module and read is not None:
                # a module written without a decision in this store's runs (the CLI's `ksearch port`)
                text = read(module)
                if text is not None:
                    cand = store.by_text_hash(path, kernel, source_hash(text))
                    if cand is not None:
                        run = store.run(cand.run_id)
                        out.accepted = Accepted(self.best(store, run, cand), module, "on disk")
        self._cache[key] = out
        return out

    def _on_disk(self, store: Store, run: Run, cand: Candidate, target: str, path: str, kernel: str,
                 read) -> Accepted:
        best = self.best(store, run, cand)
        if read is None or not target:
            return Accepted(best, target, "on disk")
        text = read(target)
        if text is None:
            return Accepted(best, target, "missing")
        expected = cand.target_text or cand.source
        if target == path:           # an in-place edit of an MLX kernel in a .py file: its literal is there
            return Accepted(best, target, "on disk" if (cand.target_text or "") in text else "edited")
        h = source_hash(text)
        if h == cand.text_hash or h == source_hash(expected):
            return Accepted(best, target, "on disk")
        other = store.by_text_hash(path, kernel, h)
        if other is not None:        # the module holds another candidate of this kernel (accepted elsewhere)
            return Accepted(self.best(store, store.run(other.run_id), other), target, "on disk")
        return Accepted(best, target, "edited")

    def baseline_name(self, run: Run) -> str:
        """The name of what speedups are measured against (the task's baseline), for labels."""
        rid = run.id
        if rid not in self._baselines:
            self._baselines[rid] = _baseline_name(run.config or {})
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
