"""`ksearch cluster status`: the nodes of a Ray cluster, the backends and devices each offers (its custom
resources), and what ksearch's device workers on it are evaluating right now."""
from __future__ import annotations

from .ray_pool import BACKEND_OF, NAMESPACE, connect


def cluster_status(address: str | None, timeout_s: float = 5.0) -> dict:
    """{"address", "nodes": [{node_id, name, ip, alive, head, cpus, gpus, backends: {backend: units},
    devices: {name: units}, workers: [{backend, running, done, pid}]}]}"""
    ray, owned = connect(address or "auto")
    try:
        nodes = []
        for n in ray.nodes():
            res = n.get("Resources") or {}
            nodes.append({
                "node_id": n["NodeID"], "name": n.get("NodeName") or n.get("NodeManagerHostname") or "",
                "ip": n.get("NodeManagerAddress", ""), "alive": bool(n.get("Alive")),
                "head": "node:__internal_head__" in res, "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0),
                "backends": {BACKEND_OF[k]: v for k, v in res.items() if k in BACKEND_OF},
                "devices": {k[len("device_"):]: v for k, v in res.items() if k.startswith("device_")},
                "workers": []})
        by_id = {n["node_id"]: n for n in nodes}
        for a in ray.util.list_named_actors(all_namespaces=True):
            if not isinstance(a, dict) or a.get("namespace") != NAMESPACE:
                continue
            try:
                st = ray.get(ray.get_actor(a["name"], namespace=NAMESPACE).status.remote(), timeout=timeout_s)
            except Exception:  # noqa: BLE001 - an actor still starting, or on a node that just died
                continue
            node = by_id.get(st["node"]["node_id"])
            if node is not None:
                node["workers"].append({"name": a["name"], "backend": st["backend"], "running": st["running"],
                                        "done": st["done"], "pid": st["pid"]})
        return {"address": address or "auto", "nodes": nodes}
    finally:
        if owned:
            ray.shutdown()
