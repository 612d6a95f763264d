"""The offline proposer: an autotuner steered by the plan tree. Needs no network and no key.

It seeds the tree with one node per family template (in each candidate kind the backend can run, with the
template's default knobs, ranked by the template's predicted speedup and difficulty and, where the spec has
the template's pattern, its predicted impact). After a node passes it adds children that move one knob of
that node to a neighbouring value (threads per group, items per thread, vector width, tile sizes, chunk length,
unroll, fast math: whatever the template exposes). Directions that paid before rank first. When the frontier
runs dry it expands the best passing nodes again, and in a new round (after stagnation) it takes larger steps.
Deterministic for a given seed.

On the user's own kernel (a task whose starting candidate is a port of it: `transforms.bodies` finds its
kernel bodies) the proposer edits that code: it seeds one node per source transformation that fits the
root (propose/transforms.py: threads per block, grid-stride, float4, unrolling, fast math, read-only path),
each with its predicted effect from the analysis, and after a node passes it adds the transformations that
still fit the transformed code as children, so a root→leaf path is a chain of edits of the user's kernel.
A recognised family's templates are added as extra plans next to them, never instead of the root.
"""
from __future__ import annotations

import random
from typing import Any

from ..analyze import Analysis, analyze
from ..families.base import Family, Template
from ..task import KernelTask
from ..worldmodel import ROOT, Impact, Insert, NodeSpec, PlanNode, PlanTree, Update, config_key
from . import transforms
from .base import Attempt, CandidateDraft, ProposeContext, ProposerError, Usage


MAX_TEMPLATE_FAILURES = 3


class OfflineProposer:
    name = "offline"
    max_new_nodes: int | None = 12

    def __init__(self, family: Family | None, *, seed: int = 0, children_per_pass: int = 3):
        self.family = family
        self.seed = seed
        self.children_per_pass = children_per_pass
        self.usage = Usage()
        self.warnings: list[str] = []
        self._specs = None      # loaded once, on first use
        self._specs_tried = False

    def _spec_impact(self, t: Template, knob: str | None = None) -> Impact:
        if not self._specs_tried:
            self._specs_tried = True
            try:
                from ..specs import load_specs
                self._specs = load_specs()
            except Exception as e:  # noqa: BLE001 - specs are optional for the offline proposer
                self.warnings.append(f"specs not loaded ({str(e).splitlines()[0][:160]}); node impacts are defaults")
        return _impact(t, knob, self._specs)

    # -- analysis ------------------------------------------------------------------------------------
    def analyze(self, task: KernelTask, backend: str, device: str = "") -> Analysis:
        return analyze(task, backend, device=device)

    # -- the tree ------------------------------------------------------------------------------------
    def edit_tree(self, tree: PlanTree, history: list[Attempt], context: ProposeContext | None = None) -> list:
        kinds = context.kinds if context else ["ops"]
        if context is not None and _edits_user_code(context):
            edits = self._transform_edits(tree, history, context)
            if self.family is not None and not any(n.template and not n.template.startswith(XFORM)
                                                   for n in tree.nodes.values()):
                edits += self._seed(kinds)[:1]        # the family's templates: extra plans next to the user's code
            elif self.family is not None and not edits:
                edits += self._family_edits(tree, history, context, kinds)
            return edits
        if self.family is None:
            return []
        return self._family_edits(tree, history, context, kinds)

    def _family_edits(self, tree: PlanTree, history: list[Attempt], context: ProposeContext | None,
                      kinds: list[str]) -> list:
        rng = random.Random(self.seed * 1_000_003 + len(history) * 7919 + tree.round)
        if not [n for n in tree.nodes.values() if n.id != ROOT and n.template and not n.template.startswith(XFORM)]:
            return self._seed(kinds)
        edits: list = []
        step = 2 if context is not None and context.new_round else 1
        last = tree.nodes.get(history[-1].node_id) if history else None
        if last is not None and last.id != ROOT:
            if last.status == "passed" and last.template:
                edits += self._expand(tree, last, history, rng, step)
            elif last.status in ("failed", "not_runnable"):
                edits += self._demote_siblings(tree, last)
                if last.status == "failed" and last.template:
                    edits += self._alternative(tree, last, rng)
        if not tree.frontier() and not any(isinstance(e, Insert) for e in edits):
            for n in [n for n in self._passed_by_speed(tree) if not n.template.startswith(XFORM)]:
                more = self._expand(tree, n, history, rng, step)
                if not more and step == 1:
                    more = self._expand(tree, n, history, rng, 2)
                if more:
                    edits += more
                    break
        return edits

    def _seed(self, kinds: list[str]) -> list:
        specs: list[NodeSpec] = []
        usable = [(t, k) for t in self.family.templates for k in kinds if k in t.kinds]
        top = max((t.predicted_speedup for t, _ in usable), default=1.0) or 1.0
        for t, kind in usable:
            knobs = t.defaults()
            if not t.valid(knobs):
                valid = [kv for kv in _grid(t, limit=64) if t.valid(kv)]
                if not valid:
                    continue
                knobs = valid[0]
            prior = 0.25 + 0.6 * min(1.0, t.predicted_speedup / top) - 0.04 * (t.difficulty - 1)
            specs.append(NodeSpec(
                decision=f"approach ({t.pattern})", choice=t.description or t.id, template=t.id, knobs=knobs,
                kind=kind, impact=self._spec_impact(t), difficulty=t.difficulty, confidence=0.4,
                score=round(min(1.0, max(0.05, prior)), 3), predicted_speedup=t.predicted_speedup,
                notes=f"seeded from template {t.id} with its default knobs"))
        return [Insert(parent=ROOT, nodes=specs[i:i + 3]) for i in range(0, len(specs), 3)]

    # -- the user's code: source transformations -----------------------------------------------------
    def _transform_edits(self, tree: PlanTree, history: list[Attempt], context: ProposeContext) -> list:
        """Seed the root's transformations once; after a transformed node passes, its own next steps."""
        analysis = context.analysis.model_dump() if context.analysis is not None else {}
        kind = context.kinds[0] if context.kinds else "cuda"
        if not any(n.template and n.template.startswith(XFORM) for n in tree.nodes.values()):
            return self._transform_children(tree, ROOT, context.original_source, analysis, kind, 1.0)
        last = tree.nodes.get(history[-1].node_id) if history else None
        out: list = []
        if last is not None and last.status == "passed" and last.template and last.template.startswith(XFORM):
            try:
                src = transforms.apply_chain(context.original_source, _chain(tree, last.id))
            except transforms.TransformError:
                src = None
            if src is not None:
                base = last.speedup_vs_original or last.predicted_speedup or 1.0
                out = self._transform_children(tree, last.id, src, analysis, kind, base)
        if not out and not tree.frontier():
            # the frontier ran dry: grow the best passing chain again (its untried options)
            for n in sorted((n for n in tree.nodes.values() if n.status == "passed"),
                            key=lambda n: -(n.speedup_vs_original or n.speedup or 0.0)):
                try:
                    src = context.original_source if n.id == ROOT else \
                        transforms.apply_chain(context.original_source, _chain(tree, n.id))
                except transforms.TransformError:
                    continue
                out = self._transform_children(tree, n.id, src, analysis, kind, n.speedup_vs_original or 1.0)
                if out:
                    break
        return out

    def _transform_children(self, tree: PlanTree, parent: str, source: str, analysis: dict, kind: str,
                            base: float) -> list:
        # the same set of edits in another order is the same candidate: tried once
        done = {frozenset(map(tuple, _chain(tree, n.id))) for n in tree.nodes.values()
                if n.template and n.template.startswith(XFORM)}
        prefix = _chain(tree, parent) if parent != ROOT else []
        used = {tid for tid, _ in prefix}
        specs: list[NodeSpec] = []
        # what the predictions read besides the analysis: the threads per block the program launched with
        used, most = transforms.captured_blocks(source)
        seen = dict(analysis or {}, captured_blocks=sorted(used), captured_most_blocks=most)
        for t, values in transforms.applicable(source):
            if t.id in used:
                continue
            for v in values:
                if frozenset(map(tuple, prefix + [(t.id, v)])) in done:
                    continue
                impact, factor = t.predict(seen, v)
                specs.append(NodeSpec(
                    decision=t.decision, choice=t.describe(v), template=XFORM + t.id, knobs={t.knob: v}, kind=kind,
                    impact=impact, difficulty=t.difficulty, confidence=0.45,
                    score=round(min(1.0, max(0.05, 0.4 + 0.4 * (factor - 1.0) * 4 - 0.03 * len(specs))), 3),
                    predicted_speedup=max(round(base * factor, 3), 1e-3),
                    notes=f"edit of the user's kernel: {t.id}={v}; predicted x{factor:.2f} ({impact.notes})"))
                break      # one value per transformation at a time: its other values come as siblings later
        specs = specs[: self.max_new_nodes or len(specs)]
        return [Insert(parent=parent, nodes=specs[i:i + 3]) for i in range(0, len(specs), 3)]

    def _expand(self, tree: PlanTree, node: PlanNode, history: list[Attempt], rng: random.Random, step: int) -> list:
        try:
            t = self.family.template(node.template)
        except KeyError:
            return []
        seen = tree.configs()
        gains = _direction_gains(tree, self.family)
        options: list[tuple[float, str, Any, Any, int]] = []
        for knob, listed in t.knobs.items():
            if len(listed) < 2 or knob not in node.knobs:
                continue
            # a template lists its default first; a numeric knob's neighbours are the next value up and down
            # (chunk 8 in [8, 1, 4, 16, 32] tunes to 4 and 16), not the next entries of the list
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in listed)
            values = sorted(listed) if numeric else listed
            try:
                i = values.index(node.knobs[knob])
            except ValueError:
                continue
            for d in (-step, step):
                j = i + d
                if not 0 <= j < len(values):
                    continue
                knobs = {**node.knobs, knob: values[j]}
                probe = NodeSpec(decision="x", choice="x", template=t.id, knobs=knobs, kind=node.kind)
                if config_key(probe) in seen or not t.valid(knobs):
                    continue
                direction = 1 if d > 0 else -1
                options.append((gains.get((t.id, knob, direction), 0.0) + rng.random() * 0.05, knob,
                                node.knobs[knob], values[j], direction))
        options.sort(key=lambda o: -o[0])
        chosen, used = [], set()
        for o in options:  # one child per knob first, then the rest
            if o[1] not in used:
                chosen.append(o)
                used.add(o[1])
        chosen += [o for o in options if o not in chosen]
        chosen = chosen[: self.children_per_pass]
        if not chosen:
            return []
        best = tree.best_speedup or node.speedup or 1.0
        rel = min(1.0, (node.speedup or best) / best) if best else 1.0
        specs = []
        for rank, (gain, knob, old, new, direction) in enumerate(chosen):
            score = 0.45 + 0.35 * rel + max(-0.15, min(0.15, gain)) - 0.03 * rank
            pred = (node.speedup or 1.0) * (1.0 + max(-0.2, min(0.3, gain)) + 0.05)
            specs.append(NodeSpec(
                decision=f"tune {knob}", choice=f"{knob} {old} → {new}", template=t.id,
                knobs={**node.knobs, knob: new}, kind=node.kind, impact=self._spec_impact(t, knob), difficulty=t.difficulty,
                confidence=0.5 if gain else 0.35, score=round(min(1.0, max(0.05, score)), 3),
                predicted_speedup=max(round(pred, 3), 1e-3),   # > 0 even under a tiny measured speedup
                notes=(f"this direction paid {gain:+.2f} before" if gain else "untried direction")))
        return [Insert(parent=node.id, nodes=specs)]

    def _demote_siblings(self, tree: PlanTree, failed: PlanNode) -> list:
        """A configuration that failed makes its untried neighbours (same template, same parent) less likely."""
        out = []
        for n in tree.open_nodes():
            if n.parent == failed.parent and n.template == failed.template and n.id != failed.id:
                out.append(Update(node=n.id, score=round(max(0.05, n.score - 0.15), 3),
                                  notes=(n.notes + f"; sibling {failed.id} {failed.status}").strip("; ")))
        return out

    def _alternative(self, tree: PlanTree, failed: PlanNode, rng: random.Random) -> list:
        """A failed configuration gets one sibling with one knob moved (a template may fail only at some
        settings), until the template has failed `MAX_TEMPLATE_FAILURES` times in this kind."""
        fails = [n for n in tree.nodes.values() if n.template == failed.template and n.kind == failed.kind
                 and n.status == "failed"]
        if len(fails) >= MAX_TEMPLATE_FAILURES:
            return []
        try:
            t = self.family.template(failed.template)
        except KeyError:
            return []
        seen = tree.configs()
        options = []
        for knob, values in t.knobs.items():
            if failed.knobs.get(knob) not in values:
                continue
            i = values.index(failed.knobs[knob])
            for j in (i + 1, i - 1):
                if 0 <= j < len(values):
                    knobs = {**failed.knobs, knob: values[j]}
                    probe = NodeSpec(decision="x", choice="x", template=t.id, knobs=knobs, kind=failed.kind)
                    if config_key(probe) not in seen and t.valid(knobs):
                        options.append((knob, failed.knobs[knob], values[j], knobs))
        if not options:
            return []
        knob, old, new, knobs = options[rng.randrange(len(options))]
        spec = NodeSpec(decision=f"work around a failure ({knob})", choice=f"{knob} {old} → {new} after {failed.id} failed",
                        template=t.id, knobs=knobs, kind=failed.kind, impact=self._spec_impact(t, knob),
                        difficulty=t.difficulty, confidence=0.25, score=round(max(0.05, failed.score - 0.2), 3),
                        predicted_speedup=failed.predicted_speedup,
                        notes=f"{failed.id} failed: {failed.message[:120]}")
        return [Insert(parent=failed.parent or ROOT, nodes=[spec])]

    @staticmethod
    def _passed_by_speed(tree: PlanTree) -> list[PlanNode]:
        done = [n for n in tree.nodes.values() if n.status == "passed" and n.template]
        return sorted(done, key=lambda n: -(n.speedup or 0.0))

    # -- candidates ----------------------------------------------------------------------------------
    def write_candidate(self, node: PlanNode, context: ProposeContext) -> CandidateDraft:
        if node.template and node.template.startswith(XFORM):
            steps = _chain(context.tree, node.id) if context.tree is not None else \
                [(node.template[len(XFORM):], next(iter(node.knobs.values()), True))]
            try:
                source = transforms.apply_chain(context.original_source, steps)
            except transforms.TransformError as e:
                raise ProposerError(f"node {node.id}: {e}") from None
            return CandidateDraft(source=source, notes="the user's kernel with " +
                                  ", ".join(f"{tid}={v}" for tid, v in steps))
        if self.family is None or not node.template:
            raise ProposerError(f"node {node.id} names no template; the offline proposer writes only template "
                                f"candidates (use --proposer gemini or openai for free-form plans)")
        try:
            t = self.family.template(node.template)
            source = t.render(dict(node.knobs), node.kind)
        except Exception as e:  # noqa: BLE001 - a template bug is reported on the node, not raised
            raise ProposerError(f"template {node.template} could not render {node.knobs} as {node.kind}: "
                                f"{type(e).__name__}: {e}") from None
        return CandidateDraft(source=source, notes=f"{t.id} {node.knobs} ({node.kind})")

    def debug(self, previous_source: str, error: str, context: ProposeContext | None = None) -> CandidateDraft | None:
        """Templates are fixed text: a failing configuration is recorded, not patched."""
        return None


XFORM = "xform:"


def _edits_user_code(context: ProposeContext) -> bool:
    """Whether the run starts from a port of the user's kernel that the source transformations can edit."""
    src = context.original_source or ""
    return "LAUNCH_CUDA_SOURCE" in src or "LAUNCH_METAL_SOURCE" in src


def _chain(tree: PlanTree, node_id: str) -> list[tuple[str, Any]]:
    """The transformations on the root→node path, in order, as (id, knob value)."""
    out = []
    for n in tree.path(node_id):
        if n.template and n.template.startswith(XFORM):
            out.append((n.template[len(XFORM):], next(iter(n.knobs.values()), True)))
    return out


def _grid(t: Template, limit: int) -> list[dict]:
    out = [{}]
    for k, vals in t.knobs.items():
        out = [{**o, k: v} for o in out for v in vals][:limit]
    return out


def _direction_gains(tree: PlanTree, family: Family) -> dict[tuple, float]:
    """Relative speedup change each (template, knob, direction) produced when a tuned child was measured;
    a direction is up or down the template's list of values for that knob."""
    acc: dict[tuple, list[float]] = {}
    for n in tree.nodes.values():
        p = tree.nodes.get(n.parent) if n.parent else None
        if not p or not n.template or n.template != p.template or n.status not in ("passed", "failed"):
            continue
        diff = [k for k in n.knobs if n.knobs.get(k) != p.knobs.get(k)]
        if len(diff) != 1 or p.speedup is None:
            continue
        k = diff[0]
        try:
            values = family.template(n.template).knobs[k]
            direction = 1 if values.index(n.knobs[k]) > values.index(p.knobs[k]) else -1
        except (KeyError, ValueError):
            continue
        g = ((n.speedup or 0.0) / p.speedup - 1.0) if n.status == "passed" else -0.3
        acc.setdefault((n.template, k, direction), []).append(g)
    return {key: sum(v) / len(v) for key, v in acc.items()}


def _impact(t: Template, knob: str | None, specs) -> Impact:
    """The spec pattern's predicted impact for a template, when the spec has it."""
    try:
        imp = specs.pattern(t.pattern).impact
        return Impact(memory_traffic=imp.memory_traffic, occupancy=imp.occupancy, compute_fit=imp.compute_fit,
                      notes=f"from specs pattern {t.pattern}" + (f"; tuning {knob}" if knob else ""))
    except Exception:  # noqa: BLE001 - no specs, or the template's pattern is not in them
        return Impact(notes=f"tuning {knob}" if knob else "")
