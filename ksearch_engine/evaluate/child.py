"""The sandboxed worker: one process per role, answering JSON-line requests from the evaluator.

Roles: `trusted` (loads only the task's reference and baseline) and `candidate` (loads one candidate; a fresh
process per candidate). Requests: `task`, `load`, `prepare` (fresh inputs for a slot from a seed the
evaluator sends), `call` (one call, mx.eval + synchronize on every stream), `fetch` (a slot's outputs as raw
bytes after the reply line), `drop`, `audit`, `ping`. Replies go to the original stdout (the child points
fd 1 at stderr first, so whatever a candidate prints cannot corrupt the protocol) and echo the nonce.
Nothing is read from or written to files: the evaluator times every request from outside and checks every
output itself, so nothing this process reports about time or correctness is taken on trust.

Before anything else the worker confines itself where sandbox.py asked it to (`_confine`) and, once MLX
is loaded, drops root (`_drop_privileges`). In-process guards (audit hook streaming events the moment they
happen, tamper snapshot, thread count) name a cheat early; the evaluator's checks do not depend on them.
"""
from __future__ import annotations

import errno
import json
import math
import os
import sys
import traceback
import types

_PROTO = os.dup(1)   # the reply channel; fd 1 now points at stderr
os.dup2(2, 1)
sys.stdout = sys.stderr
_GUARDS_OFF = frozenset(filter(None, os.environ.pop("KSEARCH_GUARDS_OFF", "").split(",")))
_GPU_STANDIN = os.environ.pop("KSEARCH_GPU_STANDIN", "")   # tests only: a CUPTI stand-in's source (no GPU here)

import time  # noqa: E402

_perf = time.perf_counter  # captured before any candidate runs: patching time.* cannot fool the timer

_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000


def _under(p: str, root: str) -> bool:
    return p == root or p.startswith(root.rstrip("/") + "/")


def _confine() -> dict:
    """Hide the user's home and temp folders behind empty tmpfs mounts, bind back what the run needs.

    We are root in our own mount namespace here (sandbox.py started us under `unshare`); nothing we mount
    propagates out. Privileges are dropped later, once MLX is loaded (`_drop_privileges`).
    """
    spec = os.environ.pop("KSEARCH_CONFINE", "")
    if not spec:
        return {}
    spec = json.loads(spec)
    if spec.get("prepared"):  # bubblewrap (sandbox.py) built this view and set the uid already: report only
        return {"hide": spec["hide"], "keep": spec["keep"], "uid": None, "prepared": spec["prepared"]}
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def mount(src, dst: str, fstype, flags: int, data) -> None:
        if libc.mount(src, dst.encode(), fstype, flags, data) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"ksearch sandbox: cannot mount over {dst}: {os.strerror(err)}")

    mount(b"none", "/", None, _MS_REC | _MS_PRIVATE, None)
    hide = [p for p in spec["hide"] if os.path.lexists(p) and p != "/"]
    covers = hide + spec["tmp"]
    keep = [k for k in spec["keep"] if any(_under(k, c) and k != c for c in covers)
            and not any(_under(c, k) for c in covers)]  # never bind a whole hidden folder back
    keep = [k for k in keep if not any(k != o and _under(k, o) for o in keep)]
    fds = {k: os.open(k, os.O_PATH) for k in keep}
    for p in hide:
        if os.path.isdir(p) and not os.path.islink(p):
            mount(b"tmpfs", p, b"tmpfs", 0, b"size=1m,mode=755")
        else:
            mount(b"/dev/null", p, None, _MS_BIND, None)
    for p in spec["tmp"]:
        mount(b"tmpfs", p, b"tmpfs", 0, f"size={int(spec['tmp_mb'])}m,mode=1777".encode())
    for k, fd in fds.items():
        src = f"/proc/self/fd/{fd}"
        if os.path.isdir(src):
            os.makedirs(k, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(k), exist_ok=True)
            open(k, "a").close()
        mount(src.encode(), k, None, _MS_BIND | _MS_REC, None)
        os.close(fd)
    locked = False
    if spec.get("userns") and "mountlock" not in _GUARDS_OFF:
        _lock_mounts(libc)
        locked = True
    return {"hide": hide, "keep": keep, "uid": spec.get("uid"), "locked": locked}


def _lock_mounts(libc) -> None:
    """Without root we cannot drop to another uid, and root-in-our-user-namespace could unmount the covers.
    Entering a nested user + mount namespace locks every mount we made (the kernel refuses to unmount or
    move a mount inherited from a more privileged namespace); we stay 'root' only inside it."""
    import ctypes

    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
        err = ctypes.get_errno()
        raise OSError(err, f"ksearch sandbox: cannot lock the hiding mounts: {os.strerror(err)}")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


_CONFINED = _confine()   # before numpy starts threads: a new user namespace needs a single-threaded process

import numpy as np  # noqa: E402


def _drop_privileges(needs: list[str]) -> str:
    """Become the sandbox's own uid (no capabilities: the mounts above cannot be undone, nothing of the
    user's can be written), after checking with effective ids only that this uid still reaches `needs`."""
    uid = _CONFINED.get("uid")
    if _CONFINED.get("prepared"):
        return _CONFINED["prepared"]
    if _CONFINED.get("locked"):
        return "the user's own uid, root only inside a nested user namespace (hiding mounts locked)"
    if uid is None:
        return "unchanged" if os.geteuid() else "root (not dropped: no namespaces or drop_privileges off)"
    os.setgroups([])
    os.setegid(uid)
    os.seteuid(uid)
    blocked = [p for p in needs if not os.access(p, os.R_OK | os.X_OK, effective_ids=True)]
    gpu = [f"/dev/{d}" for d in os.listdir("/dev") if d.startswith(("nvidia", "dri"))] if os.path.isdir("/dev") else []
    blocked += [p for p in gpu if not os.path.isdir(p) and not os.access(p, os.R_OK | os.W_OK, effective_ids=True)]
    blocked += [p for p in (os.path.dirname(os.getcwd()),) if not os.access(p, os.X_OK, effective_ids=True)]
    blocked += [p for p in (os.getcwd(),) if not os.access(p, os.W_OK | os.X_OK, effective_ids=True)]
    os.seteuid(0)
    os.setegid(0)
    if blocked:
        return f"root (not dropped: uid {uid} cannot reach {blocked[0]})"
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    return f"uid {uid}"


# -- the in-process guard ------------------------------------------------------------------------------
# Every attempt it sees is written at once to the reply channel as an event line, so a candidate cannot take
# it back; the evaluator (another process) decides. Its state lives in this closure only (no module global a
# candidate could clear), and the audit hook cannot be removed.
_NET = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
        "socket.gethostbyname", "socket.gethostbyaddr", "socket.gethostbyname_ex"}
_PROC = {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "subprocess.Popen", "os.system",
         "os.startfile", "pty.spawn"}
_SIG = {"os.kill", "os.killpg", "signal.pthread_kill"}
_MEM = {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
_FRAMES = {"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys._current_exceptions"}
_FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_locals", "f_globals"}
_VIA = ("inspect.py", "traceback.py")  # stdlib helpers a candidate may walk frames through


def _make_guard():
    state = {"active": False, "busy": False, "events": []}
    hidden = tuple(_CONFINED.get("hide", ()))
    kept = tuple(_CONFINED.get("keep", ()))
    enforce = "audit" not in _GUARDS_OFF

    def from_candidate(depth: int = 2) -> bool:
        f = sys._getframe(depth)
        for _ in range(4):
            if f is None:
                return False
            name = f.f_code.co_filename
            if name.startswith("<candidate_"):
                return True
            if not name.endswith(_VIA):
                return False
            f = f.f_back
        return False

    trusted: set = set()  # code objects allowed to start processes (the simulator's compiler calls)

    def from_trusted() -> bool:
        """Whether the process is started by the CPU simulator's own compile step (identified by its code
        objects, which a candidate cannot forge), not by candidate code."""
        f = sys._getframe(2)
        for _ in range(12):
            if f is None:
                return False
            if f.f_code in trusted:
                return True
            f = f.f_back
        return False

    def flag(kind: str, detail: str, block: bool) -> None:
        state["events"].append((kind, detail))
        line = (json.dumps({"event": kind, "detail": detail[:300]}) + "\n").encode()
        try:
            os.write(_PROTO, line)
        except OSError:
            pass
        if block:
            raise PermissionError(f"ksearch sandbox: {detail}")

    def hook(event: str, args: tuple) -> None:
        if not enforce or state["busy"]:
            return
        if event in _NET:
            return flag("network", f"network access is not allowed ({event} {args[1:2]!r})", True)
        if not state["active"]:
            return
        state["busy"] = True  # our own sys._getframe below raises audit events too
        try:
            if event in _PROC and not from_trusted():
                return flag("process", f"candidates may not start processes ({event})", True)
            if event in _SIG:
                return flag("signal", f"candidates may not send signals ({event} {args!r})", True)
            if event in _MEM:
                return flag("memory", f"candidates may not walk the interpreter's objects ({event})", True)
            if event in _FRAMES and from_candidate():
                return flag("frames", f"candidates may not inspect the evaluator's stack ({event})", True)
            if event == "object.__getattr__" and args[1] in _FRAME_ATTRS and from_candidate():
                return flag("frames", f"candidates may not inspect the evaluator's stack (.{args[1]})", True)
            if event == "object.__setattr__" and from_candidate():
                owner = getattr(args[0], "__module__", "") or ""
                if not str(owner).startswith("candidate_"):
                    return flag("patch", f"patched {getattr(args[0], '__qualname__', type(args[0]).__name__)}.{args[1]}", True)
            if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
                p = os.path.abspath(os.fsdecode(args[0]))
                if any(_under(p, h) for h in hidden) and not any(_under(p, k) for k in kept):
                    return flag("secrets", f"tried to read {p} (hidden from candidates)", True)
                if p.startswith("/proc/") and p.endswith(("/environ", "/mem", "/cmdline")) and not p.startswith("/proc/self/"):
                    return flag("secrets", f"tried to read {p} (another process's environment or memory)", True)
        finally:
            state["busy"] = False

    sys.addaudithook(hook)

    class Guard:
        __slots__ = ()

        @staticmethod
        def activate(on: bool) -> None:
            state["active"] = on

        @staticmethod
        def trust(codes) -> None:
            trusted.update(codes)

        @staticmethod
        def drain() -> list:
            ev = list(state["events"])
            state["events"].clear()
            return ev

    return Guard()


_guard_factory = _make_guard  # called once by main(); the instance is never stored in a module global


def _reply(obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(_PROTO, data):]


def _load_mlx(backend: str):
    """MLX, with mx.new_stream wrapped so the timer knows every stream a candidate makes (the list lives in
    the wrapper's closure and on the Worker, not in a module global)."""
    import mlx.core as mx

    made = mx.new_stream
    streams: list = []

    def new_stream(*a, **k):
        s = made(*a, **k)
        streams.append(s)
        return s

    new_stream.__doc__ = made.__doc__
    mx.new_stream = new_stream

    if backend == "sim":
        from ksearch_engine.sim import install_mlx_shim
        install_mlx_shim()
    return mx, streams


def _gpu_timer(backend: str):
    """GPU time per call (ksearch_engine.gputime) on MLX's CUDA backend, subscribed to CUPTI now, before any
    candidate loads and before privileges drop; None elsewhere (mlx-cpu, sim, metal: wall time as before).
    Where CUPTI is missing on mlx-cuda the timer is there and falls back to wall time, which it names."""
    if backend != "mlx-cuda" and not _GPU_STANDIN:
        return None
    from ksearch_engine.gputime import GpuTimer

    module = None
    if _GPU_STANDIN:
        module = types.ModuleType("cupti_standin")
        exec(compile(_GPU_STANDIN, "<cupti-standin>", "exec"), module.__dict__)
    timer = GpuTimer(cupti_module=module)
    timer.subscribe()
    return timer


def _make_tamper_check(mx, gpu=None):
    """Snapshot every function of the modules a cheat would patch (MLX, numpy, time, os, builtins, this
    worker); the returned check names what changed. The snapshot lives in this closure only."""
    import builtins

    mods = {"mx": mx, "mx.fast": mx.fast, "mx.random": mx.random, "mx.linalg": mx.linalg, "np": np,
            "np.linalg": np.linalg, "time": time, "os": os, "builtins": builtins, "json": json,
            "worker": sys.modules[__name__]}
    snap = {(m, k): v for m, mod in mods.items() for k, v in list(vars(mod).items())
            if callable(v) or isinstance(v, types.ModuleType) or m == "worker"}
    classes = {"Worker": Worker}
    if gpu is not None:   # the GPU timer: its module, its classes, its CUPTI module and subscription
        gt = sys.modules["ksearch_engine.gputime"]
        mods["gputime"] = gt
        session = gt._session(gpu._module) if gpu.kind == "cupti" else None
        if session is not None:
            mods["cupti"] = session.c
            classes["session"] = session        # its attributes, the records list (replaced per call) aside
        classes.update({"GpuTimer": gt.GpuTimer, "_CuptiSession": gt._CuptiSession, "timer": gpu,
                        "sessions": gt._SESSION})
        snap.update({(m, k): v for m, mod in (("gputime", gt),) + ((("cupti", mods["cupti"]),) if session else ())
                     for k, v in list(vars(mod).items())})

    def members(name, obj) -> dict:
        d = obj if isinstance(obj, dict) else vars(obj)
        return {k: v for k, v in d.items() if not (name == "session" and k == "records")}

    snap.update({(n, k): v for n, obj in classes.items() for k, v in members(n, obj).items()})
    off = "tamper" in _GUARDS_OFF   # read once: rebinding the worker's globals later changes nothing

    def tampered() -> list[str]:
        if off:
            return []
        now = {m: vars(mod) for m, mod in mods.items()}
        now.update({n: members(n, obj) for n, obj in classes.items()})
        return [f"{m}.{k}".replace("worker.", "evaluator's ").replace("Worker.", "evaluator's Worker.")
                for (m, k), v in snap.items() if now[m].get(k) is not v]

    return tampered


def _to_mx(mx, a: np.ndarray, dtype: str):
    x = mx.array(a)
    if dtype == "bfloat16":
        x = x.astype(mx.bfloat16)
    elif dtype == "float16":
        x = x.astype(mx.float16)
    return x


def _to_np(mx, x) -> np.ndarray:
    if x.dtype == mx.bfloat16:
        x = x.astype(mx.float32)
    return np.array(x, copy=True)


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _load_module(source: str, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = f"<{name}>"
    code = compile(source, f"<{name}>", "exec")
    exec(code, mod.__dict__)
    return mod


def _tb_tail(exc: BaseException, fname: str) -> str:
    """The traceback lines that point into the candidate, plus the error itself."""
    lines = [ln for ln in traceback.format_exception(exc) if fname in ln or not ln.startswith("  File")]
    return "".join(lines[-8:]).strip()


class _NotAnArray(Exception):
    """An output that is not exactly an mlx.core.array (raised inside a timed call, reported as a failure)."""


class CheatError(Exception):
    """The candidate was caught doing something it may not do: its message is the reason."""


class Worker:
    """Holds loaded functions (the candidate's, or the trusted reference and baseline) and numbered slots of
    inputs and outputs; each protocol step is one request, so the evaluator times every step from outside.

    Inputs are generated here from a seed the evaluator draws (from the OS) only when it asks for them, after
    the candidate is loaded, so nothing about them exists in this process before the step that makes them."""

    def __init__(self, backend: str, guard, role: str):
        self.backend, self.guard, self.role = backend, guard, role
        self.mx, self.streams = _load_mlx(backend)
        self.off = _GUARDS_OFF   # read once, like the tamper check's
        from ksearch_engine.task import KernelTask  # loaded before privileges are dropped
        self.Task = KernelTask
        # GPU time per call where the backend has it (mlx-cuda); both roles time the same way. Its call_ms is
        # bound now, before any candidate runs (patching the class later changes nothing bound here).
        self.gpu = _gpu_timer(backend)
        self._gpu_call = self.gpu.call_ms if self.gpu is not None else None
        if self.gpu is not None:
            from ksearch_engine.gputime import CUPTI_METHOD
            self._cupti_method = CUPTI_METHOD
        self.tampered = _make_tamper_check(self.mx, self.gpu) if role == "candidate" else (lambda: [])
        self.task = None
        self.fns: dict = {"noop": lambda *xs: ()}
        self.slots: dict[int, dict] = {}
        self.count = 0
        self.threads = 0
        mx = self.mx
        self.defaults = [mx.default_stream(mx.cpu)]
        if mx.default_device() != mx.cpu:
            self.defaults.append(mx.default_stream(mx.default_device()))

    def sync_all(self) -> None:
        for st in self.defaults + self.streams:
            self.mx.synchronize(st)

    # -- steps ---------------------------------------------------------------------------------------
    def handle(self, req: dict) -> tuple[dict, bytes]:
        op = req["op"]
        if op == "ping":
            return {"pong": req.get("nonce")}, b""
        if op == "task":
            self.task = self.Task.model_validate(req["task"])
            return {"status": "ok"}, b""
        if self.role != "candidate":
            return self._step(op, req)
        import threading

        if op == "load":
            self.threads = threading.active_count()
        self.guard.activate(True)
        try:
            rep, data = self._step(op, req)
        except CheatError as e:
            rep, data = {"status": "cheating", "message": str(e)}, b""
        finally:
            self.guard.activate(False)
        events = self.guard.drain()
        if events:  # the evaluator saw them on the channel too; this names the first in the reply
            kind, detail = events[0]
            return {"status": "cheating", "message": detail, "guard": kind}, b""
        if op in ("load", "audit") and rep.get("status") == "ok":
            bad = self.tampered()
            if bad:
                return {"status": "cheating", "guard": "tamper", "message":
                        f"replaced {', '.join(bad[:4])} (the timer, the evaluator's functions or its state patched)"}, b""
            if threading.active_count() > self.threads:
                return {"status": "cheating", "message": "left a thread running after it returned", "guard": "threads"}, b""
        return rep, data

    def _step(self, op: str, req: dict) -> tuple[dict, bytes]:
        if op == "load":
            return self.load(req), b""
        if op == "prepare":
            return self.prepare(req), b""
        if op == "call":
            return self.call(req), b""
        if op == "fetch":
            return self.fetch(req)
        if op == "drop":
            for s in req.get("slots", []):
                self.slots.pop(s, None)
            return {"status": "ok"}, b""
        if op == "audit":
            return {"status": "ok"}, b""
        return {"status": "runtime_error", "message": f"unknown request {op!r}"}, b""

    def load(self, req: dict) -> dict:
        self.count += 1
        name = req.get("name") or f"candidate_{self.count}"
        try:
            mod = _load_module(req["source"], name)
        except SyntaxError as e:
            return {"status": "compile_error", "message": f"line {e.lineno}: {e.msg}"}
        except PermissionError as e:
            raise CheatError(str(e)) from None
        except Exception as e:  # noqa: BLE001 - any failure at import time is the candidate's
            return {"status": "compile_error", "message": _tb_tail(e, name)}
        fn = getattr(mod, req["entry"], None)
        if not callable(fn):
            return {"status": "compile_error", "message": f"the {'candidate' if self.role == 'candidate' else 'task'} defines no function '{req['entry']}'"}
        self.fns[req.get("as", "candidate")] = (fn, name)
        return {"status": "ok"}

    def prepare(self, req: dict) -> dict:
        """Fresh input buffers for the calls of one slot, one set per seed the evaluator sent; made, evaluated
        and synchronized here, before anything is timed."""
        mx = self.mx
        wl = next(w for w in self.task.workloads + self.task.timing_workloads() if w.name == req["workload"])
        sets, copies = [], []
        on_device = self.task.device_inputs(wl)
        for seed in req["seeds"]:
            if on_device:
                xs = self.task.make_inputs_mx(mx, wl, seed)
                mx.eval(*xs)
                arrays = [_to_np(mx, x) for x in xs] if req.get("check") else None
            else:
                arrays = self.task.make_inputs(wl, seed)
                xs = [_to_mx(mx, a, s.dtype) for a, s in zip(arrays, self.task.inputs)]
                mx.eval(*xs)
                if req.get("check") and any(x.dtype == mx.bfloat16 for x in xs):
                    # the snapshot the mutation check compares with: the inputs as the candidate gets them (numpy
                    # has no bfloat16: float32 values made on the host are rounded by the conversion)
                    arrays = [_to_np(mx, x) for x in xs]
            if self.backend == "mlx-cuda" and not on_device:
                # MLX's CUDA backend keeps arrays in managed memory: inputs made on the host would migrate to
                # the GPU inside the first timed kernel (seen on the H200: mx.softmax timed at 6.3 ms instead of
                # 0.09 ms). A read on the GPU here moves them before anything is timed.
                mx.eval(*[mx.sum(x) for x in xs])
            sets.append(xs)
            copies.append(arrays if req.get("check") else None)
        self.sync_all()
        self.slots[req["slot"]] = {"sets": sets, "np": copies, "outs": None}
        return {"status": "ok"}

    def call(self, req: dict) -> dict:
        """One call of a loaded function per input set of a slot, each evaluated and synchronized on every
        stream before the next starts."""
        mx = self.mx
        slot = self.slots[req["slot"]]
        fn, fname = self.fns[req["fn"]] if req["fn"] != "noop" else (self.fns["noop"], "noop")
        exact = "exact_type" not in self.off
        results, gpu_ms, methods = [], [], set()
        self.sync_all()   # nothing left running from before counts for, or against, these calls
        t0 = _perf()

        def one(xs, box: list) -> None:
            """One call: fn -> exact type check -> mx.eval -> synchronize (the unit the GPU timer times)."""
            r = fn(*xs)
            outs = tuple(r) if type(r) in (tuple, list) else (r,)
            for i, o in enumerate(outs):
                if exact and type(o) is not mx.array:  # exactly: a subclass or look-alike could compute when read
                    raise _NotAnArray(f"returned {type(o).__qualname__} (from {type(o).__module__}) as output {i}, "
                                      f"not mlx.core.array: outputs must be real MLX arrays")
            mx.eval(*[o for o in outs if isinstance(o, mx.array)])
            self.sync_all()   # work a candidate left on another stream is its own time
            box.append(outs)

        try:
            for xs in slot["sets"]:
                box: list = []
                if self._gpu_call is not None and not req.get("untimed"):
                    g, method = self._gpu_call(lambda: one(xs, box))
                    gpu_ms.append(float(g))
                    methods.add(method)
                else:
                    one(xs, box)
                results.append(box[0])
        except _NotAnArray as e:
            return {"status": "failed", "guard": "type", "message": str(e)}
        except CheatError:
            raise
        except Exception as e:  # noqa: BLE001
            return _failure(e, fname)
        ms = (_perf() - t0) * 1e3
        slot["outs"] = results
        elems = 0
        for xs, outs, copy in zip(slot["sets"], results, slot["np"]):
            if any(o is x for o in outs for x in xs):
                return {"status": "cheating", "message": "returned an input array as its output (outputs must be fresh)"}
            elems += sum(int(getattr(o, "size", 0)) for o in outs)
            for i, (x, a) in enumerate(zip(xs, copy or ())):
                now = _to_np(mx, x)
                if now.shape != a.shape or not np.array_equal(now, a.astype(now.dtype), equal_nan=True):
                    return {"status": "cheating", "message": f"mutated its input #{i} ({self.task.inputs[i].name})"}
        rep = {"status": "ok", "ms": ms, "elems": elems}
        if self.gpu is not None and not req.get("untimed"):
            # "cupti" only when every call of the request was read from CUPTI's records; any fallback: "wall"
            rep |= {"gpu_ms": gpu_ms, "gpu": "cupti" if methods == {self._cupti_method} else "wall"}
        return rep

    def fetch(self, req: dict) -> tuple[dict, bytes]:
        """Outputs of some (default all) input sets of a slot as raw bytes after the reply line, set by set
        (bfloat16 travels as float32, exactly). The slot is dropped."""
        mx = self.mx
        slot = self.slots.pop(req["slot"])
        results = slot["outs"] or []
        which = req.get("which")
        meta, parts = [], []
        for k in (range(len(results)) if which is None else which):
            for o in results[k]:
                dt = str(getattr(o, "dtype", "?")).rsplit(".", 1)[-1]
                a = np.ascontiguousarray(_to_np(mx, o) if isinstance(o, mx.array) else np.asarray(o))
                b = a.tobytes()
                meta.append({"set": k, "dtype": dt, "wire": a.dtype.str, "shape": list(a.shape), "nbytes": len(b)})
                parts.append(b)
        data = b"".join(parts)
        return {"status": "ok", "outputs": meta, "bytes": len(data)}, data


def _failure(e: BaseException, fname: str) -> dict:
    msg = _tb_tail(e, fname)
    if isinstance(e, MemoryError) or "bad_alloc" in msg or "[malloc]" in msg:
        return {"status": "resource_limit", "message": "ran out of memory (the sandbox's memory limit): " + msg[-300:]}
    if isinstance(e, OSError) and e.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT, errno.EMFILE):
        what = {errno.EFBIG: "file-size limit", errno.EMFILE: "open-file limit"}.get(e.errno, "private temp folder full")
        return {"status": "resource_limit", "message": f"hit the sandbox's {what} ({e.strerror}): " + msg[-300:]}
    status = "compile_error" if "compil" in msg.lower() or "SimError" in msg else "runtime_error"
    return {"status": status, "message": msg}


def _reply_with(obj: dict, data: bytes) -> None:
    _reply(obj)
    view = memoryview(data)
    while view:
        view = view[os.write(_PROTO, view):]


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "mlx-cpu"
    role = sys.argv[2] if len(sys.argv) > 2 else "candidate"
    guard = _guard_factory()
    try:
        w = Worker(backend, guard, role)
        if backend == "sim":  # the simulator compiles kernels with g++: its own calls may start processes
            from ksearch_engine.sim import build as _build
            guard.trust({f.__code__ for f in vars(_build).values() if callable(f) and hasattr(f, "__code__")})
        dev = ""
        try:
            info = w.mx.device_info()
            dev = str(info.get("device_name") or info.get("architecture") or "")
        except Exception:  # noqa: BLE001
            pass
        import mlx

        needs = [os.path.dirname(np.__file__), list(mlx.__path__)[0], os.path.dirname(os.__file__),
                 os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
        user = _drop_privileges(needs)
        _reply({"ready": True, "mlx_version": w.mx.__version__, "device": dev, "user": user,
                "default_device": str(w.mx.default_device())})
    except Exception as e:  # noqa: BLE001
        _reply({"ready": False, "message": f"{type(e).__name__}: {e}"})
        return
    for line in sys.stdin:
        req = json.loads(line)
        data = b""
        try:
            rep, data = w.handle(req)
        except MemoryError:
            rep = {"status": "resource_limit", "message": "ran out of memory (the sandbox's memory limit)"}
        except Exception as e:  # noqa: BLE001
            rep = {"status": "runtime_error", "message": f"{type(e).__name__}: {e}"}
            data = b""
        rep["nonce"] = req.get("nonce")
        if not data:
            rep.pop("bytes", None)
        _reply_with(rep, data)


if __name__ == "__main__":
    main()
