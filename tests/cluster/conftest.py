"""A real Ray cluster on this machine for the cluster tests: a head and worker nodes (separate raylets) whose
custom resources stand for different backends. Skips (with the reason) where Ray is not installed."""
from __future__ import annotations

import os
import secrets
import signal
import time
import warnings
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
# Set before Ray is imported (it reads them once): no usage reports; every node and driver of the test cluster
# shares a fresh token, so nothing without it can talk to the cluster (Ray >= 2.52 token authentication);
# worker nodes import ksearch_engine from this checkout.
os.environ.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_SCHEDULER_EVENTS": "0", "RAY_AUTH_MODE": "token",
                   "RAY_AUTH_TOKEN": secrets.token_hex(16),
                   "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))})

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'ray==2.60.0'): cluster tests skipped")
from ray.cluster_utils import Cluster  # noqa: E402

# Fast failure detection, so that a killed node is noticed in seconds rather than the default half minute.
SYSTEM_CONFIG = {"health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 3,
                 "health_check_initial_delay_ms": 0}


class LocalCluster:
    """A head node offering nothing, plus worker nodes added with the resources a test asks for."""

    def __init__(self):
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "_system_config": SYSTEM_CONFIG,
            "object_store_memory": 100 << 20})
        self.workers = {}

    @property
    def address(self) -> str:
        """The GCS address, for a driver inside the cluster network."""
        return self.cluster.address

    def add(self, name: str, resources: dict):
        node = self.cluster.add_node(num_cpus=1, resources=resources, object_store_memory=100 << 20)
        self.workers[name] = node
        return node

    def node_id(self, name: str) -> str:
        return self.workers[name].node_id

    def kill(self, node_id: str) -> str:
        """Kill the worker node with this Ray node id at once (no graceful shutdown); returns its name."""
        for name, node in list(self.workers.items()):
            if node.node_id == node_id:
                self.cluster.remove_node(node, allow_graceful=False)
                del self.workers[name]
                return name
        raise KeyError(node_id)

    def shutdown(self):
        self.cluster.shutdown()


def _descendants(pid: int) -> set[int]:
    """Every process below pid, read from /proc (empty where /proc is absent)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


STARTUP_TRIES = 3


def _start_cluster() -> LocalCluster:
    """Ray gives a node's raylet a fixed 30 s to register and raises "timed out during startup" past it, which a
    loaded 2-core machine can exceed: a failed start is shut down, the processes it left are killed, and the
    cluster is started again (up to STARTUP_TRIES times), with a warning naming the failure."""
    for attempt in range(1, STARTUP_TRIES + 1):
        before = _descendants(os.getpid())
        c = None
        try:
            c = LocalCluster()
            c.add("cpu-a", {"mlx_cpu": 1})
            c.add("sim-b", {"sim": 1})
            return c
        except Exception as e:  # Ray raises a bare Exception for the startup timeout
            if attempt == STARTUP_TRIES:
                raise
            warnings.warn(f"Ray test cluster start {attempt} of {STARTUP_TRIES} failed ({e}); starting again")
            if c is not None:
                try:
                    c.shutdown()
                except Exception:
                    pass
            for pid in _descendants(os.getpid()) - before:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(1.0)
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def ray_cluster():
    t0 = time.monotonic()
    c = _start_cluster()
    c.started_s = time.monotonic() - t0
    try:
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
