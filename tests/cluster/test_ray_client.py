"""`--cluster ray://HOST:PORT`: the Ray pool, `ksearch cluster status` and `ksearch optimize` through the real Ray
Client (a head on this machine running its Ray Client server on a free loopback port, one worker node offering
`mlx_cpu`), and a Ray Client address where no cluster answers failing fast with an error that says what to do."""
from __future__ import annotations

import json
import os
import socket
import time
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'ray[client]==2.60.0'): skipped")
pytest.importorskip("grpc", reason="grpcio is not installed (pip install 'ray[client]==2.60.0'): skipped")
from ray.cluster_utils import Cluster  # noqa: E402

from tests.cluster.helpers import wait_until_busy
from ksearch_engine import cli, families  # noqa: E402
from ksearch_engine.evaluate import Limits  # noqa: E402
from ksearch_engine.pool import PoolError  # noqa: E402
from ksearch_engine.pool.ray_pool import CLIENT_TRY_S, RayPool  # noqa: E402
from ksearch_engine.store import Store  # noqa: E402
from tests.cluster.test_ray_pool import SLOW  # noqa: E402
from tests.fakes import toy_family  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def client_cluster():
    """A head (no resources) with its Ray Client server, and one node offering two mlx_cpu devices. The token and
    PYTHONPATH come from conftest.py's environment, like the other cluster tests'.

    The head's processes start with GRPC_ENABLE_FORK_SUPPORT=0, as a head serving Ray Client needs: with gRPC's fork
    support on, the server that Ray Client forks for each client segfaults before it starts in about one connection
    in five to ten (Ray 2.60.0, grpcio 1.85.1; ray_pool.connect tries once more, 40 s later)."""
    port = free_port()
    saved = os.environ.get("GRPC_ENABLE_FORK_SUPPORT")
    cluster = None
    try:
        os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "0"     # inherited by the head's and the node's processes
        try:
            cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 0, "include_dashboard": False, "ray_client_server_port": port,
                "object_store_memory": 100 << 20})
            node = cluster.add_node(num_cpus=2, resources={"mlx_cpu": 2}, object_store_memory=100 << 20)
        finally:
            if saved is None:
                os.environ.pop("GRPC_ENABLE_FORK_SUPPORT", None)
            else:
                os.environ["GRPC_ENABLE_FORK_SUPPORT"] = saved
        wait_for_port(port)
        yield SimpleNamespace(address=f"ray://127.0.0.1:{port}", gcs_port=int(cluster.address.rsplit(":", 1)[1]),
                              node_id=node.node_id, head_id=cluster.head_node.node_id)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


def softmax_candidates():
    """The softmax task (one seed) and three real `ops` candidates of its family."""
    fam = families.get("softmax")
    task = fam.make_task()
    task = task.model_copy(update={"seeds": task.seeds[:1]})
    ops = fam.template("softmax.ops")
    d = ops.defaults()
    return task, [ops.render(k, "ops") for k in (d, dict(d, formulation="lse"), dict(d, upcast=False))]


def test_ray_client_pool_evaluates_real_candidates_on_the_cluster_node(client_cluster):
    task, sources = softmax_candidates()
    assert not ray.is_initialized()
    with RayPool(client_cluster.address, limits=Limits(wall_s=60), repeats=3) as pool:
        assert ray.util.client.ray.is_connected(), "connected through Ray Client, not as a driver"
        assert pool.slots("mlx-cpu") == 2
        info = pool.info("mlx-cpu")
        futs = [pool.submit(task, src, "mlx-cpu", timing=(i == 0)) for i, src in enumerate(sources)]
        results = [f.result(timeout=180) for f in futs]
        with pytest.raises(PoolError, match="sim"):
            pool.submit(task, sources[0], "sim")                 # no node offers it: an error that says so
    assert not ray.is_initialized(), "the pool disconnected the Ray Client it connected"
    assert info.name == "mlx-cpu" and info.timed
    for r in results:
        assert r.status == "passed", r.message
        assert r.backend == "mlx-cpu"
        node = r.sandbox["node"]
        assert node["node_id"] == client_cluster.node_id and node["pool"] == "ray"   # ran on the mlx_cpu node
        assert node["name"] and node["ip"]
    assert results[0].timing is not None and all(r.timing is None for r in results[1:])


def test_cluster_status_through_ray_client(client_cluster, capsys):
    assert cli.main(["--json", "cluster", "status", "--cluster", client_cluster.address]) == 0
    st = json.loads(capsys.readouterr().out)
    assert not ray.is_initialized(), "status disconnected again"
    assert st["address"] == client_cluster.address
    nodes = {n["node_id"]: n for n in st["nodes"] if n["alive"]}
    assert nodes[client_cluster.node_id]["backends"] == {"mlx-cpu": 2}
    assert nodes[client_cluster.head_id]["head"] and not nodes[client_cluster.head_id]["backends"]

    # while a pool connected through Ray Client evaluates, status lists what its worker is running
    toy = toy_family.make_task(rows=64, cols=64)
    with RayPool(client_cluster.address, limits=Limits(wall_s=60), repeats=3, max_workers=1) as pool:
        pool.info("mlx-cpu")
        slow = pool.submit(toy, SLOW, "mlx-cpu")
        wait_until_busy(pool)
        assert cli.main(["--json", "cluster", "status", "--cluster", client_cluster.address]) == 0
        busy = json.loads(capsys.readouterr().out)
        assert cli.main(["cluster", "status", "--cluster", client_cluster.address]) == 0
        table = capsys.readouterr().out
        assert slow.result(timeout=120).status == "passed"
    [worker] = {n["node_id"]: n for n in busy["nodes"]}[client_cluster.node_id]["workers"]
    assert worker["backend"] == "mlx-cpu" and worker["running"]["task"] == "toy-softmax"
    assert "mlx-cpu×2" in table and "toy-softmax" in table


def test_optimize_through_ray_client(client_cluster, tmp_path, capsys):
    db = tmp_path / "ks.db"
    rc = cli.main(["--store", str(db), "--json", "optimize", "softmax", "--cluster", client_cluster.address,
                   "--backend", "mlx-cpu", "--budget", "3", "--seed", "1"])
    out = capsys.readouterr()
    assert rc == 0, out.err + out.out[-2000:]
    assert not ray.is_initialized()
    store = Store(db)
    [run] = store.runs()
    cands = store.candidates(run["id"])
    assert len(cands) == 3 and any(c["status"] == "passed" for c in cands)
    for c in cands:
        assert c["result"]["sandbox"]["node"]["node_id"] == client_cluster.node_id


def test_an_address_without_a_cluster_fails_fast_and_says_what_to_do(client_cluster, capsys):
    closed = free_port()
    bad = f"ray://127.0.0.1:{closed}"
    t0 = time.monotonic()
    with pytest.raises(PoolError) as e:
        RayPool(bad)
    assert time.monotonic() - t0 < CLIENT_TRY_S + 5
    msg = str(e.value)
    assert bad in msg and "refused" in msg and "ray start --head" in msg and "Traceback" not in msg
    assert not ray.is_initialized()

    assert cli.main(["cluster", "status", "--cluster", bad]) == 2
    err = capsys.readouterr().err
    assert bad in err and "Traceback" not in err

    # a port that answers, but is no Ray Client server (the head's GCS port): Ray Client's retries, bounded
    wrong = f"ray://127.0.0.1:{client_cluster.gcs_port}"
    t0 = time.monotonic()
    with pytest.raises(PoolError) as e:
        RayPool(wrong)
    took = time.monotonic() - t0
    assert took < 3 * CLIENT_TRY_S + 8, f"Ray Client took {took:.0f} s to give up"
    msg = str(e.value)
    assert wrong in msg and "Ray Client port" in msg and "RAY_AUTH_MODE=token" in msg and "Traceback" not in msg
    assert not ray.is_initialized()

    # and the cluster is still usable through the right address after both failures
    assert cli.main(["--json", "cluster", "status", "--cluster", client_cluster.address]) == 0
    assert client_cluster.node_id in capsys.readouterr().out
