"""A seeded search evaluated on the Ray cluster writes the same results into the store as the same search run
locally: same candidates, in the same order, with the same statuses, each naming the node it ran on."""
from __future__ import annotations

import pytest

from ksearch_engine.evaluate import Limits
from ksearch_engine.events import SearchRequest
from ksearch_engine.families.base import Family, Template
from ksearch_engine.pool import LocalPool
from ksearch_engine.pool.ray_pool import RayPool
from ksearch_engine.search import run_search
from ksearch_engine.store import Store
from tests.cluster.test_ray_pool import double_task

DOUBLE = '''import mlx.core as mx

_k = mx.fast.metal_kernel(name="dbl", input_names=["x"], output_names=["out"], source="""
    uint i = thread_position_in_grid.x;
    if (i < x_shape[0]) out[i] = x[i] * SCALE;
""")

def kernel(x):
    return _k(inputs=[x], grid=(x.size, 1, 1), threadgroup=(TG, 1, 1), output_shapes=[x.shape],
              output_dtypes=[x.dtype])[0]
'''


def family() -> Family:
    """Doubling as a Metal kernel: threadgroup-size knobs that pass, and a 'scale' knob that is wrong (fails)."""
    ok = Template(id="dbl.metal", pattern="elementwise.vectorized", kinds=("metal",), knobs={"TG": [32, 64, 128]},
                  render=lambda k, kind: DOUBLE.replace("TG", str(k["TG"])).replace("SCALE", "2.0f"),
                  description="one thread per element")
    wrong = Template(id="dbl.wrong", pattern="elementwise.vectorized", kinds=("metal",), knobs={"SCALE": ["3.0f"]},
                     render=lambda k, kind: DOUBLE.replace("TG", "32").replace("SCALE", k["SCALE"]),
                     description="a wrong constant", predicted_speedup=2.0)
    return Family(name="double", make_task=double_task, templates=[ok, wrong],
                  naive=lambda kind: "import mlx.core as mx\ndef kernel(x):\n    return x + x\n")


def _search(tmp_path, name, pool):
    store = Store(tmp_path / f"{name}.db")
    req = SearchRequest(store_path=str(store.path), backend="sim", max_evals=5, seed=3, family="double")
    events = []
    done = run_search(req, store, events.append, family=family(), limits=Limits(wall_s=120), pool=pool)
    return store, req, done, events


@pytest.mark.slow        # two searches on the simulator: about 50 s on 2 cores
def test_the_store_holds_the_same_results_as_a_local_run(ray_cluster, tmp_path):
    with LocalPool(limits=Limits(wall_s=120)) as local:
        l_store, l_req, l_done, _ = _search(tmp_path, "local", local)
    with RayPool(ray_cluster.address, limits=Limits(wall_s=120)) as pool:
        r_store, r_req, r_done, r_events = _search(tmp_path, "ray", pool)

    def rows(store, req):
        return [(c["seq"], c["node_id"], c["plan"], c["kind"], c["status"]) for c in store.candidates(req.run_id)]
    local_rows, ray_rows = rows(l_store, l_req), rows(r_store, r_req)
    assert local_rows == ray_rows
    assert len(ray_rows) == r_done.evals == l_done.evals == 5
    assert {r[4] for r in ray_rows} >= {"passed", "failed"}            # both outcomes went through the cluster
    assert r_store.candidate(r_done.best_candidate)["plan"] == l_store.candidate(l_done.best_candidate)["plan"]

    sim_node = ray_cluster.node_id("sim-b")
    for c in r_store.candidates(r_req.run_id):
        node = c["result"]["sandbox"]["node"]
        assert node["node_id"] == sim_node and node["pool"] == "ray"    # where the simulator backend is
    assert all(c["result"]["sandbox"]["node"]["pool"] == "local" for c in l_store.candidates(l_req.run_id))
    cand_events = [e for e in r_events if e.type == "candidate"]
    assert len(cand_events) == 5 and all(e.node for e in cand_events)   # progress names the node too
