"""Evaluate candidates on a Ray cluster: one long-lived actor per device, placed by custom resources.

A node says what it can run with custom resources named after the backends (`mlx_metal`, `mlx_cuda`,
`mlx_cpu`, `sim`), one unit per device: `ray start ... --resources '{"mlx_metal": 1}'` on a Mac, `'{"mlx_cuda":
8}'` (and `--num-gpus 8`) on an 8-GPU box. The pool starts one `DeviceWorker` actor per unit of the backend a
search needs; each asks for one unit (and one GPU for mlx-cuda), so a Metal candidate only ever runs where a
node declared `mlx_metal`. An optional device resource (`device_<name>`, e.g. `device_h200`) narrows the
choice to one kind of device. Each actor keeps a warm Evaluator (its sandboxed worker and compile cache) across
candidates, and sandboxes every candidate exactly as on one machine.

A node that dies mid-candidate loses only that attempt: the pool sends the candidate to another actor of the
same backend (up to `max_node_failures` times), and starts a replacement actor that Ray places wherever a unit
of the resource is free (or when a node offering it joins). Results come back as EvalResult JSON with the
node's name, IP and Ray node id in `sandbox["node"]`.

Ray's own processes listen on the network: run a cluster only on a trusted network (see docs/cluster.md).
"""
from __future__ import annotations

import collections
import os
import socket
import threading
import time
import uuid
import warnings
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..backend import BACKENDS, BackendInfo
from ..evaluate import EvalResult, Limits
from ..task import KernelTask
from .base import EvalPool, PoolError

NAMESPACE = "ksearch"
RESOURCE = {b: b.replace("-", "_") for b in BACKENDS}      # mlx-metal -> mlx_metal, ..., sim -> sim
BACKEND_OF = {r: b for b, r in RESOURCE.items()}
PREFERENCE = ("mlx-metal", "mlx-cuda", "mlx-cpu")           # backend=None: the best a cluster offers


# Ray Client (`ray://`) tries an address 3 times before it gives up, waiting 5, 10 and then 15 s (Ray 2.60.0: 30 s
# for an address where nothing answers as a Ray Client server: a closed port, the GCS port, a cluster that wants
# a token this machine does not send). ray.init() has no option for it; Ray Client reads these two settings once,
# when it is first loaded: 3 tries of at most CLIENT_TRY_S seconds each. A user's own values win.
CLIENT_TRY_S = 5
CLIENT_PORT = 10001          # Ray Client's default port on the head (`ray start --head --ray-client-server-port`)


def import_ray():
    """Ray, or a PoolError saying how to install it."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")    # no usage reports leave the machine
    os.environ.setdefault("RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S", str(CLIENT_TRY_S))
    os.environ.setdefault("RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S", str(CLIENT_TRY_S))
    try:
        import ray
    except ImportError:
        raise PoolError("Ray is not installed: pip install 'ray[client]==2.60.0' (or the 'cluster' extra of ksearch) "
                        "on this machine and on every node of the cluster") from None
    return ray


def connect(address: str | None, *, local_workers: int | None = None):
    """Connect this process to a cluster (`ray://HOST:PORT` through Ray Client, `HOST:PORT` as a driver inside
    the cluster network, `auto`: the one started on this machine), or with address 'local' start a one-node Ray
    here offering `local_workers` units of mlx_cpu, sim and this machine's best backend.
    Returns (ray, whether this call made the connection)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    if address in (None, "", "local"):
        from .. import backend as backends

        n = local_workers or 1
        here = {"mlx-cpu", "sim", backends.detect().name}
        # address="local": always a new Ray of our own, never a cluster someone else started on this machine
        ray.init(address="local", num_cpus=n, resources={RESOURCE[b]: n for b in here}, include_dashboard=False,
                 namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
        return ray, True
    if address.startswith("ray://"):
        _connect_client(ray, address)
        return ray, True
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, grpc errors...
        raise PoolError(f"cannot connect to the Ray cluster at {address}: {e}. Is the head running "
                        f"(`ray start --head`, see docs/cluster.md) and is the address right?") from None
    return ray, True


def _connect_client(ray, address: str) -> None:
    """Connect through Ray Client, or raise a PoolError that names the address and says what to check.

    A TCP connection first, so that a closed port or an unreachable host is said within CLIENT_TRY_S rather than
    after Ray Client's own retries; then Ray Client, bounded as import_ray() sets it."""
    try:
        import grpc  # noqa: F401 - Ray Client needs it
    except ImportError:
        raise PoolError(f"{address}: connecting through Ray Client needs 'ray[client]==2.60.0' here (grpcio is "
                        f"missing); or run ksearch on a machine inside the cluster network and pass the head's "
                        f"GCS address HOST:PORT instead") from None
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port or CLIENT_PORT
    except ValueError as e:
        raise PoolError(f"{address}: not a Ray Client address ({e}); write it ray://HOST:PORT") from None
    if not host:
        raise PoolError(f"{address}: not a Ray Client address (no host); write it ray://HOST:PORT")
    head = f"`ray start --head --ray-client-server-port {port}`" if port != CLIENT_PORT else "`ray start --head`"
    deadline = time.monotonic() + CLIENT_TRY_S
    while True:    # a refused connection is tried again for a while: a head just started opens its port late
        try:
            socket.create_connection((host, port), timeout=max(0.5, deadline - time.monotonic())).close()
            break
        except OSError as e:
            if isinstance(e, ConnectionRefusedError) and time.monotonic() < deadline:
                time.sleep(0.25)
                continue
            why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e) or type(e).__name__).lower()
        raise PoolError(f"cannot reach the Ray cluster at {address}: connecting to {host}:{port} {why}. Is the "
                        f"head running with its Ray Client server ({head}, port {CLIENT_PORT} by default; see "
                        f"docs/cluster.md), is the address right, and can this machine reach that port?") from None
    for attempt in (1, 2):
        try:
            with warnings.catch_warnings():    # its "connection timed out" warning: the PoolError below says more
                warnings.filterwarnings("ignore", message="Ray Client connection timed out")
                ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
            return
        except Exception as e:  # noqa: BLE001 - ConnectionError, ConnectionAbortedError (its server side), RuntimeError
            last = _last_line(str(e)) or type(e).__name__
            if isinstance(e, ConnectionError) and last == "ray client connection timeout":
                tries = os.environ.get("RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S", CLIENT_TRY_S)
                raise PoolError(
                    f"cannot connect to the Ray cluster at {address}: {host}:{port} accepts connections but no Ray "
                    f"Client server let this machine in (3 tries, up to {tries} s each). Is {port} the head's Ray "
                    f"Client port ({head}, {CLIENT_PORT} by default) rather than its GCS port (6379)? If the cluster "
                    f"uses token authentication, set RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN, "
                    f"RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) here too (docs/cluster.md).") from None
            if "Starting Ray client server failed" not in str(e):
                raise PoolError(f"cannot connect to the Ray cluster at {address} through Ray Client: {last}. The head "
                                f"needs 'ray[client]==2.60.0' and ksearch installed, and the same Python minor version "
                                f"as this machine; see its ray_client_server*.err logs (/tmp/ray/session_latest/logs "
                                f"on the head)") from None
            # The head's Ray Client server forks a server for each client; with gRPC's fork support on (as it is by
            # default) that child can segfault before it starts (Ray 2.60.0, grpcio 1.85.1: one connection in five
            # to ten here). Once more, then say how to avoid it.
            try:
                ray.shutdown()
            except Exception:  # noqa: BLE001
                pass
            if attempt == 2:
                raise PoolError(f"cannot connect to the Ray cluster at {address}: the head's Ray Client server failed "
                                f"twice to start a session for this client ({last}). Its per-client server crashes at "
                                f"start when gRPC fork support is on: restart the head with GRPC_ENABLE_FORK_SUPPORT=0 "
                                f"in its environment (`GRPC_ENABLE_FORK_SUPPORT=0 ray start --head ...`)") from None


def _last_line(text: str) -> str:
    """The last non-empty line of an error message (Ray Client sends the server's traceback in it)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def node_identity() -> dict:
    """The node this process runs on, as results record it."""
    ray = import_ray()
    ctx = ray.get_runtime_context()
    try:
        ip = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001
        ip = ""
    return {"name": socket.gethostname(), "ip": ip, "node_id": ctx.get_node_id(), "pool": "ray"}


class DeviceWorker:
    """A Ray actor holding one device of one backend on its node, with a warm Evaluator per task."""

    def __init__(self, backend: str, limits: dict | None, repeats: int):
        from .local import LocalPool

        from ..evaluate.sandbox import mlx_has_cuda

        if backend != "mlx-cuda" and os.environ.get("CUDA_VISIBLE_DEVICES") == "" and mlx_has_cuda():
            # Ray hides every GPU from an actor that asked for none, and MLX's CUDA build cannot even be
            # imported then ("no CUDA-capable device"): a CPU evaluation on a GPU node needs it visible
            os.environ.pop("CUDA_VISIBLE_DEVICES")
        self.backend = backend
        self.pool = LocalPool(limits=Limits.model_validate(limits) if limits else None, repeats=repeats)
        self.node = node_identity()
        self.running: dict | None = None
        self.done = 0
        self.since = time.time()

    def describe(self) -> dict:
        """The backend and device here; raises if the node advertised a backend it does not have."""
        info = self.pool.info(self.backend)
        return {"node": self.node, "info": info.model_dump(), "pid": os.getpid()}

    def evaluate(self, task: dict, source: str, timing: bool, label: str = "", bar: list | None = None) -> dict:
        kt = KernelTask.model_validate(task)
        self.running = {"task": kt.name, "label": label, "since": time.time()}
        try:
            res = self.pool.submit(kt, source, self.backend, timing=timing, bar=tuple(bar) if bar else None).result()
        finally:
            self.running = None
            self.done += 1
        res.sandbox = {**res.sandbox, "node": self.node}
        return res.model_dump(mode="json")

    def status(self) -> dict:
        return {"backend": self.backend, "node": self.node, "running": self.running, "done": self.done,
                "up_s": round(time.time() - self.since, 1), "pid": os.getpid()}

    def shutdown(self) -> None:
        self.pool.close()


@dataclass
class _Job:
    task: dict
    task_name: str
    source: str
    backend: str
    timing: bool
    future: Future
    bar: tuple[float, float] | None = None
    failures: list = field(default_factory=list)     # "node: what happened", one per node lost under it


@dataclass
class _Slot:
    backend: str
    actor: object
    name: str
    ready_ref: object | None = None    # describe() while the actor starts
    info: dict | None = None           # what describe() answered
    state: str = "starting"            # starting | ready | dead | broken
    job: _Job | None = None
    ref: object | None = None          # the evaluate() call in flight
    started: float = 0.0
    error: str = ""


class RayPool(EvalPool):
    """Candidates go to DeviceWorker actors on the cluster's nodes; see the module docstring."""

    def __init__(self, address: str | None = None, *, limits: Limits | None = None, repeats: int = 20,
                 max_workers: int | None = None, device: str | None = None, local_workers: int | None = None,
                 max_node_failures: int = 3, place_timeout_s: float = 300.0,
                 call_timeout_s: float | None = None):
        self.ray, self._owns_ray = connect(address, local_workers=local_workers)
        self.address = address or "local"
        self.limits, self.repeats = limits, repeats
        self.max_workers, self.device = max_workers, device
        self.max_node_failures, self.place_timeout_s = max_node_failures, place_timeout_s
        wall = (limits or Limits()).wall_s
        self.call_timeout_s = call_timeout_s or max(600.0, 6 * wall)   # an actor silent this long is written off
        self.warnings: list[str] = []
        self._slots: dict[str, list[_Slot]] = {}
        self._queue: dict[str, collections.deque[_Job]] = {}
        self._starved: dict[str, float] = {}           # backend -> since when jobs wait with no ready actor
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="ksearch-raypool", daemon=True)
        self._thread.start()

    # -- the pool interface --------------------------------------------------------------------------
    def info(self, backend: str | None) -> BackendInfo:
        backend = backend or self._best_backend()
        self._ensure(backend)
        deadline = time.monotonic() + self.place_timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                slots = self._slots[backend]
                ready = [s for s in slots if s.state == "ready"]
                if ready:
                    return BackendInfo.model_validate(ready[0].info["info"])
                if slots and all(s.state == "broken" for s in slots):
                    raise PoolError(f"no node could run {backend}: {slots[0].error}")
            time.sleep(0.05)
        raise PoolError(f"no {backend} worker started on the cluster at {self.address} within "
                        f"{self.place_timeout_s:.0f} s: are the nodes offering {RESOURCE[backend]} alive (`ksearch cluster status`)?")

    def submit(self, task: KernelTask, source: str, backend: str, *, timing: bool = True,
               bar: tuple[float, float] | None = None) -> "Future[EvalResult]":
        self._ensure(backend)
        fut: Future = Future()
        fut.set_running_or_notify_cancel()
        job = _Job(task=task.model_dump(mode="json"), task_name=task.name, source=source, backend=backend,
                   timing=timing, future=fut, bar=bar)
        with self._lock:
            if self._closed:
                raise PoolError("the Ray pool is closed")
            self._queue[backend].append(job)
        self._wake.set()
        return fut

    def slots(self, backend: str) -> int:
        self._ensure(backend)
        with self._lock:
            return sum(s.state in ("starting", "ready") for s in self._slots[backend])

    def capacity(self, backend: str) -> int:
        self._ensure(backend)
        with self._lock:
            idle = sum(s.state == "ready" and s.job is None for s in self._slots[backend])
            return max(0, idle - len(self._queue[backend]))

    def workers(self) -> list[dict]:
        """Each actor: backend, state, node, and the candidate it is on (for tests and status)."""
        with self._lock:
            return [{"backend": s.backend, "name": s.name, "state": s.state, "node": (s.info or {}).get("node"),
                     "busy": s.job is not None, "error": s.error} for ss in self._slots.values() for s in ss]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            slots = [s for ss in self._slots.values() for s in ss]
            jobs = [j for q in self._queue.values() for j in q] + [s.job for s in slots if s.job]
            for q in self._queue.values():
                q.clear()
        self._wake.set()
        self._thread.join(timeout=5)
        for j in jobs:
            if not j.future.done():
                j.future.set_exception(PoolError("the Ray pool was closed before this candidate was evaluated"))
        try:      # each worker closes its evaluators (their sandboxed children), then the actors go
            refs = [s.actor.shutdown.remote() for s in slots if s.state == "ready"]
            if refs:
                self.ray.wait(refs, num_returns=len(refs), timeout=10)
        except Exception:  # noqa: BLE001 - the cluster may be gone already
            pass
        for s in slots:
            try:
                self.ray.kill(s.actor)
            except Exception:  # noqa: BLE001
                pass
        if self._owns_ray:
            self.ray.shutdown()

    # -- actors --------------------------------------------------------------------------------------
    def _best_backend(self) -> str:
        have = self.ray.cluster_resources()
        for b in PREFERENCE:
            if have.get(RESOURCE[b], 0) >= 1:
                return b
        raise PoolError(f"no node of the cluster at {self.address} offers a timing backend: start nodes with "
                        f"--resources '{{\"mlx_metal\": 1}}' (a Mac), '{{\"mlx_cuda\": N}}' (NVIDIA) or "
                        f"'{{\"mlx_cpu\": N}}' (see docs/cluster.md), or pass --backend sim")

    def _ensure(self, backend: str) -> None:
        """Start this backend's actors on first use: one per unit of its resource in the cluster."""
        if backend not in RESOURCE:
            raise PoolError(f"unknown backend '{backend}': choose one of {', '.join(BACKENDS)}")
        with self._lock:
            if backend in self._slots:
                return
            have = self.ray.cluster_resources()
            units = int(have.get(RESOURCE[backend], 0))
            if self.device:
                units = min(units, int(have.get(self._device_resource(), 0)))
            if self.max_workers:
                units = min(units, self.max_workers)
            if units < 1:
                dev = f" and {self._device_resource()}" if self.device else ""
                raise PoolError(f"no node of the cluster at {self.address} offers {RESOURCE[backend]}{dev}: join one "
                                f"with `ray start --address HEAD:PORT --resources '{{\"{RESOURCE[backend]}\": 1}}'` "
                                f"(see docs/cluster.md)")
            self._slots[backend] = [self._start_actor(backend) for _ in range(units)]
            self._queue[backend] = collections.deque()

    def _device_resource(self) -> str:
        return "device_" + "".join(c if c.isalnum() else "_" for c in (self.device or "").lower())

    def _start_actor(self, backend: str) -> _Slot:
        resources = {RESOURCE[backend]: 1}
        if self.device:
            resources[self._device_resource()] = 1
        opts = {"name": f"{backend}-{uuid.uuid4().hex[:8]}", "namespace": NAMESPACE, "resources": resources,
                "num_cpus": 0, "max_restarts": 0, "max_task_retries": 0, "max_concurrency": 2}
        if backend == "mlx-cuda" and self.ray.cluster_resources().get("GPU", 0) >= 1:
            opts["num_gpus"] = 1       # so Ray sets CUDA_VISIBLE_DEVICES: one GPU per actor
        actor = self.ray.remote(DeviceWorker).options(**opts).remote(
            backend, self.limits.model_dump(mode="json") if self.limits else None, self.repeats)
        slot = _Slot(backend=backend, actor=actor, name=opts["name"])
        slot.ready_ref = actor.describe.remote()
        return slot

    # -- the dispatcher thread -----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                self._dispatch()
                waiting = {s.ref: (s, "result") for ss in self._slots.values() for s in ss if s.ref is not None}
                waiting.update({s.ready_ref: (s, "ready") for ss in self._slots.values() for s in ss
                                if s.ready_ref is not None})
            if not waiting:
                self._wake.wait(0.2)
                self._wake.clear()
                continue
            try:
                done, _ = self.ray.wait(list(waiting), num_returns=1, timeout=0.2)
            except Exception as e:  # noqa: BLE001 - the cluster connection itself failed
                self._fail_all(PoolError(f"lost the Ray cluster at {self.address}: {e}"))
                return
            with self._lock:
                for ref in done:
                    slot, kind = waiting[ref]
                    if kind == "ready" and slot.ready_ref is not None:
                        self._on_ready(slot)
                    elif kind == "result" and slot.ref is not None:
                        self._on_result(slot)
                self._check_timeouts()

    def _dispatch(self) -> None:
        for backend, q in self._queue.items():
            for slot in self._slots[backend]:
                if not q:
                    break
                if slot.state == "ready" and slot.job is None:
                    job = q.popleft()
                    slot.job, slot.started = job, time.monotonic()
                    slot.ref = slot.actor.evaluate.remote(job.task, job.source, job.timing, job.task_name,
                                                          list(job.bar) if job.bar else None)
            self._check_starved(backend, q)

    def _check_starved(self, backend: str, q) -> None:
        if not q or any(s.state == "ready" for s in self._slots[backend]):
            self._starved.pop(backend, None)
            return
        since = self._starved.setdefault(backend, time.monotonic())
        if time.monotonic() - since > self.place_timeout_s:
            why = "; ".join({s.error for s in self._slots[backend] if s.error}) or "no node offering it is alive"
            err = PoolError(f"no {backend} worker on the cluster at {self.address} for {self.place_timeout_s:.0f} s "
                            f"({why}): join a node with --resources '{{\"{RESOURCE[backend]}\": 1}}'")
            while q:
                q.popleft().future.set_exception(err)

    def _on_ready(self, slot: _Slot) -> None:
        ref, slot.ready_ref = slot.ready_ref, None
        try:
            slot.info = self.ray.get(ref)
            slot.state = "ready"
        except self._actor_errors() as e:
            slot.state, slot.error = "dead", f"its node died while it started ({type(e).__name__})"
            self._replace(slot)
        except Exception as e:  # noqa: BLE001 - the node does not have the backend it advertised
            slot.state, slot.error = "broken", _cause(e)
            self.warnings.append(f"a {slot.backend} worker could not start: {slot.error}")

    def _on_result(self, slot: _Slot) -> None:
        ref, job = slot.ref, slot.job
        slot.ref, slot.job = None, None
        try:
            data = self.ray.get(ref)
        except self._actor_errors() as e:
            node = (slot.info or {}).get("node", {})
            where = f"{node.get('name', '?')} ({node.get('ip', '?')}, node {str(node.get('node_id', '?'))[:8]})"
            job.failures.append(f"{where}: {type(e).__name__}")
            slot.state, slot.error = "dead", f"lost with its node {where}"
            self.warnings.append(f"node {where} died while evaluating a {job.task_name} candidate; retrying it elsewhere")
            self._replace(slot)
            self._retry(job)
            return
        except Exception as e:  # noqa: BLE001 - the evaluator itself failed (not the candidate)
            job.future.set_exception(PoolError(f"evaluating a {job.task_name} candidate on {slot.backend} failed: {_cause(e)}"))
            return
        res = EvalResult.model_validate(data)
        if job.failures:
            res.sandbox = {**res.sandbox, "node_failures": list(job.failures)}
        job.future.set_result(res)

    def _retry(self, job: _Job) -> None:
        if len(job.failures) >= self.max_node_failures:
            job.future.set_result(EvalResult(
                status="crashed", backend=job.backend, sandbox={"node_failures": list(job.failures)},
                message=f"{len(job.failures)} nodes died while evaluating this candidate ({'; '.join(job.failures)}); "
                        f"not retried again"))
            return
        self._queue[job.backend].appendleft(job)

    def _replace(self, slot: _Slot) -> None:
        """A dead actor's place: a fresh actor that Ray puts wherever a unit of the resource is (or becomes) free."""
        try:
            self.ray.kill(slot.actor)
        except Exception:  # noqa: BLE001
            pass
        slots = self._slots[slot.backend]
        if slot in slots and not self._closed:
            slots[slots.index(slot)] = self._start_actor(slot.backend)

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        for ss in self._slots.values():
            for slot in ss:
                if slot.ref is not None and now - slot.started > self.call_timeout_s:
                    job = slot.job
                    slot.ref, slot.job = None, None
                    job.failures.append(f"{slot.name}: no answer in {self.call_timeout_s:.0f} s")
                    slot.state, slot.error = "dead", "did not answer"
                    self._replace(slot)
                    self._retry(job)

    def _fail_all(self, err: Exception) -> None:
        with self._lock:
            self._closed = True
            jobs = [j for q in self._queue.values() for j in q]
            jobs += [s.job for ss in self._slots.values() for s in ss if s.job]
        for j in jobs:
            if not j.future.done():
                j.future.set_exception(err)

    def _actor_errors(self) -> tuple:
        ex = self.ray.exceptions
        return tuple(getattr(ex, n) for n in ("RayActorError", "ActorDiedError", "ActorUnavailableError",
                                              "WorkerCrashedError", "NodeDiedError", "ObjectLostError",
                                              "OwnerDiedError") if hasattr(ex, n))


def _cause(e: Exception) -> str:
    """The message of the exception a remote call raised, without Ray's wrapping and traceback."""
    cause = getattr(e, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    return str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
