"""KernelTask: what a kernel computes, on which inputs, how closely, at which shapes.

A task is data (pydantic) so that it can cross process boundaries and be stored. The reference and the
baseline are Python *source text* defining `reference(*inputs)` / `baseline(*inputs)` in MLX operations:
the evaluator runs them in their own processes, never in the candidate's.
"""
from __future__ import annotations

import hashlib
import math
import tomllib
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError, model_validator

from .defaults import DEVICE_INPUT_BYTES

DType = Literal["float32", "float16", "bfloat16", "int32", "uint32", "int64", "bool",
                "int8", "uint8", "int16", "uint16", "uint64"]
Init = Literal["uniform", "normal", "positive", "randint", "zeros", "ones", "arange", "permutation", "captured"]

# KernelBench's tolerances: fp32 1e-4, fp16/bf16 1e-2.
DEFAULT_TOLERANCES = {
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float16": {"atol": 1e-2, "rtol": 1e-2},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
    "int32": {"atol": 0.0, "rtol": 0.0},
    "uint32": {"atol": 0.0, "rtol": 0.0},
    "int64": {"atol": 0.0, "rtol": 0.0},
    "bool": {"atol": 0.0, "rtol": 0.0},
    "int8": {"atol": 0.0, "rtol": 0.0},
    "uint8": {"atol": 0.0, "rtol": 0.0},
    "int16": {"atol": 0.0, "rtol": 0.0},
    "uint16": {"atol": 0.0, "rtol": 0.0},
    "uint64": {"atol": 0.0, "rtol": 0.0},
}


class TaskError(ValueError):
    """A task file or task description that cannot be used; the message names the file and the fix."""


class Tolerance(BaseModel):
    atol: float
    rtol: float


class InputSpec(BaseModel):
    name: str
    shape: list[int | str] = Field(description="ints, or names of dims given by each workload")
    dtype: DType = "float32"
    init: Init = "uniform"
    low: float = -1.0
    high: float = 1.0
    # init = "captured": the contents a launch capture recorded, as a .npy file path or "b64:" + the .npy bytes
    # in base64 (what crosses into the sandbox). `vary`: for every seed but the task's first, floating-point
    # contents are redrawn uniformly in [low, high] (the captured range), so a candidate cannot learn one input;
    # integer contents always stay as captured (they index memory, count sizes or hold structure).
    data: str | None = None
    vary: bool = False

    def resolve_shape(self, dims: dict[str, int]) -> tuple[int, ...]:
        out = []
        for d in self.shape:
            if isinstance(d, int):
                out.append(d)
            elif d in dims:
                out.append(int(dims[d]))
            else:
                raise TaskError(f"input '{self.name}': dimension '{d}' is not set by the workload (dims: {sorted(dims)})")
        return tuple(out)


class Workload(BaseModel):
    name: str
    dims: dict[str, int] = {}
    # captured tasks: per input, this workload's recorded contents (a .npy path or "b64:" data, see InputSpec)
    data: dict[str, str] = {}


class KernelTask(BaseModel):
    name: str
    family: str = "custom"
    description: str = ""
    entry: str = "kernel"
    inputs: list[InputSpec]
    outputs: list[str] = ["out"]
    reference: str = Field(description="Python source defining reference(*inputs) with MLX ops")
    baseline: str | None = Field(None, description="Python source defining baseline(*inputs); default: reference")
    baseline_name: str = "MLX reference"
    workloads: list[Workload] = [Workload(name="default")]
    bench_workloads: list[Workload] = []
    cpu_bench_workloads: list[Workload] = Field([], description="timed on mlx-cpu instead of bench_workloads "
                                                "(GPU-sized shapes take minutes there); default: the small workloads")
    seeds: list[int] = [0, 1, 2]
    tolerances: dict[str, Tolerance] = {}
    initial: str | None = Field(None, description="a starting candidate module (source text)")
    source_file: str | None = None
    kernel_name: str | None = None
    # where the task came from: a task file or family ("task"), the user's kernel with captured launches
    # ("captured"), or a Metal / MLX kernel's own source as root and reference ("kernel")
    origin: Literal["task", "captured", "kernel"] = "task"

    @model_validator(mode="after")
    def _check(self) -> "KernelTask":
        names = [i.name for i in self.inputs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate input names: {names}")
        if not self.workloads:
            raise ValueError("a task needs at least one workload")
        if "def reference" not in self.reference:
            raise ValueError("reference must define `def reference(...)`")
        if self.baseline is not None and "def baseline" not in self.baseline:
            raise ValueError("baseline must define `def baseline(...)`")
        return self

    # -- derived -------------------------------------------------------------------------------------
    def tolerance(self, dtype: str) -> Tolerance:
        if dtype in self.tolerances:
            return self.tolerances[dtype]
        return Tolerance(**DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["float32"]))

    def baseline_source(self) -> str:
        if self.baseline is not None:
            return self.baseline
        return self.reference + "\n\ndef baseline(*args):\n    return reference(*args)\n"

    def timing_workloads(self) -> list[Workload]:
        return self.bench_workloads or self.workloads

    def for_backend(self, backend: str) -> "KernelTask":
        """The task as timed on `backend`: on the CPU, CPU-sized timing workloads replace GPU-sized ones."""
        if backend != "mlx-cpu" or not self.bench_workloads:
            return self
        return self.model_copy(update={"bench_workloads": list(self.cpu_bench_workloads or self.workloads)})

    def fingerprint(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    def make_inputs(self, workload: Workload, seed: int) -> list[np.ndarray]:
        """Deterministic inputs for one workload and seed, as numpy arrays (bfloat16 is carried as float32)."""
        rng = np.random.default_rng(seed)
        arrays = []
        for spec in self.inputs:
            if spec.init == "captured":
                arrays.append(_captured(rng, spec, workload, seed == self.seeds[0] if self.seeds else True))
                continue
            shape = spec.resolve_shape(workload.dims)
            arrays.append(_generate(rng, spec, shape))
        return arrays

    def device_inputs(self, workload: Workload) -> bool:
        """Whether a workload's inputs are drawn by MLX's own generator on the worker's device instead of numpy
        on the host: large sets of generated (not captured) inputs, where numpy would take longer than the
        calls it feeds (33M normals: ~0.5 s a set, several sets per timed request on a GPU)."""
        if any(s.init == "captured" for s in self.inputs):
            return False
        nbytes = sum(math.prod(s.resolve_shape(workload.dims)) * ELEM_BYTES.get(s.dtype, 4) for s in self.inputs)
        return nbytes >= DEVICE_INPUT_BYTES

    def make_inputs_mx(self, mx, workload: Workload, seed: int) -> list:
        """`make_inputs`' device twin (same inits and ranges, MLX's counter-based generator keyed by the seed):
        every worker of one backend draws the same arrays for one (workload, seed)."""
        keys = mx.random.split(mx.random.key(seed % (1 << 63)), max(2, len(self.inputs)))
        return [_generate_mx(mx, spec, spec.resolve_shape(workload.dims), keys[i])
                for i, spec in enumerate(self.inputs)]

    # -- loading -------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "KernelTask":
        """Load a `*.task.toml` file. `reference_file`/`baseline_file`/`initial_file` are read relative to it."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise TaskError(f"{path}: task file not found") from None
        except tomllib.TOMLDecodeError as e:
            raise TaskError(f"{path}: not valid TOML ({e}); fix the file or delete it and run 'Create benchmark task' again") from None
        for key in ("reference", "baseline", "initial"):
            fkey = f"{key}_file"
            if fkey in data:
                f = path.parent / data.pop(fkey)
                try:
                    data[key] = f.read_text()
                except OSError as e:
                    raise TaskError(f"{path}: {fkey} '{f}' cannot be read ({e.strerror})") from None
        if "source_file" in data and not Path(data["source_file"]).is_absolute():
            data["source_file"] = str((path.parent / data["source_file"]).resolve())
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'task'}: {err['msg']}" for err in e.errors())
            raise TaskError(f"{path}: invalid task: {problems}") from None


# bytes per element of each dtype an input or a captured buffer can have (float64: captured buffers only)
ELEM_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "bool": 1,
              "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8}


def _generate_mx(mx, spec: InputSpec, shape: tuple[int, ...], key):
    dt = mx.bool_ if spec.dtype == "bool" else getattr(mx, spec.dtype)
    if spec.init == "uniform":
        a = mx.random.uniform(spec.low, spec.high, shape, key=key)
    elif spec.init == "normal":
        a = mx.random.normal(shape, loc=(spec.high + spec.low) / 2, scale=(spec.high - spec.low) / 2, key=key)
    elif spec.init == "positive":
        a = mx.random.uniform(max(spec.low, 1e-3), max(spec.high, 1e-3 + 1e-6), shape, key=key)
    elif spec.init == "randint":
        a = mx.random.randint(int(spec.low), int(spec.high), shape, key=key)
    elif spec.init == "zeros":
        a = mx.zeros(shape)
    elif spec.init == "ones":
        a = mx.ones(shape)
    elif spec.init == "arange":
        a = mx.arange(math.prod(shape)).reshape(shape)
    elif spec.init == "permutation":
        a = mx.random.permutation(math.prod(shape), key=key).reshape(shape)
    else:  # pragma: no cover - Literal guards this; captured inputs never come here (device_inputs)
        raise TaskError(f"unknown init {spec.init}")
    return a.astype(dt)


def _generate(rng: np.random.Generator, spec: InputSpec, shape: tuple[int, ...]) -> np.ndarray:
    np_dtype = {"bfloat16": np.float32, "bool": np.bool_}.get(spec.dtype, spec.dtype)
    if spec.init == "uniform":
        a = rng.uniform(spec.low, spec.high, size=shape)
    elif spec.init == "normal":
        a = rng.standard_normal(size=shape) * (spec.high - spec.low) / 2 + (spec.high + spec.low) / 2
    elif spec.init == "positive":
        a = rng.uniform(max(spec.low, 1e-3), max(spec.high, 1e-3 + 1e-6), size=shape)
    elif spec.init == "randint":
        a = rng.integers(int(spec.low), int(spec.high), size=shape)
    elif spec.init == "zeros":
        a = np.zeros(shape)
    elif spec.init == "ones":
        a = np.ones(shape)
    elif spec.init == "arange":
        a = np.arange(int(np.prod(shape))).reshape(shape)
    elif spec.init == "permutation":
        a = rng.permutation(int(np.prod(shape))).reshape(shape)
    else:  # pragma: no cover - Literal guards this
        raise TaskError(f"unknown init {spec.init}")
    return np.ascontiguousarray(a.astype(np_dtype))


def _captured(rng: np.random.Generator, spec: InputSpec, workload: Workload, first_seed: bool) -> np.ndarray:
    """A captured input: the recorded contents for this workload (`spec.data`, or the workload's own entry in
    `workload.data` when inputs differ per workload), redrawn in their range for later seeds when `vary`."""
    ref = workload.data.get(spec.name) or spec.data
    if not ref:
        raise TaskError(f"input '{spec.name}' is captured but workload '{workload.name}' has no contents for it")
    a = load_array(ref)
    want = {"bfloat16": np.float32, "bool": np.bool_}.get(spec.dtype, spec.dtype)
    a = a.astype(want, copy=False)
    if spec.vary and not first_seed and np.issubdtype(a.dtype, np.floating) and a.size:
        lo, hi = float(np.min(a)), float(np.max(a))
        if np.isfinite(lo) and np.isfinite(hi):
            a = rng.uniform(lo, hi if hi > lo else lo + 1.0, size=a.shape).astype(a.dtype)
    return np.ascontiguousarray(a)


def load_array(ref: str) -> np.ndarray:
    """An array saved as a .npy file path or as "b64:" + base64 of the .npy bytes (no pickles either way)."""
    import base64
    import io

    try:
        if ref.startswith("b64:"):
            return np.load(io.BytesIO(base64.b64decode(ref[4:])), allow_pickle=False)
        return np.load(ref, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise TaskError(f"captured contents {ref[:60]!r} cannot be read ({e})") from None


def encode_array(a: np.ndarray) -> str:
    """The "b64:" form of `load_array`."""
    import base64
    import io

    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return "b64:" + base64.b64encode(buf.getvalue()).decode()


def find_task_file(kernel_file: str | Path, kernel: str | None = None) -> Path | None:
    """The task file that belongs to a kernel: `<stem>.<kernel>.task.toml`, then `<stem>.task.toml`."""
    p = Path(kernel_file)
    names = ([f"{p.stem}.{kernel}.task.toml"] if kernel else []) + [f"{p.stem}.task.toml"]
    for n in names:
        cand = p.with_name(n)
        if cand.exists():
            return cand
    return None
