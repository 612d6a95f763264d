"""The world model: a tree of optimization plans, as data, edited by a few typed operations.

Learned from K-Search (caoshiyi/K-Search, `world_model.py`): each root->node path is a full optimization plan,
each node one decision ("row mapping") and the choice taken ("one vectorized pass per block of rows"). Nodes
carry the proposer's prediction (impact on memory traffic, occupancy/registers and compute fit; difficulty 1-5;
confidence; a score used for ranking; a predicted speedup) and, once tried, the measured result and the gap
between prediction and measurement.

The proposer changes the tree only through `Insert` (at most 3 nodes), `Update`, `Split` and `DeleteOpenLeaf`
edits. Each edit is validated against the whole tree before it is applied: a bad edit is rejected with a reason
and leaves the tree exactly as it was.

Selection (`PlanTree.select`): the frontier is the open nodes whose nearest tried ancestor passed (or is the
root); best score first (under a plan slower than the best, scaled by its share of the best), then lower
difficulty, then older. Approaches harder than the difficulty gate wait until
the easier ones are spent; an approach predicted to beat the best measured speedup goes before tuning. A round ends after `stagnation` evaluations without a new best (`note_result`).
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter

Level = Literal["low", "medium", "high"]
NodeStatus = Literal["open", "running", "passed", "failed", "not_runnable", "split"]
ROOT = "root"
MAX_INSERT = 3


class EditError(ValueError):
    """An edit that does not fit the tree; the message says why. The tree is unchanged."""


class Impact(BaseModel):
    """Predicted effect of a plan step, in the three dimensions K-Search rates."""
    memory_traffic: Level = "medium"   # how much it cuts bytes moved
    occupancy: Level = "medium"        # registers / threadgroup memory / threads in flight
    compute_fit: Level = "medium"      # how well the math maps onto the hardware (SIMD, matrix units)
    notes: str = ""


class NodeSpec(BaseModel):
    """What a proposer says about a new plan step (the part of a node it may write)."""
    decision: str = Field(description="the question this step answers, e.g. 'row mapping'")
    choice: str = Field(description="the answer taken, e.g. 'one vectorized pass over 64 rows at a time'")
    template: str | None = Field(None, description="family template id that implements it (offline proposer)")
    knobs: dict[str, Any] = Field(default_factory=dict, description="template knob values")
    kind: str = Field("ops", description="candidate kind: ops | metal | cuda")
    impact: Impact = Field(default_factory=Impact)
    difficulty: int = Field(3, ge=1, le=5)
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    score: float = Field(0.5, ge=0.0, le=1.0, description="ranking among open nodes; higher is tried first")
    predicted_speedup: float | None = Field(None, gt=0, description="expected speedup vs the baseline")
    notes: str = ""


class PlanNode(NodeSpec):
    id: str
    parent: str | None
    status: NodeStatus = "open"
    created_round: int = 0
    # Once tried:
    candidate_id: str | None = None
    attempts: int = 0                       # candidates written for this node (debug attempts included)
    median_ms: float | None = None
    speedup: float | None = None            # vs the task's baseline (measured, interleaved)
    speedup_vs_original: float | None = None
    message: str = ""
    gap: str = ""                           # predicted vs measured

    @property
    def tried(self) -> bool:
        return self.status in ("passed", "failed", "not_runnable")


# ---------------------------------------------------------------- edits
class Insert(BaseModel):
    op: Literal["insert"] = "insert"
    parent: str
    nodes: list[NodeSpec] = Field(min_length=1, max_length=MAX_INSERT)


class Update(BaseModel):
    """Revise beliefs about a node: its score, confidence, difficulty, impact, notes (and choice while open)."""
    op: Literal["update"] = "update"
    node: str
    score: float | None = Field(None, ge=0.0, le=1.0)
    confidence: float | None = Field(None, ge=0.0, le=1.0)
    difficulty: int | None = Field(None, ge=1, le=5)
    predicted_speedup: float | None = Field(None, gt=0)
    impact: Impact | None = None
    notes: str | None = None
    choice: str | None = None


class Split(BaseModel):
    """Refine an open leaf into 2-3 alternatives; the node becomes a decision point and is not tried itself."""
    op: Literal["split"] = "split"
    node: str
    children: list[NodeSpec] = Field(min_length=2, max_length=MAX_INSERT)


class DeleteOpenLeaf(BaseModel):
    op: Literal["delete"] = "delete"
    node: str


Edit = Annotated[Union[Insert, Update, Split, DeleteOpenLeaf], Field(discriminator="op")]
EditList = TypeAdapter(list[Edit])


class EditOutcome(BaseModel):
    edit: dict
    ok: bool
    reason: str = ""
    new_nodes: list[str] = []


# ---------------------------------------------------------------- the tree
class PlanTree(BaseModel):
    """The whole world model; JSON round-trips (`model_dump_json` / `PlanTree.model_validate_json`)."""
    summary: str = ""                       # one paragraph: the kernel and its constraints
    analysis: dict = {}                     # the Analysis this tree was built on (analyze.Analysis as JSON)
    nodes: dict[str, PlanNode] = {}
    next_id: int = 1
    round: int = 0
    difficulty_gate: int = 3
    stagnation: int = 6
    since_improvement: int = 0              # evaluations since the best last improved
    best_node: str | None = None
    best_speedup: float | None = None
    kinds: list[str] = ["ops", "metal", "cuda"]   # candidate kinds the run's backend can run

    @classmethod
    def new(cls, summary: str = "", *, stagnation: int = 6, difficulty_gate: int = 3) -> "PlanTree":
        root = PlanNode(id=ROOT, parent=None, decision="start", choice="the original kernel", status="open",
                        difficulty=1, score=0.0)
        return cls(summary=summary, nodes={ROOT: root}, stagnation=stagnation, difficulty_gate=difficulty_gate)

    # -- structure ---------------------------------------------------------------------------------
    def node(self, node_id: str) -> PlanNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise EditError(f"no node '{node_id}' in the plan tree") from None

    def children(self, node_id: str) -> list[PlanNode]:
        return [n for n in self.nodes.values() if n.parent == node_id]

    def path(self, node_id: str) -> list[PlanNode]:
        out, cur = [], self.nodes.get(node_id)
        while cur is not None:
            out.append(cur)
            cur = self.nodes.get(cur.parent) if cur.parent else None
        return out[::-1]

    def plan_text(self, node_id: str) -> str:
        """The root->node path as one line: the plan a candidate implements."""
        steps = [f"{n.decision}: {n.choice}" for n in self.path(node_id) if n.id != ROOT]
        return " → ".join(steps) or "original"

    def open_nodes(self) -> list[PlanNode]:
        return [n for n in self.nodes.values() if n.status == "open" and n.id != ROOT]

    def configs(self) -> set[tuple]:
        """(kind, template, knobs) of every node: proposers use it to avoid repeating a configuration."""
        return {config_key(n) for n in self.nodes.values() if n.template}

    # -- selection -----------------------------------------------------------------------------------
    def _anchor_ok(self, n: PlanNode) -> bool:
        """An open node is selectable when its nearest non-split ancestor passed, or is the root."""
        cur = self.nodes.get(n.parent) if n.parent else None
        while cur is not None and cur.status == "split":
            cur = self.nodes.get(cur.parent) if cur.parent else None
        return cur is not None and (cur.id == ROOT or cur.status == "passed")

    def worth(self, n: PlanNode) -> float:
        """A node's score for ranking: under a plan that measured below the best, the score times that plan's share
        of the best speedup (refining a 0.2x plan is worth less once a 0.65x one exists), else the score."""
        p = self.nodes.get(n.parent) if n.parent else None
        if p is None or p.id == ROOT or not p.speedup or not self.best_speedup:
            return n.score
        return n.score * min(1.0, p.speedup / self.best_speedup)

    def frontier(self) -> list[PlanNode]:
        order = {nid: i for i, nid in enumerate(self.nodes)}
        ready = [n for n in self.open_nodes() if self._anchor_ok(n)]
        return sorted(ready, key=lambda n: (-self.worth(n), n.difficulty, order[n.id]))

    def select(self) -> PlanNode | None:
        """The next node to try, or None when no open node is reachable.

        The difficulty gate holds back hard *approaches* (the root's children: ideas not tried yet) while easier
        ones wait; a node under a plan that ran (tuning a knob of it) is not held back, whatever its template's
        difficulty. An approach predicted to beat the best speedup measured so far goes before tuning plans that
        measured below that prediction: tuning a 0.2x plan never starves an untried 0.65x one."""
        ready = self.frontier()
        if not ready:
            return None

        def held(n: PlanNode) -> bool:
            return n.parent == ROOT and n.difficulty > self.difficulty_gate
        if self.best_speedup is not None:
            promising = [n for n in ready if n.parent == ROOT and (n.predicted_speedup or 0.0) > self.best_speedup]
            if promising:
                return ([n for n in promising if not held(n)] or promising)[0]
        return ([n for n in ready if not held(n)] or ready)[0]

    # -- results -------------------------------------------------------------------------------------
    def mark_running(self, node_id: str) -> None:
        self.node(node_id).status = "running"

    def record(self, node_id: str, *, candidate_id: str | None, status: str, message: str = "",
               median_ms: float | None = None, speedup: float | None = None,
               speedup_vs_original: float | None = None) -> PlanNode:
        """Write a measured (or failed) attempt onto its node, with the predicted-vs-measured gap."""
        n = self.node(node_id)
        n.status = status if status in ("passed", "not_runnable") else "failed"
        n.candidate_id = candidate_id
        n.message = message[:500]
        n.median_ms, n.speedup, n.speedup_vs_original = median_ms, speedup, speedup_vs_original
        if n.predicted_speedup is not None and speedup is not None:
            d = speedup - n.predicted_speedup
            verdict = "as predicted" if abs(d) <= 0.1 * n.predicted_speedup else ("better" if d > 0 else "worse")
            n.gap = f"predicted {n.predicted_speedup:.2f}x, measured {speedup:.2f}x ({d:+.2f}x, {verdict})"
        elif n.predicted_speedup is not None and n.status != "passed":
            n.gap = f"predicted {n.predicted_speedup:.2f}x, got {status}"
        return n

    def note_result(self, improved: bool) -> bool:
        """Count an evaluation towards stagnation; True when the round just ended."""
        if improved:
            self.since_improvement = 0
            return False
        self.since_improvement += 1
        if self.since_improvement >= self.stagnation:
            self.since_improvement = 0
            self.round += 1
            return True
        return False

    def set_best(self, node_id: str, speedup: float | None) -> None:
        self.best_node, self.best_speedup = node_id, speedup

    def reset_running(self) -> list[str]:
        """After a crash or resume: nodes left 'running' were never recorded, so they are open again."""
        out = [n.id for n in self.nodes.values() if n.status == "running"]
        for nid in out:
            self.nodes[nid].status = "open"
        return out

    # -- edits ---------------------------------------------------------------------------------------
    def apply(self, edit: Insert | Update | Split | DeleteOpenLeaf | dict) -> list[str]:
        """Validate then apply one edit; returns new node ids. Raises EditError and changes nothing."""
        if isinstance(edit, dict):
            try:
                edit = TypeAdapter(Edit).validate_python(edit)
            except Exception as e:  # noqa: BLE001 - the reason goes back to the proposer
                raise EditError(f"not a valid edit: {e}") from None
        self._validate(edit)
        if isinstance(edit, Insert):
            return [self._add(edit.parent, spec) for spec in edit.nodes]
        if isinstance(edit, Split):
            n = self.nodes[edit.node]
            n.status = "split"
            return [self._add(n.id, spec.model_copy(update={"kind": spec.kind or n.kind})) for spec in edit.children]
        if isinstance(edit, Update):
            n = self.nodes[edit.node]
            for f in ("score", "confidence", "difficulty", "predicted_speedup", "impact", "notes", "choice"):
                v = getattr(edit, f)
                if v is not None:
                    setattr(n, f, v)
            return []
        del self.nodes[edit.node]
        return []

    def apply_all(self, edits: list, *, max_new: int | None = MAX_INSERT) -> list[EditOutcome]:
        """Apply a script of edits one by one; each is all-or-nothing, bad ones are reported, not applied.

        `max_new` caps the nodes one script may add (K-Search's rule: a few new ideas per step)."""
        out, added = [], 0
        for e in edits:
            raw = e if isinstance(e, dict) else e.model_dump(mode="json")
            n_new = _new_count(e)
            if max_new is not None and added + n_new > max_new:
                out.append(EditOutcome(edit=raw, ok=False,
                                       reason=f"would add {n_new} node(s) beyond this step's cap of {max_new}"))
                continue
            try:
                ids = self.apply(e)
            except EditError as err:
                out.append(EditOutcome(edit=raw, ok=False, reason=str(err)))
                continue
            added += len(ids)
            out.append(EditOutcome(edit=raw, ok=True, new_nodes=ids))
        return out

    def _validate(self, e) -> None:
        if isinstance(e, Insert):
            p = self.node(e.parent)
            if p.status in ("failed", "not_runnable") and p.id != ROOT:
                raise EditError(f"cannot insert under '{p.id}': it {p.status} (plans grow from passing nodes)")
            self._check_specs(e.nodes)
        elif isinstance(e, Split):
            n = self.node(e.node)
            if n.id == ROOT:
                raise EditError("the root cannot be split")
            if n.status != "open" or self.children(n.id):
                raise EditError(f"only an open leaf can be split; '{n.id}' is {n.status}"
                                f"{' with children' if self.children(n.id) else ''}")
            self._check_specs(e.children)
        elif isinstance(e, Update):
            n = self.node(e.node)
            if n.id == ROOT and (e.choice is not None or e.score is not None):
                raise EditError("the root's choice and score are fixed (it is the original kernel)")
            if e.choice is not None and n.status != "open":
                raise EditError(f"'{n.id}' was already tried as '{n.choice}'; its choice cannot change "
                                f"(insert a child instead)")
        elif isinstance(e, DeleteOpenLeaf):
            n = self.node(e.node)
            if n.id == ROOT:
                raise EditError("the root cannot be deleted")
            if n.status != "open" or n.candidate_id:
                raise EditError(f"'{n.id}' is {n.status}: only open, untried nodes can be deleted")
            if self.children(n.id):
                raise EditError(f"'{n.id}' has children: only leaves can be deleted")
        else:  # pragma: no cover - the Edit union guards this
            raise EditError(f"unknown edit {type(e).__name__}")

    def _check_specs(self, specs: list[NodeSpec]) -> None:
        if len(specs) > MAX_INSERT:
            raise EditError(f"{len(specs)} nodes in one edit; at most {MAX_INSERT}")
        for s in specs:
            if not s.choice.strip() or not s.decision.strip():
                raise EditError("a node needs a decision and a choice")
            if s.kind not in ("ops", "metal", "cuda"):
                raise EditError(f"kind '{s.kind}' is not one of ops, metal, cuda")
            if s.kind not in self.kinds:
                raise EditError(f"'{s.choice[:60]}' is a {s.kind} candidate; this run's backend runs "
                                f"{', '.join(self.kinds)} candidates only")

    def _add(self, parent: str, spec: NodeSpec) -> str:
        nid = f"n{self.next_id}"
        self.next_id += 1
        self.nodes[nid] = PlanNode(id=nid, parent=parent, created_round=self.round, **spec.model_dump())
        return nid


def _new_count(e) -> int:
    if isinstance(e, dict):
        return len(e.get("nodes") or e.get("children") or [])
    if isinstance(e, Insert):
        return len(e.nodes)
    if isinstance(e, Split):
        return len(e.children)
    return 0


def config_key(n: NodeSpec) -> tuple:
    return (n.kind, n.template, tuple(sorted((k, repr(v)) for k, v in n.knobs.items())))


# ---------------------------------------------------------------- rendering
_MARK = {"open": "·", "running": "…", "passed": "✓", "failed": "✗", "not_runnable": "-", "split": "◇"}


def _node_line(tree: PlanTree, n: PlanNode) -> str:
    if n.id == ROOT:
        head = "original"
        if n.status == "passed" and n.median_ms is not None:
            head += f" · {n.median_ms:.4g} ms · {n.speedup:.2f}x vs baseline"
        elif n.status != "open":
            head += f" · {n.status}"
        return head
    knobs = ", ".join(f"{k}={v}" for k, v in n.knobs.items())
    tpl = f" · {n.template}({knobs})" if n.template else ""
    line = f"{_MARK.get(n.status, '?')} {n.id} {n.decision}: {n.choice}{tpl} · {n.kind} d{n.difficulty} s{n.score:.2f}"
    if n.status == "passed":
        if n.speedup is not None:
            vs_o = f", {n.speedup_vs_original:.2f}x vs original" if n.speedup_vs_original else ""
            line += f" → {n.median_ms:.4g} ms, {n.speedup:.2f}x vs baseline{vs_o}"
        else:
            line += " → passed (verified, not timed)"
    elif n.status in ("failed", "not_runnable"):
        line += f" → {n.status}: {n.message[:80]}"
    if tree.best_node == n.id:
        line += "  ★ best"
    if n.gap:
        line += f"  ({n.gap})"
    return line


def render_tree(tree: PlanTree, *, max_nodes: int = 200) -> str:
    """The tree as indented text (for `ksearch show RUN --tree` and for LLM prompts)."""
    lines = []
    head = f"plan tree · round {tree.round} · {len(tree.nodes) - 1} plan nodes · difficulty gate {tree.difficulty_gate}"
    if tree.best_node and tree.best_speedup is not None:
        head += f" · best {tree.best_node} at {tree.best_speedup:.2f}x vs baseline"
    lines.append(head)

    def walk(nid: str, prefix: str, last: bool, top: bool) -> None:
        if len(lines) > max_nodes:
            return
        n = tree.nodes[nid]
        conn = "" if top else ("└─ " if last else "├─ ")
        lines.append(prefix + conn + _node_line(tree, n))
        kids = tree.children(nid)
        for i, k in enumerate(kids):
            walk(k.id, prefix + ("" if top else ("   " if last else "│  ")), i == len(kids) - 1, False)

    if ROOT in tree.nodes:
        walk(ROOT, "", True, True)
    if len(lines) > max_nodes:
        lines.append(f"... ({len(tree.nodes)} nodes in all)")
    return "\n".join(lines)


def render_tree_json(tree_json: str, **kw) -> str:
    """`render_tree` for a stored snapshot (the store keeps trees as JSON text). No square brackets appear in
    the output, so it prints safely through rich's markup too."""
    return render_tree(PlanTree.model_validate_json(tree_json), **kw)


def plan_brief(plan: str, n: int = 60) -> str:
    """A plan path cut to `n` characters from its end: the steps nearest the candidate (the knob it changed)
    tell one candidate from its siblings; the shared approach at the start does not."""
    plan = " ".join((plan or "").split())
    if len(plan) <= n:
        return plan
    tail = plan[-(n - 1):]
    cut = tail.find(" ")
    return "…" + (tail[cut + 1:] if 0 <= cut < 12 else tail)

