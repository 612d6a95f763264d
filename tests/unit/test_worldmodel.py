"""The world model: a plan tree edited by typed operations, with K-Search's selection rules."""
import pytest

from ksearch_engine.worldmodel import (ROOT, DeleteOpenLeaf, EditError, Impact, Insert, NodeSpec, PlanTree, Split,
                                       Update, render_tree, render_tree_json)


def spec(choice, score=0.5, difficulty=2, **kw):
    return NodeSpec(decision="mapping", choice=choice, score=score, difficulty=difficulty, **kw)


def tree_with(*specs):
    t = PlanTree.new("row softmax")
    ids = t.apply(Insert(parent=ROOT, nodes=list(specs)))
    return t, ids


def test_insert_adds_children_and_caps_at_three():
    t, ids = tree_with(spec("a"), spec("b"))
    assert [n.id for n in t.children(ROOT)] == ids == ["n1", "n2"]
    with pytest.raises(Exception):
        Insert(parent=ROOT, nodes=[spec(str(i)) for i in range(4)])   # the type itself refuses 4 nodes
    outcomes = t.apply_all([Insert(parent=ROOT, nodes=[spec("c"), spec("d")]),
                            Insert(parent=ROOT, nodes=[spec("e"), spec("f")])], max_new=3)
    assert [o.ok for o in outcomes] == [True, False]
    assert "cap of 3" in outcomes[1].reason
    assert len(t.children(ROOT)) == 4


def test_a_bad_edit_is_rejected_with_a_reason_and_changes_nothing():
    t, (a, b) = tree_with(spec("a"), spec("b"))
    t.record(a, candidate_id="c1", status="failed", message="compile error")
    before = t.model_dump_json()
    for bad, why in [(Insert(parent=a, nodes=[spec("x")]), "failed"),
                     (Insert(parent="n99", nodes=[spec("x")]), "no node"),
                     (DeleteOpenLeaf(node=a), "only open"),
                     (DeleteOpenLeaf(node=ROOT), "root"),
                     (Update(node=a, choice="something else"), "cannot change"),
                     (Split(node=a, children=[spec("x"), spec("y")]), "open leaf"),
                     ({"op": "teleport", "node": b}, "not a valid edit")]:
        with pytest.raises(EditError, match=why):
            t.apply(bad)
        assert t.model_dump_json() == before


def test_split_turns_an_open_leaf_into_alternatives_that_are_selectable():
    t, (a,) = tree_with(spec("tile the rows"))
    kids = t.apply(Split(node=a, children=[spec("tile 32", score=0.4), spec("tile 64", score=0.9)]))
    assert t.nodes[a].status == "split"
    assert t.select().id == kids[1]            # split node itself is never selected; its best child is
    assert t.plan_text(kids[1]) == "mapping: tile the rows → mapping: tile 64"


def test_update_and_delete_open_leaf():
    t, (a, b) = tree_with(spec("a", score=0.2), spec("b", score=0.3))
    t.apply(Update(node=a, score=0.95, notes="evidence says yes", impact=Impact(memory_traffic="high")))
    assert t.nodes[a].score == 0.95 and t.nodes[a].impact.memory_traffic == "high"
    t.apply(DeleteOpenLeaf(node=b))
    assert b not in t.nodes


def test_selection_best_score_then_lower_difficulty_and_only_under_passing_nodes():
    t, (a, b, c) = tree_with(spec("a", score=0.5, difficulty=3), spec("b", score=0.5, difficulty=1),
                             spec("c", score=0.4, difficulty=1))
    assert t.select().id == b                  # same score: the easier first
    t.record(b, candidate_id="cb", status="failed")
    t.apply(Insert(parent=a, nodes=[spec("a-child", score=1.0)]))
    assert t.select().id == a                  # a's child waits: a has not passed yet
    t.record(a, candidate_id="ca", status="passed", median_ms=1.0, speedup=1.5)
    assert t.select().id == "n4"               # now a passed: its child (score 1.0) is on the frontier
    t.record("n4", candidate_id="cx", status="failed")
    assert t.select().id == c


def test_hard_nodes_wait_behind_the_difficulty_gate():
    t, (hard, easy) = tree_with(spec("hard", score=0.9, difficulty=5), spec("easy", score=0.1, difficulty=2))
    assert t.select().id == easy
    t.record(easy, candidate_id="c", status="passed", speedup=1.1, median_ms=2.0)
    assert t.select().id == hard               # easier ones spent: the gate no longer holds it back


def test_gap_between_prediction_and_measurement_is_written_on_the_node():
    t, (a,) = tree_with(spec("a", predicted_speedup=2.0))
    n = t.record(a, candidate_id="c", status="passed", median_ms=1.0, speedup=1.2, speedup_vs_original=3.0)
    assert "predicted 2.00x" in n.gap and "measured 1.20x" in n.gap and "worse" in n.gap


def test_stagnation_ends_a_round():
    t = PlanTree.new(stagnation=2)
    assert not t.note_result(False)
    assert t.note_result(False) and t.round == 1
    assert not t.note_result(True) and t.since_improvement == 0


def test_json_round_trip_and_render():
    t, (a, b) = tree_with(spec("vectorize rows", template="toy.chunked", knobs={"rows": 8}), spec("fuse"))
    t.record(a, candidate_id="c1", status="passed", median_ms=0.5, speedup=2.0, speedup_vs_original=8.0)
    t.set_best(a, 2.0)
    again = PlanTree.model_validate_json(t.model_dump_json())
    assert again == t
    text = render_tree(again)
    assert "vectorize rows" in text and "rows=8" in text and "★ best" in text and "8.00x vs original" in text
    assert text.index("n1") < text.index("n2")
    assert render_tree_json(t.model_dump_json()) == text and "[" not in text   # safe through rich markup


def test_reset_running_reopens_unrecorded_nodes():
    t, (a,) = tree_with(spec("a"))
    t.mark_running(a)
    assert t.reset_running() == [a] and t.nodes[a].status == "open"


def test_plans_still_grow_from_the_root_when_the_original_failed():
    t = PlanTree.new()
    t.record(ROOT, candidate_id="c0", status="runtime_error")
    ids = t.apply(Insert(parent=ROOT, nodes=[spec("a")]))
    assert t.select().id == ids[0]


def test_nodes_of_a_kind_the_backend_cannot_run_are_rejected():
    t = PlanTree.new()
    t.kinds = ["ops"]
    with pytest.raises(EditError, match="runs ops candidates only"):
        t.apply(Insert(parent=ROOT, nodes=[spec("simdgroup reduction", kind="metal")]))
    assert t.children(ROOT) == []
