"""The search loop: analyze, let the world model pick a plan node, write a candidate, evaluate it, refine.

`run_search(req, store, emit)` runs one optimize job. It evaluates the starting ("original") candidate first:
speedups are reported both against the task's baseline (measured interleaved by the evaluator) and against the
original. Then, until a budget runs out (evaluations, rounds, seconds, LLM tokens): select a node → the proposer
writes a candidate → the evaluator (one warm Evaluator per run) verifies and times it → a failing candidate gets
up to `max_debug` repair attempts fed its error → the result is written on the node → the proposer edits the tree
→ a snapshot goes to the store. A round ends after `req.stagnation` evaluations without a new best; each new
round raises the difficulty gate by one.

A new best must be clearly faster than the previous one (the original, at first) in its own measured latency, on
the same backend and workload: its median plus half its spread, raised by `MIN_GAIN`, below the other's median less
half its spread (`defaults.clearly_faster`, shared with the store's offers). The speedup over the baseline
op is reported beside it but does not decide: the baseline's time drifts between evaluations (seen on the CPU: the
trusted worker's first requests ran the baseline 3x slower than its later ones).

Only a PASSED and MEASURED (timed, not flagged suspect) candidate can become the best. On a backend that does
not time (the simulator), candidates are verified only and no latency or speedup is ever reported.
`req.resume=True` with an existing run id reloads the latest tree snapshot and the run's candidates.

Candidates are evaluated through a pool (`ksearch_engine.pool`): the local one by default (one warm worker, one
candidate at a time), or a Ray cluster (`req.cluster`). The search keeps up to the pool's number of devices in
flight (capped by `req.max_in_flight`) and takes their results in the order it submitted them, so a seeded
search makes the same decisions however the devices finish.
"""
from __future__ import annotations

import time
from pathlib import Path
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Callable

from . import backend as backends
from .evaluate import FAILING, EvalResult, Limits
from .events import BestEvent, CandidateEvent, DoneEvent, LogEvent, NodeEvent, SearchRequest, StageEvent
from .pool import EvalPool, PoolError, make_pool
from .propose import make_proposer
from .propose.base import Attempt, ProposeContext, Proposer, ProposerError, describe_error
from .store import Store
from .task import KernelTask, TaskError
from .worldmodel import ROOT, PlanNode, PlanTree, render_tree

ORIGINAL = "original"
from .defaults import clearly_faster  # noqa: E402 - one place for defaults


class SearchError(RuntimeError):
    """A search that cannot start (no task, unknown family, backend missing); the message says what to do."""


def resolve_task(req: SearchRequest, family=None) -> tuple[KernelTask, object | None]:
    """The task to optimize and its kernel family (templates for the offline proposer), if there is one.

    A request that names only a kernel file (and kernel) is resolved by `resolve.resolve`: the user's kernel
    itself becomes the task. A family's templates come along only when they compute the task's contract."""
    from .resolve import ResolveError, resolve, same_contract

    if req.task_file:
        task = KernelTask.load(req.task_file)
    elif req.task:
        task = KernelTask.model_validate(req.task)
    elif req.family or family is not None:
        family = family or _family(req.family)
        task = family.make_task()
    elif req.source_file:
        try:
            r = resolve(req.source_file, req.kernel)
        except ResolveError as e:
            raise SearchError(str(e)) from None
        return r.task, (family or r.family)
    else:
        raise SearchError("nothing to optimize: give a task file (--task FILE.task.toml), a task, or a family "
                          "(--family NAME)")
    for name in (task.family, task.name):      # a task file names its family; a family's own task its name
        if family is not None:
            break
        try:
            family = _family(name, quiet=True)
        except SearchError:
            family = None
        if family is not None and task.origin != "task" and not same_contract(task, family):
            family = None                      # the user's kernel's contract is not the family's
    return task, family


def _family(name: str | None, quiet: bool = False):
    try:
        from . import families
        return families.get(name)
    except (ImportError, AttributeError):
        if quiet:
            raise SearchError("no family registry") from None
        raise SearchError(f"family '{name}' is unknown: the kernel family registry (ksearch_engine.families) "
                          f"is not available in this install") from None
    except KeyError as e:
        if quiet:
            raise SearchError(str(e)) from None
        try:
            from . import families
            known = ", ".join(families.names())
        except Exception:  # noqa: BLE001
            known = "?"
        raise SearchError(f"family '{name}' is unknown (known: {known})") from None


def candidate_kinds(backend: str, task: KernelTask) -> list[str]:
    """Kinds of candidates worth writing on a backend: custom kernels where they run, ops otherwise.

    On `sim` (a CPU-only machine checking Metal/CUDA sources) the kernels are verified and never timed."""
    if backend == "mlx-metal":
        return ["metal", "ops"]
    if backend == "mlx-cuda":
        return ["cuda", "ops"]
    if backend == "sim":
        src = (task.source_file or "").lower()
        return ["cuda", "metal"] if src.endswith((".cu", ".cuh")) else ["metal", "cuda"]
    return ["ops"]


def _original_source(task: KernelTask, family, kind: str) -> tuple[str, str]:
    if task.initial:
        if task.origin == "captured":
            return task.initial, f"the user's kernel {task.kernel_name or task.name}, ported as is"
        return task.initial, "the task's initial candidate"
    if family is not None and getattr(family, "naive", None) is not None:
        for k in (kind, "ops"):
            try:
                return family.naive(k), f"the family's naive {k} candidate"
            except Exception:  # noqa: BLE001 - the family may not have a naive kernel of this kind
                continue
    src = task.baseline_source() + f"\n\ndef {task.entry}(*args):\n    return baseline(*args)\n"
    return src, f"the baseline ({task.baseline_name})"


@dataclass
class _InFlight:
    """A candidate submitted to the pool whose result the search has not taken yet."""
    node: PlanNode
    plan: str
    source: str
    cid: str
    future: Future
    tries: int                  # debug attempts before this one
    ctx: ProposeContext


def _result(fut: Future) -> EvalResult:
    """Wait for a pool's result in short steps, so that a cancel (SIGTERM in the worker) is never held up."""
    while not fut.done():
        wait([fut], timeout=0.5)
    return fut.result()


class _Run:
    """State of one search (kept off the module level: no global state)."""

    def __init__(self, req: SearchRequest, store: Store, emit: Callable, proposer: Proposer, task: KernelTask,
                 pool: EvalPool, info: backends.BackendInfo, kinds: list[str], max_debug: int):
        self.req, self.store, self.emit_raw, self.proposer = req, store, emit, proposer
        self.task, self.pool, self.backend, self.kinds, self.max_debug = task, pool, info.name, kinds, max_debug
        self.run_id = req.run_id
        self.timed = info.timed
        self.inflight: list[_InFlight] = []
        self.evals = 0
        self.history: list[Attempt] = []
        self.tree = PlanTree.new(stagnation=max(1, req.stagnation))
        self.tree.kinds = list(kinds)
        self.original_ms: float | None = None
        self.original_source = ""
        self.best: dict | None = None        # {"candidate_id", "node_id", "median_ms", "speedup", "vs_original", "source"}
        self.started = time.monotonic()
        self.analysis = None

    def emit(self, ev) -> None:
        ev.run_id = self.run_id
        self.emit_raw(ev)

    def log(self, msg: str, level: str = "info") -> None:
        self.emit(LogEvent(level=level, message=msg))

    def context(self, new_round: bool = False) -> ProposeContext:
        return ProposeContext(task=self.task, backend=self.backend, kinds=self.kinds, timed=self.timed,
                              analysis=self.analysis, original_source=self.original_source,
                              best_source=(self.best or {}).get("source"), best_node=(self.best or {}).get("node_id"),
                              tree=self.tree, new_round=new_round, extra={"analysis": self.tree.analysis})

    # -- budgets -------------------------------------------------------------------------------------
    def out_of_budget(self, pending: int = 0) -> str | None:
        """Why the search must stop launching candidates, counting `pending` ones in flight as spent."""
        if self.evals + pending >= self.req.max_evals:
            return f"evaluation budget spent ({self.evals}/{self.req.max_evals})"
        if time.monotonic() - self.started >= self.req.max_seconds:
            return f"time budget spent ({self.req.max_seconds:.0f} s)"
        if self.req.max_tokens is not None and self.proposer.usage.tokens >= self.req.max_tokens:
            return f"token budget spent ({self.proposer.usage.tokens}/{self.req.max_tokens})"
        if self.tree.round >= self.req.max_rounds:
            return f"{self.req.max_rounds} rounds without further improvement"
        return None

    # -- evaluation ------------------------------------------------------------------------------------
    def room(self) -> int:
        """How many candidates may be in flight: the pool's devices for the backend, capped by the request."""
        n = self.pool.slots(self.backend)
        return min(n, self.req.max_in_flight) if self.req.max_in_flight else n

    def already_measured(self, source: str):
        """A candidate of this run with the same source (the original included): never measured twice."""
        from .store import source_hash
        return self.store.measured(self.run_id, source_hash(source))

    def submit(self, source: str, node_id: str, plan: str) -> tuple[str, Future]:
        self.emit(StageEvent(stage="evaluate", message=f"node {node_id}: {plan[:120]}"))
        kind = backends.candidate_kind(source)
        cid = self.store.add_candidate(self.run_id, source, node_id=node_id, plan=plan, kind=kind, status="running")
        # against the best so far: a candidate not faster than it is verified on one workload only (never offered)
        b = self.best if self.timed else None
        bar = (b["median_ms"], b.get("iqr_ms") or 0.0) if b and b.get("median_ms") else None
        return cid, self.pool.submit(self.task, source, self.backend, timing=True, bar=bar)

    def evaluate(self, source: str, node_id: str, plan: str) -> tuple[str, EvalResult, float | None]:
        cid, fut = self.submit(source, node_id, plan)
        res, vs_orig = self.finish(cid, _result(fut))
        return cid, res, vs_orig

    def finish(self, cid: str, res: EvalResult) -> tuple[EvalResult, float | None]:
        """Store one result and announce it."""
        self.evals += 1
        vs_orig = None
        if res.passed and res.timing is not None and self.original_ms:
            vs_orig = self.original_ms / res.timing.median_ms if res.timing.median_ms > 0 else None
        data = res.model_dump(mode="json")
        data["vs_original"] = {"original_ms": self.original_ms, "speedup": vs_orig} if vs_orig else None
        self.store.record_result(cid, res.status, res.summary(), data)
        t = res.timing if self.timed else None
        node = res.sandbox.get("node") or {}
        where = f"{node.get('name')} ({node.get('ip')})" if node.get("pool") == "ray" else None
        self.emit(CandidateEvent(candidate_id=cid, status=res.status, evals=self.evals, node=where,
                                 summary=_summary(res, vs_orig) + (f" · on node {where}" if where else ""),
                                 median_ms=t.median_ms if t else None, speedup=t.speedup if t else None))
        return res, vs_orig

    def consider_best(self, cid: str, node_id: str, res: EvalResult, vs_orig: float | None, source: str) -> bool:
        """Make a candidate the best if it passed and was measured faster; returns whether it improved."""
        if not res.passed:
            return False
        t = res.timing
        if not self.timed or t is None:
            # untimed (the simulator): the first verified candidate (the tree tries the plans the analysis
            # predicts fastest first); never a time
            if node_id == ROOT or self.best is not None:
                return False
            node = self.tree.nodes.get(node_id)
            pred = node.predicted_speedup if node is not None else None
            self.best = {"candidate_id": cid, "node_id": node_id, "median_ms": None, "speedup": None,
                         "vs_original": None, "source": source, "predicted": pred}
            self.store.update_run(self.run_id, best_candidate=cid)
            why = f"; predicted {pred:.2f}x from the analysis, not measured" if pred else ""
            self.emit(BestEvent(candidate_id=cid, summary=f"verified on {self.backend} (not timed: no latency is "
                                                          f"claimed{why})"))
            return True
        if not res.complete:   # verified on one workload only: it was not faster than the best when timed
            return False
        if t.suspect:
            self.log(f"candidate {cid}: {t.speedup:.1f}x stays flagged after re-measurement; not taken as best",
                     "warning")
            return False
        if self.best is not None and not _beats(t.median_ms, t.iqr_ms, self.best):
            return False
        self.best = {"candidate_id": cid, "node_id": node_id, "median_ms": t.median_ms, "iqr_ms": t.iqr_ms,
                     "speedup": t.speedup, "vs_original": vs_orig, "source": source}
        self.tree.set_best(node_id, t.speedup)
        self.store.update_run(self.run_id, best_candidate=cid)
        self.emit(BestEvent(candidate_id=cid, summary=_summary(res, vs_orig), median_ms=t.median_ms, speedup=t.speedup))
        return True

    def snapshot(self) -> None:
        self.store.save_tree(self.run_id, self.tree.model_dump_json())

    # -- steps ---------------------------------------------------------------------------------------
    def start_fresh(self, family) -> None:
        src, what = _original_source(self.task, family, self.kinds[0])
        self.original_source = src
        self.emit(StageEvent(stage="evaluate", message=f"the original: {what}"))
        cid, res, _ = self.evaluate(src, ROOT, ORIGINAL)
        t = res.timing if self.timed else None
        self.tree.record(ROOT, candidate_id=cid, status=res.status, message=res.summary(),
                         median_ms=t.median_ms if t else None, speedup=t.speedup if t else None,
                         speedup_vs_original=1.0 if t else None)
        if res.passed and t is not None:
            self.original_ms = t.median_ms
            self.best = {"candidate_id": cid, "node_id": ROOT, "median_ms": t.median_ms, "iqr_ms": t.iqr_ms,
                         "speedup": t.speedup, "vs_original": 1.0, "source": src}
            self.tree.set_best(ROOT, t.speedup)
        elif not res.passed:
            self.log(f"the original ({what}) does not pass: {res.summary()}; speedups are reported vs the "
                     f"baseline only", "warning")
        self.tree.nodes[ROOT].status = "passed" if res.passed else self.tree.nodes[ROOT].status
        self.history.append(Attempt(node_id=ROOT, candidate_id=cid, status=res.status, message=res.message[:300],
                                    median_ms=t.median_ms if t else None, speedup=t.speedup if t else None,
                                    speedup_vs_original=1.0 if t else None))

    def resume(self) -> bool:
        raw = self.store.latest_tree(self.run_id)
        if raw is None:
            return False
        self.tree = PlanTree.model_validate_json(raw)
        reopened = self.tree.reset_running()
        if self.tree.analysis:
            from .analyze import Analysis
            try:
                self.analysis = Analysis.model_validate(self.tree.analysis)
            except ValueError:
                self.analysis = None
        for c in self.store.candidates(self.run_id):
            r = c.get("result") or {}
            if c["status"] == "running" or not r:
                continue
            self.evals += 1
            t = r.get("timing") if self.timed else None
            vs = (r.get("vs_original") or {}).get("speedup")
            if c["plan"] == ORIGINAL:
                self.original_source = c["source"]
                if t:
                    self.original_ms = t["median_ms"]
            self.history.append(Attempt(node_id=c["node_id"] or "", candidate_id=c["id"], status=c["status"],
                                        message=(c.get("message") or "")[:300], median_ms=t and t["median_ms"],
                                        speedup=t and t["speedup"], speedup_vs_original=vs))
            if c["status"] == "passed" and (t and not t.get("suspect") or not self.timed and c["plan"] != ORIGINAL):
                if self.best is None or (t and _beats(t["median_ms"], t.get("iqr_ms", 0.0), self.best)):
                    self.best = {"candidate_id": c["id"], "node_id": c["node_id"], "median_ms": t and t["median_ms"],
                                 "iqr_ms": t and t.get("iqr_ms", 0.0),
                                 "speedup": t and t["speedup"], "vs_original": vs, "source": c["source"]}
        self.log(f"resumed run {self.run_id}: {self.evals} evaluations so far, tree round {self.tree.round}"
                 + (f", reopened {', '.join(reopened)}" if reopened else ""))
        return True

    def apply_edits(self, new_round: bool = False) -> None:
        try:
            edits = self.proposer.edit_tree(self.tree, self.history, self.context(new_round))
        except ProposerError as e:
            self.log(f"the {self.proposer.name} proposer could not edit the plan tree: {e}", "warning")
            edits = []
        outcomes = self.tree.apply_all(edits, max_new=self.proposer.max_new_nodes)
        for o in outcomes:
            if not o.ok:
                self.log(f"rejected edit {o.edit.get('op')} on {o.edit.get('node') or o.edit.get('parent')}: {o.reason}",
                         "warning")
        self._flush_warnings()

    def _flush_warnings(self) -> None:
        for w in self.proposer.warnings:
            self.log(w, "warning")
        self.proposer.warnings.clear()

    def launch(self) -> _InFlight | bool | None:
        """Pick a node, write its candidate and submit it to the pool. Returns the candidate in flight, True when
        the node was used up without an evaluation (the proposer wrote nothing), None when nothing is left to try
        now (with candidates in flight, their results may open new nodes)."""
        node = self.tree.select()
        if node is None:
            if self.inflight:
                return None
            self.apply_edits()
            node = self.tree.select()
            if node is None:
                return None
        plan = self.tree.plan_text(node.id)
        self.emit(NodeEvent(node_id=node.id, plan=plan, round=self.tree.round))
        self.tree.mark_running(node.id)
        self.emit(StageEvent(stage="propose", message=f"{self.proposer.name}: {node.choice[:120]}"))
        ctx = self.context()
        try:
            draft = self.proposer.write_candidate(node, ctx)
        except ProposerError as e:
            self.tree.record(node.id, candidate_id=None, status="failed", message=f"no candidate: {e}")
            self.log(f"node {node.id}: {e}", "warning")
            self._flush_warnings()
            self.snapshot()
            return True
        same = self.already_measured(draft.source)
        if same is not None:
            # the same source as one already measured (the original, or a sibling with other knobs that render
            # the same code): its result stands for this node too, without another evaluation
            r = same.result or {}
            t = r.get("timing") if self.timed else None
            vs = (r.get("vs_original") or {}).get("speedup") or (1.0 if same.plan == ORIGINAL and t else None)
            self.tree.record(node.id, candidate_id=same.id, status=same.status if same.status != "running" else "failed",
                             message=f"same source as candidate #{same.seq}; not measured again",
                             median_ms=t and t["median_ms"], speedup=t and t["speedup"], speedup_vs_original=vs)
            self.log(f"node {node.id}: same source as candidate #{same.seq} ({same.plan or '?'}); not measured again")
            self.apply_edits()
            self.snapshot()
            return True
        cid, fut = self.submit(draft.source, node.id, plan)
        item = _InFlight(node=node, plan=plan, source=draft.source, cid=cid, future=fut, tries=0, ctx=ctx)
        self.inflight.append(item)
        return item

    def collect(self) -> None:
        """Take the oldest candidate's result: debug it if it failed, else record it on its node and refine."""
        item = self.inflight.pop(0)
        node, plan, source, cid, ctx = item.node, item.plan, item.source, item.cid, item.ctx
        res, vs = self.finish(cid, _result(item.future))
        node.attempts = 1 if item.tries == 0 else node.attempts + 1
        tries = item.tries
        if res.status in FAILING and tries < self.max_debug and not self.out_of_budget(len(self.inflight)):
            tries += 1
            try:
                fix = self.proposer.debug(source, describe_error(res.model_dump(mode="json")), ctx)
            except ProposerError as e:
                self.log(f"debugging node {node.id} failed: {e}", "warning")
                fix = None
            if fix is not None and self.already_measured(fix.source) is not None:
                fix = None          # the fix is code already measured: nothing new to learn from it
            if fix is not None:
                self.emit(StageEvent(stage="propose", message=f"debug attempt {tries} for node {node.id} after {res.status}"))
                cid, fut = self.submit(fix.source, node.id, plan + f" (debug {tries})")
                self.inflight.append(_InFlight(node=node, plan=plan, source=fix.source, cid=cid, future=fut,
                                               tries=tries, ctx=ctx))
                return
        t = res.timing if self.timed else None
        self.tree.record(node.id, candidate_id=cid, status=res.status, message=res.summary(),
                         median_ms=t.median_ms if t else None, speedup=t.speedup if t else None,
                         speedup_vs_original=vs)
        self.history.append(Attempt(node_id=node.id, candidate_id=cid, status=res.status, message=res.summary()[:300],
                                    median_ms=t.median_ms if t else None, speedup=t.speedup if t else None,
                                    speedup_vs_original=vs, debug_round=tries))
        improved = self.consider_best(cid, node.id, res, vs, source)
        new_round = self.tree.note_result(improved)
        if new_round:
            self.tree.difficulty_gate = min(5, self.tree.difficulty_gate + 1)
            self.emit(StageEvent(stage="round", message=f"round {self.tree.round}: {self.tree.stagnation} evaluations "
                                                        f"without a new best; difficulty gate now {self.tree.difficulty_gate}"))
        self.apply_edits(new_round=new_round)
        self.snapshot()

    def loop(self) -> str:
        """Keep up to `room()` candidates in flight until a budget runs out or nothing is left; returns why it stopped."""
        while True:
            stop = self.out_of_budget(len(self.inflight))
            while not stop and len(self.inflight) < max(1, self.room()):
                if self.launch() is None:
                    break
                stop = self.out_of_budget(len(self.inflight))
            if not self.inflight:
                return stop or "no open plan left to try"
            self.collect()


def improves(median_ms: float, best_ms: float, iqr_ms: float = 0.0, best_iqr_ms: float = 0.0) -> bool:
    """A candidate improves on one measured at `best_ms` when it is clearly faster (defaults.clearly_faster: its
    spread and the other's do not overlap, with MIN_GAIN between them; smaller gains are within timing noise)."""
    return clearly_faster(median_ms, iqr_ms, best_ms, best_iqr_ms)


def _beats(median_ms: float, iqr_ms: float, best: dict) -> bool:
    """A new best beats the old one in its own median latency and spread (see the module docstring)."""
    if best.get("median_ms") is None:
        return True
    return improves(median_ms, best["median_ms"], iqr_ms or 0.0, best.get("iqr_ms") or 0.0)


def _summary(res: EvalResult, vs_orig: float | None) -> str:
    s = res.summary()
    if vs_orig:
        s += f" · {vs_orig:.2f}x vs original"
    return s


def run_search(req: SearchRequest, store: Store, emit: Callable, *, proposer: Proposer | None = None,
               family=None, limits: Limits | None = None, repeats: int = 20, max_debug: int = 2,
               pool: EvalPool | None = None) -> DoneEvent:
    """Run (or resume) one optimize job; returns the DoneEvent (the worker emits it and closes the run).

    Keyword arguments are for embedding and tests: a ready proposer, a Family object instead of `req.family`,
    evaluator limits and timing repeats, the number of debug attempts per failing candidate, and a ready
    evaluator pool (left open; by default the search makes one from `req.cluster` and closes it)."""
    try:
        task, family = resolve_task(req, family)
    except TaskError as e:
        raise SearchError(str(e)) from None
    if not req.run_id:
        req.run_id = store.create_run("optimize", task_name=task.name, family=task.family, kernel=req.kernel,
                                      file=req.source_file, proposer=req.proposer, backend=req.backend or "",
                                      config=req.model_dump(mode="json"), status="running")
    own_pool = pool is None
    if pool is None:
        try:
            pool = make_pool(req.cluster, limits=limits, repeats=repeats, workers=req.max_in_flight)
        except PoolError as e:
            raise SearchError(str(e)) from None
    try:
        backend = req.backend
        if backend is None and not req.cluster and task.origin == "captured" and backends.detect().name == "mlx-cpu":
            backend = "sim"     # the user's kernel is a GPU kernel: no GPU here, so it is verified in the simulator
        try:
            info = pool.info(backend)           # on a cluster: the backend of its nodes, not of this machine
        except (PoolError, ValueError) as e:
            raise SearchError(str(e)) from None
        kinds = candidate_kinds(info.name, task)
        fallback_note = None
        if task.origin == "captured" and kinds == ["ops"]:
            # the user's kernel is a GPU kernel and this backend runs MLX ops only (mlx-cpu): its recognised
            # family's task (in ops) is what can run here; without one the run reports the root not runnable
            from .resolve import recognize_family
            fam_name = recognize_family(task.kernel_name or task.name, Path(task.source_file or "").stem)
            if fam_name:
                family = _family(fam_name)
                task = family.make_task()
                fallback_note = (f"{info.name} runs MLX operations only, not the user's GPU kernel: optimizing the "
                                 f"{fam_name} family's task in MLX ops instead (use --backend sim to check edits of "
                                 f"the kernel itself)")
        if proposer is None:
            proposer = make_proposer(req, family=family, cache_dir=str(_cache_dir(req)))
        store.update_run(req.run_id, task_name=task.name, family=task.family, backend=info.name, proposer=proposer.name)
        if not req.task or fallback_note:   # the task was resolved here: the run's record keeps it (labels, resume)
            store.update_run(req.run_id, config={**req.model_dump(mode="json"), "task": task.model_dump(mode="json")})
        run = _Run(req, store, emit, proposer, task, pool, info, kinds, max_debug)
        if fallback_note:
            run.log(fallback_note, "warning")
        if req.cluster:
            run.log(f"evaluating on the Ray cluster {req.cluster}: {pool.slots(info.name)} {info.name} device(s), "
                    f"{info.device}")
        if not info.timed:
            run.log(f"backend {info.name} verifies candidates without timing them: no latency or speedup is reported")
        resumed = req.resume and run.resume()
        if not resumed:
            if req.resume:
                run.log(f"run {req.run_id} has no saved plan tree; starting it fresh", "warning")
            run.emit(StageEvent(stage="analyze", message=f"task {task.name} on {info.name} ({info.device})"))
            try:
                analysis = proposer.analyze(task, info.name, info.device)
                run.analysis = analysis
                run.tree.analysis = analysis.model_dump(mode="json")
                run.tree.summary = analysis.text()
                run.log("analysis: " + analysis.text().replace("\n", " | "))
            except ProposerError as e:
                run.log(f"analysis failed: {e}", "warning")
            run.start_fresh(family)
            if family is None and proposer.name == "offline" and "LAUNCH_CUDA_SOURCE" not in run.original_source \
                    and "LAUNCH_METAL_SOURCE" not in run.original_source:
                run.log(f"no kernel family with templates for '{task.family}': the offline proposer has nothing "
                        f"to try; use --family NAME or --proposer gemini", "warning")
            run.apply_edits()
            run.snapshot()
        stop = run.loop()
        run.snapshot()
        for w in getattr(pool, "warnings", []):
            run.log(w, "warning")
    finally:
        if own_pool:
            pool.close()

    best = run.best if run.best and run.best["node_id"] != ROOT else None
    if best and best["median_ms"] is not None:
        vs = f", {best['vs_original']:.2f}x vs original" if best.get("vs_original") else ""
        msg = f"best {best['candidate_id']} ({best['node_id']}): {best['median_ms']:.4g} ms, {best['speedup']:.2f}x vs baseline{vs}"
    elif best:
        pred = f"; predicted {best['predicted']:.2f}x, not measured" if best.get("predicted") else ""
        msg = f"best {best['candidate_id']}: verified on {info.name} (not timed{pred})"
    elif run.best:
        msg = "no candidate beat the original"
    else:
        msg = "no candidate passed"
    usage = proposer.usage
    msg += f"; {run.evals} evaluations; stopped: {stop}"
    if usage.calls:
        msg += f"; {usage.describe()}"
    return DoneEvent(status="done", best_candidate=best["candidate_id"] if best else None, evals=run.evals, message=msg)


def _cache_dir(req: SearchRequest):
    from pathlib import Path
    return Path(req.store_path).parent / "llm-cache"


def tree_text(store: Store, run_id: str) -> str:
    """The latest plan tree of a run as text (`ksearch show RUN --tree`)."""
    raw = store.latest_tree(run_id)
    if raw is None:
        return f"run {run_id} has no plan tree yet"
    return render_tree(PlanTree.model_validate_json(raw))
