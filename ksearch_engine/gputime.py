"""GPU time per call: what a kernel costs on the GPU, without the host time around it.

One call timed as `fn(); mx.eval(); mx.synchronize()` on the wall clock carries 0.05-0.18 ms of host time on
MLX's CUDA backend (NOTES.md): kernels of 20-60 us all look alike. On NVIDIA this timer reads each call's
kernels from CUPTI's activity records (NVIDIA's `cupti-python`, no torch): the GPU time of a call is the sum
of `end - start` of the kernels it ran (MLX's CUDA graph runs them back to back; a copy kernel a candidate
launches counts, host gaps do not). Where CUPTI is missing (no `cupti-python`, no NVIDIA GPU, no libcupti)
it falls back to the wall time of one call per eval + synchronize, and says so in the method string.

    timer = GpuTimer()                 # picks CUPTI when available()
    median_ms, iqr_ms, method = timer.time(fn, repeats=20, rotate_inputs=[inputs_a, inputs_b, ...])

`rotate_inputs`: several copies of the inputs, used in turn, so the working set exceeds the L2 cache (~50 MB
on an H200) and the timer does not time the cache. Install on a Linux+NVIDIA machine:
`pip install cupti-python` (13.4; libcupti comes from the `nvidia-cuda-cupti` wheel or the CUDA toolkit).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

CUPTI_METHOD = "gpu-time (CUPTI kernel activity: sum of the call's kernel durations, one call per eval)"
WALL_METHOD = "wall time of one call per mx.eval + mx.synchronize (includes ~0.05-0.18 ms host time on a GPU)"


class GpuTimeError(RuntimeError):
    """The GPU timer cannot run here; the message says why."""


class _CuptiSession:
    """CUPTI's activity API, subscribed once per process (CUPTI allows one activity subscriber per process
    on CUDA <= 13.2: the session is created once and reused by every timer of the process)."""

    def __init__(self, module=None):
        if module is None:
            from cupti import cupti as module      # NVIDIA's cupti-python
        self.c = module
        self.records: list = []
        self.c.activity_register_callbacks(self._requested, self._completed)
        self.c.activity_enable(self.c.ActivityKind.CONCURRENT_KERNEL)

    @staticmethod
    def _requested():
        return 8 * 1024 * 1024, 0        # buffer bytes, max records (0: as many as fit)

    def _completed(self, activities) -> None:
        kernel = int(self.c.ActivityKind.CONCURRENT_KERNEL)
        for a in activities:
            if int(getattr(a, "kind", kernel)) == kernel:
                self.records.append((int(a.start), int(a.end), str(getattr(a, "name", ""))))

    def begin(self) -> None:
        self.c.activity_flush_all(1)
        self.records.clear()

    def end(self) -> tuple[float, int]:
        """(GPU ms of the kernels since begin(), how many kernels)."""
        self.c.activity_flush_all(1)
        recs, self.records = self.records, []
        return sum(max(0, e - s) for s, e, _ in recs) / 1e6, len(recs)


_SESSION: dict = {}     # the process's one CUPTI subscription (see _CuptiSession)


def _session(module=None) -> _CuptiSession:
    key = id(module) if module is not None else "cupti"
    if key not in _SESSION:
        _SESSION[key] = _CuptiSession(module)
    return _SESSION[key]


class GpuTimer:
    """Times a callable per call on the GPU (CUPTI) where it can, else on the wall clock; names the method."""

    def __init__(self, prefer: str = "auto", *, cupti_module=None, warmup: int = 3):
        """prefer: "auto" (CUPTI when available), "cupti" (raise if it is not), "wall"."""
        self.warmup = warmup
        self._module = cupti_module
        if prefer not in ("auto", "cupti", "wall"):
            raise ValueError(f"prefer must be auto, cupti or wall, not {prefer!r}")
        use = prefer == "cupti" or (prefer == "auto" and self.available(cupti_module))
        if prefer == "cupti" and not self.available(cupti_module):
            raise GpuTimeError(f"CUPTI GPU timing is not available here: {self.why_not(cupti_module)}")
        self.kind = "cupti" if use else "wall"

    # -- availability ----------------------------------------------------------------------------------
    @staticmethod
    def why_not(cupti_module=None) -> str | None:
        """None when CUPTI GPU timing works here, else why not."""
        if cupti_module is None:
            try:
                from cupti import cupti as cupti_module  # noqa: F401
            except Exception as e:  # noqa: BLE001 - ImportError, or libcupti missing (OSError/RuntimeError)
                return f"cupti-python is not importable ({type(e).__name__}: {str(e)[:120]}); pip install cupti-python"
            try:
                import mlx.core as mx
                if not mx.cuda.is_available():
                    return "MLX's CUDA backend is not available (no NVIDIA GPU, or mlx-cuda not installed)"
            except Exception as e:  # noqa: BLE001
                return f"MLX's CUDA backend cannot be queried ({e})"
        return None

    @classmethod
    def available(cls, cupti_module=None) -> bool:
        return cls.why_not(cupti_module) is None

    def subscribe(self) -> None:
        """Subscribe to CUPTI now (once per process) rather than at the first timed call: the evaluator's
        worker does it before any candidate is loaded."""
        if self.kind == "cupti":
            _session(self._module)

    @property
    def method(self) -> str:
        return CUPTI_METHOD if self.kind == "cupti" else WALL_METHOD

    # -- timing --------------------------------------------------------------------------------------
    def call_ms(self, thunk: Callable[[], None]) -> tuple[float, str]:
        """(ms, method) of ONE call: `thunk` must run the call and evaluate + synchronize it itself (the
        evaluator's per-call step). GPU time of its kernels under CUPTI, else the wall time around it."""
        if self.kind == "cupti":
            session = _session(self._module)
            session.begin()
            thunk()
            ms, n = session.end()
            if n:
                return ms, CUPTI_METHOD
        t0 = time.perf_counter()
        thunk()
        return (time.perf_counter() - t0) * 1e3, WALL_METHOD

    def time(self, fn: Callable, repeats: int = 20, rotate_inputs: Sequence[Sequence] | None = None
             ) -> tuple[float, float, str]:
        """(median ms, interquartile range ms, method) over `repeats` calls of `fn(*inputs)`, each evaluated
        and synchronized on its own, the inputs taken in turn from `rotate_inputs` (default: no arguments)."""
        import mlx.core as mx

        if repeats < 1:
            raise ValueError("repeats must be at least 1")
        sets = [tuple(s) for s in rotate_inputs] if rotate_inputs else [()]
        for s in sets:
            mx.eval(*[x for x in s if isinstance(x, mx.array)])
        mx.synchronize()

        def call(i: int) -> None:
            out = fn(*sets[i % len(sets)])
            outs = out if isinstance(out, (tuple, list)) else (out,)
            mx.eval(*[o for o in outs if isinstance(o, mx.array)])
            mx.synchronize()

        for i in range(self.warmup):
            call(i)
        session = _session(self._module) if self.kind == "cupti" else None
        times: list[float] = []
        method = self.method
        for i in range(repeats):
            if session is not None:
                session.begin()
                call(i)
                ms, n = session.end()
                if n == 0:      # nothing ran on the GPU (a CPU op, a cached result): wall time, named as such
                    session, method = None, WALL_METHOD + " (CUPTI saw no kernel for this callable)"
                    times.clear()
                else:
                    times.append(ms)
                    continue
            t0 = time.perf_counter()
            call(i)
            times.append((time.perf_counter() - t0) * 1e3)
        while len(times) < repeats:      # the calls lost to a switch to wall time
            t0 = time.perf_counter()
            call(len(times))
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), _iqr(times), method


def _iqr(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[2] - q[0]


__all__ = ["GpuTimer", "GpuTimeError", "CUPTI_METHOD", "WALL_METHOD"]
