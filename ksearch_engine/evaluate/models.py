"""The evaluator's results and limits, as JSON-able pydantic models."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, computed_field

Status = Literal[
    "passed", "failed", "compile_error", "runtime_error", "timeout", "crashed",
    "resource_limit", "cheating", "not_runnable",
]
# Statuses that mean "the candidate is wrong or harmful" (as opposed to passed / not runnable here).
FAILING = {"failed", "compile_error", "runtime_error", "timeout", "crashed", "resource_limit", "cheating"}


class Limits(BaseModel):
    """Per-candidate sandbox limits."""
    wall_s: float = 60.0          # whole evaluation of one candidate, including compilation
    cpu_s: int = 120              # RLIMIT_CPU
    memory_mb: int = 8192         # RLIMIT_AS (skipped on mlx-cuda, whose runtime reserves huge ranges)
    file_mb: int = 256            # RLIMIT_FSIZE
    nproc: int = 512              # RLIMIT_NPROC (threads count too)
    isolate_network: bool = True  # new network, PID and mount namespaces where the OS allows it
    drop_privileges: bool = True  # when running as root, the child runs as an unprivileged uid of its own
    scratch_mb: int = 512         # quota on what a candidate may leave in its scratch directory
    scratch_files: int = 2000     # ... and how many files
    tmp_mb: int = 64              # size of the private /tmp, /var/tmp, /dev/shm a child sees (tmpfs)
    nofile: int = 256             # RLIMIT_NOFILE
    # Folders and files the child must not see (covered by empty tmpfs / /dev/null in its mount namespace).
    # None: the user's whole home directory, except what the run itself needs (the interpreter, packages,
    # the evaluator's own directory), which is bound back in.
    hide: list[str] | None = None
    # For tests that show each guard is what catches its attack: names of in-worker guards to switch off
    # ('audit', 'tamper', 'recheck', 'streams', 'mountlock'). Never set outside tests.
    disable_guards: list[str] = []
    # For tests on a machine without a GPU: the source of a CUPTI stand-in module (the API of NVIDIA's
    # cupti-python that ksearch_engine.gputime uses) both workers time their calls with. Never set outside tests.
    gpu_standin: str | None = None


class Mismatch(BaseModel):
    workload: str
    seed: int
    output: str
    index: list[int] = []
    got: float | None = None
    expected: float | None = None
    abs_err: float | None = None
    rel_err: float | None = None
    call: str = "first"           # which call of the candidate: 'first' (before the reference) or 'second'
    note: str = ""

    def describe(self) -> str:
        if self.note:
            return f"{self.output} on {self.workload} (seed {self.seed}): {self.note}"
        return (f"{self.output}{self.index} on {self.workload} (seed {self.seed}, {self.call} call): "
                f"got {self.got:.6g}, expected {self.expected:.6g} (abs err {self.abs_err:.3g}, rel {self.rel_err:.3g})")


class Timing(BaseModel):
    workload: str
    median_ms: float
    iqr_ms: float
    baseline_ms: float
    baseline_iqr_ms: float
    speedup: float
    repeats: int
    method: str                   # starts "gpu-time (CUPTI)" or "wall time of one call per mx.eval + mx.synchronize"
    suspect: bool = False         # speedup > 10x: flagged until re-measured


class EvalResult(BaseModel):
    status: Status
    message: str = ""
    kind: str = "ops"
    backend: str = ""
    device: str = ""
    mlx_version: str = ""
    verified_by: str | None = None   # 'mlx-cpu', 'mlx-cuda', 'sim', ...
    trials: int = 0                  # (workload, seed) pairs checked
    worst: Mismatch | None = None
    max_abs_err: float | None = None
    timing: Timing | None = None     # main timing workload (the largest); None when not measured
    timings: list[Timing] = []
    sandbox: dict = {}

    @computed_field  # the sandbox the candidate ran in ('bubblewrap', 'namespaces (unshare)', 'rlimits + process group')
    @property
    def sandbox_kind(self) -> str:
        return str(self.sandbox.get("kind", "")) if isinstance(self.sandbox, dict) else ""
    log_tail: str = ""
    # False: verified on the smallest workload and at the timed shape only, because it was not faster than the
    # run's best so far (Evaluator.evaluate's `bar`); such a result is never offered nor taken as a best
    complete: bool = True
    eval_ms: float = 0.0             # wall time the evaluator spent on this candidate
    phases: dict[str, float] = {}    # where eval_ms went (ms): worker start, each request kind, comparisons

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def summary(self) -> str:
        if self.status == "passed":
            t = self.timing
            where = f"{self.device} ({self.backend})"
            if t is None:
                return f"passed · verified ({self.verified_by}) on {self.trials} trials"
            flag = " (suspect: re-measure)" if t.suspect else ""
            part = "" if self.complete else " · not faster than the best so far: checked on one workload and the timed shape"
            return f"passed · {t.median_ms:.4g} ms ±{t.iqr_ms:.2g} · {t.speedup:.2f}x vs baseline{flag}{part} · {where}"
        if self.status == "failed" and self.worst:
            return f"failed · {self.worst.describe()}"
        return f"{self.status} · {self.message}"
