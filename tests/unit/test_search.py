"""The search loop on MLX's CPU backend with the offline proposer: it starts from the naive kernel, improves on
it with measured candidates only, keeps its tree in the store, and resumes where it stopped."""
import dataclasses
import pytest

from ksearch_engine.evaluate import Limits
from ksearch_engine.events import SearchRequest
from ksearch_engine.search import run_search, tree_text
from ksearch_engine.store import Store
from ksearch_engine.worldmodel import ROOT, PlanTree
from tests.fakes import toy_family

LIMITS = Limits(wall_s=30)


def _run(tmp_path, events, *, max_evals, run_id=None, resume=False, with_broken=False, seed=0, family=None):
    store = Store(tmp_path / "ks.db")
    req = SearchRequest(store_path=str(store.path), backend="mlx-cpu", max_evals=max_evals, run_id=run_id,
                        resume=resume, stagnation=4, seed=seed)
    done = run_search(req, store, events.append, family=family or toy_family.family(with_broken), limits=LIMITS, repeats=5)
    return store, req, done


def test_offline_search_improves_on_the_naive_kernel_with_measured_candidates(tmp_path):
    events = []
    store, req, done = _run(tmp_path, events, max_evals=7, with_broken=True)
    cands = store.candidates(req.run_id)
    assert done.status == "done" and done.evals == len(cands) == 7
    original = [c for c in cands if c["plan"] == "original"]
    assert len(original) == 1 and original[0]["status"] == "passed"
    orig_ms = original[0]["result"]["timing"]["median_ms"]

    best = store.candidate(done.best_candidate)
    assert best["status"] == "passed" and best["result"]["timing"] is not None
    assert best["result"]["timing"]["median_ms"] < orig_ms / 2          # naive row loop vs vectorized blocks
    # the speed-up over the baseline op is reported but not asserted: the baseline's time drifts between
    # evaluations (the trusted worker's first requests run it slower); the headline is vs the original
    assert best["result"]["vs_original"]["speedup"] > 2
    assert store.run(req.run_id)["best_candidate"] == done.best_candidate

    bests = [e for e in events if e.type == "best"]
    assert bests, "an improvement must be announced"
    for e in bests:                                                     # every reported best: passed and timed
        c = store.candidate(e.candidate_id)
        assert c["status"] == "passed" and c["result"]["timing"]["median_ms"] == pytest.approx(e.median_ms)
    assert [e.median_ms for e in bests] == sorted((e.median_ms for e in bests), reverse=True)   # each best beats the last
    assert {"stage", "node", "candidate", "best", "log"} <= {e.type for e in events}

    tree = PlanTree.model_validate_json(store.latest_tree(req.run_id))
    assert tree.nodes[ROOT].candidate_id == original[0]["id"]
    assert tree.best_node and tree.nodes[tree.best_node].candidate_id == done.best_candidate
    tried = [n for n in tree.nodes.values() if n.candidate_id and n.id != ROOT]
    assert any(n.parent != ROOT for n in tried), "the search should refine a passing node, not only seed"
    text = tree_text(store, req.run_id)
    assert "★ best" in text and "original" in text and "vs original" in text


def test_a_failing_template_is_recorded_on_its_node_and_the_search_goes_on(tmp_path):
    # the broken template predicted to beat everything measured, so the search tries it whatever the machine's
    # speed (at its stock 0.5x it may rightly never be tried once the original measures above that)
    fam = toy_family.family(True)
    fam = dataclasses.replace(fam, templates=[dataclasses.replace(t, predicted_speedup=1000.0) if t.id == "toy.broken"
                                              else t for t in fam.templates])
    events = []
    store, req, done = _run(tmp_path, events, max_evals=8, family=fam)
    tree = PlanTree.model_validate_json(store.latest_tree(req.run_id))
    broken = [n for n in tree.nodes.values() if n.template == "toy.broken" and n.status == "failed"]
    assert broken and "compile_error" in broken[0].message
    assert store.candidate(broken[0].candidate_id)["status"] == "compile_error"
    assert done.best_candidate is not None


def test_resume_continues_from_the_stored_tree_without_redoing_the_original(tmp_path):
    events = []
    store, req, first = _run(tmp_path, events, max_evals=3)
    n_tree = len(PlanTree.model_validate_json(store.latest_tree(req.run_id)).nodes)
    events2 = []
    store, req2, second = _run(tmp_path, events2, max_evals=6, run_id=req.run_id, resume=True)
    cands = store.candidates(req.run_id)
    assert second.evals == len(cands) == 6
    assert sum(c["plan"] == "original" for c in cands) == 1
    assert any("resumed run" in e.message for e in events2 if e.type == "log")
    tree = PlanTree.model_validate_json(store.latest_tree(req.run_id))
    assert len(tree.nodes) > n_tree
    node_ids = {c["node_id"] for c in cands}
    assert len(node_ids) == 6                        # no node evaluated twice across the two processes' runs
    # the best after resuming is at least as good as before. The best is decided on candidates' own times (search.improves): the baseline's time drifts between the
    # two processes' runs, so speedups over it are not comparable across them
    ms = lambda cid: store.candidate(cid)["result"]["timing"]["median_ms"]  # noqa: E731
    if first.best_candidate:
        assert ms(second.best_candidate) <= ms(first.best_candidate)


def test_offline_search_is_deterministic_for_a_seed(tmp_path):
    a_store, a_req, _ = _run(tmp_path / "a", [], max_evals=3, seed=7)
    b_store, b_req, _ = _run(tmp_path / "b", [], max_evals=3, seed=7)
    plans = lambda s, r: [c["plan"] for c in s.candidates(r.run_id)]  # noqa: E731
    # the first choices do not depend on timing noise: seeding and the first expansion are seed-determined
    assert plans(a_store, a_req)[:2] == plans(b_store, b_req)[:2]


METAL_DOUBLE = '''import mlx.core as mx

_k = mx.fast.metal_kernel(name="dbl", input_names=["x"], output_names=["out"], source="""
    uint i = thread_position_in_grid.x;
    if (i < x_shape[0]) out[i] = x[i] * 2.0f;
""")

def kernel(x):
    return _k(inputs=[x], grid=(x.size, 1, 1), threadgroup=(TG, 1, 1), output_shapes=[x.shape],
              output_dtypes=[x.dtype])[0]
'''


def test_on_the_simulator_metal_candidates_are_verified_and_never_timed(tmp_path):
    from ksearch_engine.families.base import Family, Template
    from ksearch_engine.task import InputSpec, KernelTask, Workload

    task = KernelTask(name="double", family="elementwise", inputs=[InputSpec(name="x", shape=["N"])],
                      reference="import mlx.core as mx\ndef reference(x):\n    return x * 2.0\n",
                      workloads=[Workload(name="s", dims={"N": 100})], seeds=[0])
    tpl = Template(id="dbl.metal", pattern="elementwise.vectorized", kinds=("metal",), knobs={"TG": [32, 64]},
                   render=lambda k, kind: METAL_DOUBLE.replace("TG", str(k["TG"])), description="one thread per element")
    fam = Family(name="double", make_task=lambda: task, templates=[tpl],
                 naive=lambda kind: "import mlx.core as mx\ndef kernel(x):\n    return x + x\n")
    store = Store(tmp_path / "ks.db")
    events = []
    req = SearchRequest(store_path=str(store.path), backend="sim", max_evals=3, family="double")
    done = run_search(req, store, events.append, family=fam, limits=Limits(wall_s=120))
    cands = store.candidates(req.run_id)
    assert [c["kind"] for c in cands[1:]] == ["metal", "metal"]
    assert all(c["status"] == "passed" and c["result"]["timing"] is None for c in cands)
    for e in events:
        assert getattr(e, "median_ms", None) is None and getattr(e, "speedup", None) is None
    assert done.best_candidate == cands[1]["id"] and "not timed" in done.message
    text = tree_text(store, req.run_id)
    assert "verified, not timed" in text and " ms" not in text
