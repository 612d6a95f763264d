"""The Ray pool on a real local cluster: each candidate runs only on a node offering its backend, carries that
node's name in its result, and a node killed mid-candidate costs that candidate a retry elsewhere, not the run."""
from __future__ import annotations

import time

import pytest

from tests.cluster.helpers import wait_until_busy
from ksearch_engine.evaluate import Limits
from ksearch_engine.pool import PoolError
from ksearch_engine.pool.ray_pool import RayPool
from tests.fakes import toy_family

METAL_DOUBLE = '''import mlx.core as mx

_k = mx.fast.metal_kernel(name="dbl", input_names=["x"], output_names=["out"], source="""
    uint i = thread_position_in_grid.x;
    if (i < x_shape[0]) out[i] = x[i] * 2.0f;
""")

def kernel(x):
    return _k(inputs=[x], grid=(x.size, 1, 1), threadgroup=(32, 1, 1), output_shapes=[x.shape],
              output_dtypes=[x.dtype])[0]
'''

SLOW = '''import time
import mlx.core as mx

time.sleep(4)          # long enough to kill its node while it runs

def kernel(x):
    return mx.softmax(x, axis=-1)
'''


def double_task():
    from ksearch_engine.task import InputSpec, KernelTask, Workload
    return KernelTask(name="double", family="elementwise", inputs=[InputSpec(name="x", shape=["N"])],
                      reference="import mlx.core as mx\ndef reference(x):\n    return x * 2.0\n",
                      workloads=[Workload(name="s", dims={"N": 100})], seeds=[0])


def test_candidates_run_only_on_nodes_that_offer_their_backend(ray_cluster):
    toy = toy_family.make_task(rows=64, cols=64)
    with RayPool(ray_cluster.address, limits=Limits(wall_s=60), repeats=3) as pool:
        assert pool.slots("mlx-cpu") == 1 and pool.slots("sim") == 1
        assert pool.info("sim").timed is False and pool.info("mlx-cpu").timed is True
        futs = [(b, pool.submit(t, src, b)) for b, t, src in [
            ("mlx-cpu", toy, toy_family.NAIVE), ("sim", double_task(), METAL_DOUBLE),
            ("mlx-cpu", toy, toy_family.NAIVE), ("sim", double_task(), METAL_DOUBLE)]]
        results = [(b, f.result(timeout=240)) for b, f in futs]
        with pytest.raises(PoolError, match="mlx_metal"):
            pool.submit(toy, toy_family.NAIVE, "mlx-metal")       # no node offers it: an error that says so
    where = {"mlx-cpu": ray_cluster.node_id("cpu-a"), "sim": ray_cluster.node_id("sim-b")}
    for backend, r in results:
        assert r.status == "passed", r.message
        assert r.backend == backend
        assert r.sandbox["node"]["node_id"] == where[backend]          # only ever where its backend is
        assert r.sandbox["node"]["ip"] and r.sandbox["node"]["name"]
        assert r.sandbox.get("user"), "the candidate was still sandboxed (own uid) inside the Ray worker"
    assert all(r.timing is None for b, r in results if b == "sim")      # the simulator never times
    assert all(r.timing is not None for b, r in results if b == "mlx-cpu")


def test_killing_a_node_mid_candidate_retries_it_elsewhere(ray_cluster):
    ray_cluster.add("cpu-c", {"mlx_cpu": 1})
    try:
        toy = toy_family.make_task(rows=64, cols=64)
        with RayPool(ray_cluster.address, limits=Limits(wall_s=60), repeats=3, place_timeout_s=120) as pool:
            assert pool.slots("mlx-cpu") == 2
            pool.info("mlx-cpu")                                   # both actors placed and warm
            deadline = time.monotonic() + 60
            while sum(w["state"] == "ready" for w in pool.workers()) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            slow = pool.submit(toy, SLOW, "mlx-cpu")
            fast = pool.submit(toy, toy_family.NAIVE, "mlx-cpu")
            deadline = time.monotonic() + 60
            victim = None
            while victim is None and time.monotonic() < deadline:   # the node the slow candidate went to
                victim = next((w["node"]["node_id"] for w in pool.workers() if w["busy"]), None)
                time.sleep(0.05)
            time.sleep(1.5)                                        # it is inside the candidate now
            killed = ray_cluster.kill(victim)
            t_kill = time.monotonic()
            r_slow, r_fast = slow.result(timeout=180), fast.result(timeout=180)
            retried_in = time.monotonic() - t_kill
            assert any("died" in w for w in pool.warnings)
    finally:   # keep the cluster's shape for the other tests: one mlx_cpu node called cpu-a, one sim node
        if "cpu-a" not in ray_cluster.workers and "cpu-c" in ray_cluster.workers:
            ray_cluster.workers["cpu-a"] = ray_cluster.workers.pop("cpu-c")
        elif "cpu-c" in ray_cluster.workers:
            ray_cluster.kill(ray_cluster.node_id("cpu-c"))
    assert r_fast.status == "passed"
    assert r_slow.status == "passed", r_slow.message
    assert r_slow.sandbox["node"]["node_id"] != victim                # finished on the surviving node
    assert len(r_slow.sandbox["node_failures"]) == 1 and killed
    assert retried_in < 120


def test_cluster_status_lists_nodes_their_backends_and_what_each_runs(ray_cluster, capsys):
    import json

    from ksearch_engine import cli

    toy = toy_family.make_task(rows=64, cols=64)
    with RayPool(ray_cluster.address, limits=Limits(wall_s=60), repeats=3) as pool:
        pool.info("mlx-cpu")
        slow = pool.submit(toy, SLOW, "mlx-cpu")
        wait_until_busy(pool)
        assert cli.main(["--json", "cluster", "status", "--cluster", ray_cluster.address]) == 0
        st = json.loads(capsys.readouterr().out)
        assert slow.result(timeout=120).status == "passed"
    nodes = {n["node_id"]: n for n in st["nodes"] if n["alive"]}
    cpu, sim = nodes[ray_cluster.node_id("cpu-a")], nodes[ray_cluster.node_id("sim-b")]
    assert cpu["backends"] == {"mlx-cpu": 1} and sim["backends"] == {"sim": 1}
    assert any(n["head"] and not n["backends"] for n in nodes.values())
    [worker] = cpu["workers"]
    assert worker["backend"] == "mlx-cpu" and worker["running"]["task"] == "toy-softmax"
    assert not sim["workers"]                      # no sim actor was started by this pool
    assert cli.main(["cluster", "status", "--cluster", ray_cluster.address]) == 0
    table = capsys.readouterr().out
    assert "mlx-cpu×1" in table and "sim×1" in table and "(head)" in table

