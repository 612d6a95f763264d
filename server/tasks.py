"""Which benchmark task a kernel has (a `*.task.toml` next to it, or a recognized family), and the text of a
new task file with defaults read from the kernel's signature (for 'Create benchmark task').
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ksearch_engine.source import KernelInfo
from ksearch_engine.task import find_task_file

_DTYPES = {"float": "float32", "half": "float16", "__half": "float16", "bfloat": "bfloat16",
           "__nv_bfloat16": "bfloat16", "bfloat16_t": "bfloat16", "int": "int32", "int32_t": "int32",
           "uint": "uint32", "uint32_t": "uint32", "unsigned": "uint32", "int64_t": "int64", "long": "int64",
           "bool": "bool", "float16_t": "float16", "double": "float32"}
_SCALARS = {"int", "int32_t", "uint", "uint32_t", "unsigned", "size_t", "int64_t", "long", "float", "double"}


@dataclass
class TaskInfo:
    task_file: Path | None
    family: str | None

    @property
    def has_task(self) -> bool:
        return self.task_file is not None or self.family is not None


class TaskFinder:
    """Caches family recognition per (file, kernel, text hash): code lenses ask on every keystroke."""

    def __init__(self) -> None:
        self._families: dict[tuple[str, str, str], str | None] = {}

    def find(self, path: str, kernel: str, text_hash: str = "") -> TaskInfo:
        tf = find_task_file(path, kernel)
        if tf is not None:
            return TaskInfo(tf, None)
        key = (path, kernel, text_hash)
        if key not in self._families:
            self._families[key] = _guess_family(path, kernel)
        return TaskInfo(None, self._families[key])


def _guess_family(path: str, kernel: str) -> str | None:
    try:
        from ksearch_engine.cli import guess_family
        return guess_family(Path(path), kernel)
    except Exception:  # noqa: BLE001 - an engine without families yet: no family, the user writes a task
        return None


def task_file_path(source: str | Path, kernel: str) -> Path:
    p = Path(source)
    return p.with_name(f"{p.stem}.{kernel}.task.toml")


def _dtype(type_name: str) -> str:
    return _DTYPES.get(type_name.strip(), "float32")


def benchmark_task_text(source: str | Path, k: KernelInfo) -> str:
    """A task file for kernel `k`, with inputs and dims guessed from its signature, for the user to edit."""
    ptrs = [p for p in k.params if p.pointer]
    scalars = [p for p in k.params if not p.pointer and p.type.strip() in _SCALARS]
    dims = [p.name for p in scalars if re.match(r"^[A-Za-z_]\w*$", p.name)
            and p.type.strip() not in ("float", "double")] or ["n"]
    inputs = [p for p in ptrs if p.is_const] or ptrs[:-1]
    outputs = [p for p in ptrs if p not in inputs] or ptrs[-1:]
    if k.input_names or k.output_names:      # MLX custom kernels name them
        inputs = [p for p in k.params if p.name in k.input_names] or inputs
        outputs = [p for p in k.params if p.name in k.output_names] or outputs
    shape = ", ".join(f'"{d}"' for d in dims)
    arg_names = ", ".join(p.name for p in inputs) or "x"
    lines = [
        f"# Benchmark task for kernel '{k.name}' in {Path(source).name}.",
        "# Written by ksearch from the kernel's signature: CHECK every shape, dtype and the reference below,",
        "# then run 'Optimize kernel' again. Dims are named; each workload gives them values.",
        f'name = "{k.name}"',
        'family = "custom"',
        f'kernel_name = "{k.name}"',
        f'source_file = "{Path(source).name}"',
        f'outputs = [{", ".join(repr(p.name).replace(chr(39), chr(34)) for p in outputs) or chr(34) + "out" + chr(34)}]',
        "",
    ]
    out_names = ", ".join(p.name for p in outputs) or "out"
    lines += [
        "# reference(*inputs) in MLX operations: what the kernel computes. Replace the body.",
        "reference = '''",
        "import mlx.core as mx",
        "",
        f"def reference({arg_names}):",
        f'    raise NotImplementedError("write the reference for {k.name} in {Path(source).name}: '
        f'return {out_names} computed with MLX ops")',
        "'''",
        "",
    ]
    for p in inputs or []:
        lines += ["[[inputs]]", f'name = "{p.name}"', f"shape = [{shape}]", f'dtype = "{_dtype(p.type)}"',
                  'init = "normal"', ""]
    if not inputs:
        lines += ["[[inputs]]", 'name = "x"', f"shape = [{shape}]", 'dtype = "float32"', 'init = "normal"', ""]
    small = ", ".join(f"{d} = 64" for d in dims)
    big = ", ".join(f"{d} = 1024" for d in dims)
    lines += ["[[workloads]]", 'name = "small"', f"dims = {{ {small} }}", "",
              "[[bench_workloads]]", 'name = "large"', f"dims = {{ {big} }}", ""]
    return "\n".join(lines)
