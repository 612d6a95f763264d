"""The sandboxed worker: runs references or candidates on inputs from files and answers in JSON lines.

Protocol: one JSON request per line on stdin, one JSON reply per line on the original stdout (the child
points fd 1 at stderr first, so whatever a candidate prints cannot corrupt the protocol). Outputs go to
.npy files in the child's scratch directory; nothing live crosses the process boundary.
"""
from __future__ import annotations

import json
import math
import os
import sys
import traceback
import types

_proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import time  # noqa: E402

import numpy as np  # noqa: E402

_perf = time.perf_counter  # captured before any candidate runs: patching time.* cannot fool the timer


def _hide_secrets() -> None:
    """Cover the user's secret folders with empty tmpfs mounts (we are root in our own mount namespace)."""
    paths = [p for p in os.environ.pop("KSEARCH_HIDE", "").split(os.pathsep) if p]
    if not paths:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None)  # MS_REC | MS_PRIVATE: nothing propagates out
    for p in paths:
        if os.path.isdir(p):
            libc.mount(b"tmpfs", p.encode(), b"tmpfs", 0, b"size=64k,mode=700")
        else:
            libc.mount(b"/dev/null", p.encode(), None, 0x1000, None)  # MS_BIND


_hide_secrets()

_net_attempts: list[str] = []


def _audit(event: str, args: tuple) -> None:
    """Refuse network use from anything in this process (an audit hook cannot be removed by the candidate)."""
    if event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo"):
        _net_attempts.append(f"{event} {args[1:2]}")
        raise PermissionError(f"ksearch sandbox: network access is not allowed ({event})")


sys.addaudithook(_audit)


def _reply(obj: dict) -> None:
    _proto.write(json.dumps(obj) + "\n")
    _proto.flush()


def _load_mlx(backend: str):
    import mlx.core as mx

    if backend == "sim":
        from ksearch_engine.sim import install_mlx_shim
        install_mlx_shim()
    return mx


def _watched(mx) -> dict:
    """Functions a cheating candidate would patch to fake its time or results."""
    return {"mx.eval": mx.eval, "mx.synchronize": mx.synchronize, "time.perf_counter": time.perf_counter,
            "time.time": time.time, "time.monotonic": time.monotonic, "np.allclose": np.allclose,
            "np.save": np.save, "mx.array": mx.array}


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


class Worker:
    def __init__(self, backend: str):
        self.backend = backend
        self.mx = _load_mlx(backend)
        self.watch = _watched(self.mx)
        self.count = 0

    def tampered(self) -> list[str]:
        now = _watched(self.mx)
        return [k for k, v in self.watch.items() if now[k] is not v]

    # -- reference ---------------------------------------------------------------------------------
    def reference(self, req: dict) -> dict:
        mx = self.mx
        mod = _load_module(req["source"], "reference")
        fn = getattr(mod, req.get("entry", "reference"))
        results = {}
        for item in req["items"]:
            xs = [_to_mx(mx, np.load(p), dt) for p, dt in zip(item["inputs"], item["dtypes"])]
            outs = _as_tuple(fn(*xs))
            mx.eval(*outs)
            paths = []
            for i, o in enumerate(outs):
                p = os.path.join(req["out_dir"], f"{item['key']}.ref{i}.npy")
                np.save(p, _to_np(mx, o))
                paths.append(p)
            results[item["key"]] = paths
        return {"ok": True, "outputs": results}

    # -- candidate ---------------------------------------------------------------------------------
    def candidate(self, req: dict) -> dict:
        mx = self.mx
        self.count += 1
        fname = f"candidate_{self.count}"
        try:
            mod = _load_module(req["source"], fname)
        except SyntaxError as e:
            return {"status": "compile_error", "message": f"line {e.lineno}: {e.msg}"}
        except Exception as e:  # noqa: BLE001 - any failure at import time is the candidate's
            return {"status": "compile_error", "message": _tb_tail(e, fname)}
        fn = getattr(mod, req["entry"], None)
        if not callable(fn):
            return {"status": "compile_error", "message": f"the candidate defines no function '{req['entry']}'"}
        ref = _load_module(req["reference"], "reference_local")
        ref_fn = getattr(ref, "reference")
        outputs = {}
        for item in req["items"]:
            np_in = [np.load(p) for p in item["inputs"]]
            xs = [_to_mx(mx, a, dt) for a, dt in zip(np_in, item["dtypes"])]
            try:
                first = _as_tuple(fn(*xs))
                mx.eval(*first)
                ref_out = _as_tuple(ref_fn(*xs))  # the reference runs between two candidate calls
                mx.eval(*ref_out)
                second = _as_tuple(fn(*xs))
                mx.eval(*second)
            except Exception as e:  # noqa: BLE001
                msg = _tb_tail(e, fname)
                if _net_attempts:
                    return {"status": "cheating", "message": f"tried to use the network ({_net_attempts[0]}); candidates run without network"}
                if isinstance(e, MemoryError) or "bad_alloc" in msg or "[malloc]" in msg:
                    return {"status": "resource_limit", "message": "ran out of memory (the sandbox's memory limit): " + msg[-300:]}
                status = "compile_error" if "compil" in msg.lower() or "SimError" in msg else "runtime_error"
                return {"status": status, "message": msg, "workload": item["workload"]}
            for o in first + second:
                if not isinstance(o, mx.array):
                    return {"status": "runtime_error", "message": f"the candidate returned {type(o).__name__}, not mx.array"}
            if any(a is b for a in first for b in xs) or any(a is b for a in second for b in xs):
                return {"status": "cheating", "message": "returned an input array as its output (outputs must be fresh)"}
            if any(a is b for a in first for b in second) or any(a is b for a in first + second for b in ref_out):
                return {"status": "cheating", "message": "returned the same array object twice or the reference's own buffer (cached result, not fresh output)"}
            for i, (x, a) in enumerate(zip(xs, np_in)):
                now = _to_np(mx, x)
                if now.shape != a.shape or not np.array_equal(now, a.astype(now.dtype), equal_nan=True):
                    return {"status": "cheating", "message": f"mutated its input #{i} ({req['input_names'][i]})"}
            paths = []
            for tag, outs in (("first", first), ("second", second)):
                for i, o in enumerate(outs):
                    p = os.path.join(req["out_dir"], f"{item['key']}.{tag}{i}.npy")
                    np.save(p, _to_np(mx, o))
                    paths.append(p)
            outputs[item["key"]] = paths
        reply = {"status": "ok", "outputs": outputs}
        if req.get("timing"):
            try:
                reply["timings"] = self.time(fn, req)
            except Exception as e:  # noqa: BLE001
                return {"status": "runtime_error", "message": "while timing: " + _tb_tail(e, fname)}
        if _net_attempts:
            return {"status": "cheating", "message": f"tried to use the network ({_net_attempts[0]}); candidates run without network"}
        bad = self.tampered()
        if bad:
            return {"status": "cheating", "message": f"replaced {', '.join(bad)} (timer or evaluator functions patched)"}
        return reply

    def time(self, fn, req: dict) -> list[dict]:
        """Interleave baseline and candidate, one call per eval + synchronize, median and IQR."""
        mx = self.mx
        from ksearch_engine.task import KernelTask

        task = KernelTask.model_validate(req["task"])
        base = _load_module(task.baseline_source(), "baseline")
        base_fn = getattr(base, "baseline")
        t = req["timing"]
        out = []
        for wl in task.timing_workloads():
            arrays = task.make_inputs(wl, seed=1234)
            dtypes = [s.dtype for s in task.inputs]
            nbytes = sum(a.nbytes for a in arrays)
            copies = 1 if self.backend in ("mlx-cpu", "sim") else max(1, min(8, math.ceil(100e6 / max(nbytes, 1))))
            sets = [[_to_mx(mx, a, d) for a, d in zip(arrays, dtypes)] for _ in range(copies)]
            for s in sets:
                mx.eval(*s)
            def once(f, xs):
                t0 = _perf()
                r = _as_tuple(f(*xs))
                mx.eval(*r)
                mx.synchronize()
                return (_perf() - t0) * 1e3
            for i in range(t.get("warmup", 3)):
                once(base_fn, sets[i % copies])
                once(fn, sets[i % copies])
            tb, tc = [], []
            deadline = _perf() + t.get("max_s", 20.0)
            for i in range(t.get("repeats", 20)):
                tb.append(once(base_fn, sets[i % copies]))
                tc.append(once(fn, sets[i % copies]))
                if _perf() > deadline and i >= 4:
                    break
            out.append({"workload": wl.name, "cand": tc, "base": tb, "copies": copies})
        return out


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "mlx-cpu"
    try:
        w = Worker(backend)
        dev = ""
        try:
            info = w.mx.device_info()
            dev = str(info.get("device_name") or info.get("architecture") or "")
        except Exception:  # noqa: BLE001
            pass
        _reply({"ready": True, "mlx_version": w.mx.__version__, "device": dev,
                "default_device": str(w.mx.default_device())})
    except Exception as e:  # noqa: BLE001
        _reply({"ready": False, "message": f"{type(e).__name__}: {e}"})
        return
    for line in sys.stdin:
        req = json.loads(line)
        try:
            rep = w.reference(req) if req["op"] == "reference" else w.candidate(req)
        except MemoryError:
            rep = {"status": "resource_limit", "message": "ran out of memory (the sandbox's memory limit)"}
        except Exception as e:  # noqa: BLE001
            rep = {"status": "runtime_error", "ok": False, "message": f"{type(e).__name__}: {e}"}
        _reply(rep)


if __name__ == "__main__":
    main()
