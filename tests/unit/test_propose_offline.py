"""The offline proposer: seeds the plan tree from a family's templates, then tunes the knobs of passing nodes,
steered by what paid before. Deterministic for a seed; needs no network."""
import pytest

from ksearch_engine.propose import ProposerError
from ksearch_engine.propose.base import Attempt, ProposeContext
from ksearch_engine.propose.offline import OfflineProposer
from ksearch_engine.worldmodel import ROOT, Insert, NodeSpec, PlanTree
from tests.fakes import toy_family


def ctx(tree, new_round=False):
    return ProposeContext(task=toy_family.make_task(), backend="mlx-cpu", kinds=["ops"], tree=tree,
                          new_round=new_round)


def seeded(seed=0, with_broken=False):
    p = OfflineProposer(toy_family.family(with_broken), seed=seed)
    tree = PlanTree.new()
    outcomes = tree.apply_all(p.edit_tree(tree, [], ctx(tree)), max_new=p.max_new_nodes)
    assert all(o.ok for o in outcomes), outcomes
    return p, tree


def passed(tree, nid, speedup):
    tree.record(nid, candidate_id=f"c-{nid}", status="passed", median_ms=1.0 / speedup, speedup=speedup)
    return Attempt(node_id=nid, candidate_id=f"c-{nid}", status="passed", speedup=speedup)


def test_seeding_puts_one_node_per_template_with_default_knobs():
    p, tree = seeded(with_broken=True)
    kids = tree.children(ROOT)
    assert {n.template for n in kids} == {"toy.chunked", "toy.fused", "toy.broken"}
    chunked = next(n for n in kids if n.template == "toy.chunked")
    assert chunked.knobs == {"rows": 2, "subtract_max": True} and chunked.kind == "ops"
    # toy.fused predicts more but is difficulty 4: the gate (3) makes the easy template go first
    assert tree.select().template == "toy.chunked"


def test_a_passing_node_gets_children_that_each_move_one_knob_to_a_neighbouring_value():
    p, tree = seeded()
    n = tree.select()
    history = [passed(tree, n.id, 9.0)]        # beyond toy.fused's predicted 8x: tuning goes next
    tree.set_best(n.id, 9.0)
    edits = p.edit_tree(tree, history, ctx(tree))
    tree.apply_all(edits, max_new=p.max_new_nodes)
    kids = tree.children(n.id)
    assert kids and all(k.template == n.template for k in kids)
    rows = toy_family.CHUNKED.knobs["rows"]
    for k in kids:
        changed = [key for key in k.knobs if k.knobs[key] != n.knobs[key]]
        assert changed == ["rows"]
        assert abs(rows.index(k.knobs["rows"]) - rows.index(n.knobs["rows"])) == 1
    assert tree.select().parent == n.id


def test_an_untried_approach_predicted_to_beat_the_best_goes_before_tuning_a_worse_plan():
    """toy.chunked (easy, predicted 4x) runs first; measured at 1.5x, it is below toy.fused's predicted 8x, so the
    hard toy.fused goes next, before chunked's knob children; once something measured beyond every prediction,
    tuning the best plan goes first, and the gate never holds back the children of a plan that ran."""
    p, tree = seeded()
    n = tree.select()
    assert n.template == "toy.chunked"
    history = [passed(tree, n.id, 1.5)]
    tree.set_best(n.id, 1.5)
    tree.apply_all(p.edit_tree(tree, history, ctx(tree)), max_new=p.max_new_nodes)
    assert tree.children(n.id)
    fused = tree.select()
    assert fused.template == "toy.fused" and fused.parent == ROOT
    history.append(passed(tree, fused.id, 10.0))
    tree.set_best(fused.id, 10.0)
    tree.apply_all(p.edit_tree(tree, history, ctx(tree)), max_new=p.max_new_nodes)
    nxt = tree.select()
    assert nxt.parent == fused.id and nxt.difficulty == 4     # above the gate (3), yet first: its plan ran


def test_directions_that_paid_before_rank_first():
    p, tree = seeded()
    root_kid = next(n for n in tree.children(ROOT) if n.template == "toy.chunked")
    tree.apply(Insert(parent=ROOT, nodes=[NodeSpec(decision="x", choice="x", template="toy.chunked",
                                                   knobs={"rows": 32, "subtract_max": True})]))
    mid = "n3"
    passed(tree, mid, 1.0)
    tree.apply(Insert(parent=mid, nodes=[NodeSpec(decision="tune rows", choice="rows 32 → 128", template="toy.chunked",
                                                  knobs={"rows": 128, "subtract_max": True})]))
    up = tree.children(mid)[0]
    history = [passed(tree, up.id, 2.0)]            # moving rows up doubled the speed
    tree.set_best(up.id, 2.0)
    tree.apply_all(p.edit_tree(tree, history, ctx(tree)), max_new=None)
    kids = {k.knobs["rows"]: k for k in tree.children(up.id)}
    assert set(kids) == {512}                        # 32 is already in the tree: never proposed twice
    assert kids[512].score > root_kid.score and "paid" in kids[512].notes


def test_same_seed_same_edits():
    a = [e.model_dump() for e in OfflineProposer(toy_family.family(), seed=3).edit_tree(PlanTree.new(), [], ctx(PlanTree.new()))]
    b = [e.model_dump() for e in OfflineProposer(toy_family.family(), seed=3).edit_tree(PlanTree.new(), [], ctx(PlanTree.new()))]
    assert a == b and a


def test_a_failure_demotes_its_twins_and_tries_one_other_setting():
    p, tree = seeded(with_broken=True)
    broken = next(n for n in tree.children(ROOT) if n.template == "toy.broken")
    tree.record(broken.id, candidate_id="cb", status="failed", message="compile_error · line 3")
    edits = p.edit_tree(tree, [Attempt(node_id=broken.id, candidate_id="cb", status="compile_error")], ctx(tree))
    tree.apply_all(edits, max_new=p.max_new_nodes)
    alt = [n for n in tree.open_nodes() if n.template == "toy.broken"]
    assert len(alt) == 1 and alt[0].knobs == {"variant": "ok"} and alt[0].score < broken.score


def test_an_empty_frontier_reexpands_the_best_passing_node():
    p, tree = seeded()
    for n in list(tree.open_nodes()):
        passed(tree, n.id, 1.0 if n.template == "toy.fused" else 3.0)
    assert tree.frontier() == []
    tree.apply_all(p.edit_tree(tree, [], ctx(tree)), max_new=None)
    assert tree.frontier() and tree.frontier()[0].template == "toy.chunked"


def test_write_candidate_renders_the_template_and_refuses_free_form_nodes():
    p, tree = seeded()
    n = tree.select()
    n.knobs["rows"] = 128
    draft = p.write_candidate(n, ctx(tree))
    assert "ROWS = 128" in draft.source and "def kernel(x)" in draft.source
    tree.apply(Insert(parent=ROOT, nodes=[NodeSpec(decision="d", choice="an idea without a template")]))
    with pytest.raises(ProposerError, match="--proposer gemini"):
        p.write_candidate(tree.nodes["n3"], ctx(tree))
    assert OfflineProposer(None).edit_tree(PlanTree.new(), [], ctx(PlanTree.new())) == []
    assert p.debug("source", "error") is None


def test_a_numeric_knob_listed_default_first_tunes_to_its_next_values_up_and_down():
    """A template lists its default first (the scan's chunk: [8, 1, 4, 16, 32]); tuning moves to the next value
    up and down (4 and 16), never to the next entry of the list (1), so the far end is reached in a few steps."""
    from ksearch_engine.families.base import Family, Template
    base = toy_family.CHUNKED
    t = Template(id="toy.unsorted", pattern=base.pattern, kinds=base.kinds, render=base.render,
                 knobs={"rows": [8, 2, 32, 128, 512], "subtract_max": [True]}, description="rows listed default first")
    fam = toy_family.family()
    fam = Family(name=fam.name, make_task=fam.make_task, templates=[t], naive=fam.naive, description=fam.description)
    p = OfflineProposer(fam, seed=0)
    tree = PlanTree.new()
    tree.apply_all(p.edit_tree(tree, [], ctx(tree)), max_new=p.max_new_nodes)
    n = tree.select()
    assert n.knobs["rows"] == 8
    history = [passed(tree, n.id, 1.5)]
    tree.set_best(n.id, 1.5)
    tree.apply_all(p.edit_tree(tree, history, ctx(tree)), max_new=None)
    assert {k.knobs["rows"] for k in tree.children(n.id)} == {2, 32}


def test_on_the_real_families_the_best_predicted_template_is_tried_before_tuning_a_slower_plan():
    """The attention, scan and decode families on a CUDA backend: once the easy approach has measured (well below
    what the tensor-core / one-kernel templates predict), the next node is the template with the highest
    prediction, not a knob of the easy plan (a GPU run spent all 8 evaluations tuning attention.ops at 0.2x)."""
    from ksearch_engine import families

    for fam, expect in (("attention", "attention.flash_wgmma"), ("scan", "scan.chunked_fused"),
                        ("decode", "decode.gqa_async")):
        family = families.get(fam)
        p = OfflineProposer(family, seed=0)
        tree = PlanTree.new()
        context = ProposeContext(task=family.make_task(), backend="mlx-cuda", kinds=["ops", "cuda"], tree=tree)
        tree.apply_all(p.edit_tree(tree, [], context), max_new=p.max_new_nodes)
        tree.set_best(ROOT, 0.01)                              # the naive original
        history = []
        for _ in range(6):                                     # every easy approach measures at 0.1x
            n = tree.select()
            if n.template == expect:
                break
            history.append(passed(tree, n.id, 0.1))
            if tree.best_speedup < 0.1:
                tree.set_best(n.id, 0.1)
            tree.apply_all(p.edit_tree(tree, history, context), max_new=p.max_new_nodes)
        assert n.template == expect, (fam, [(h.node_id, tree.nodes[h.node_id].template) for h in history])
        assert all(tree.nodes[h.node_id].parent == ROOT for h in history), fam   # approaches only, no tuning yet
