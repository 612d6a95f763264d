"""Runs a compiled kernel library: argument buffers with guard pages, the launch, its failures.

Buffers live in shared anonymous mappings because the grid runs in a forked child (see ksim.h):
what the child writes is visible here, and a crash or hang of the child cannot take this process
down. Each buffer ends exactly at a PROT_NONE page, so reading or writing past its end faults and
is reported; inputs are mapped read-only, so a kernel that writes into an input faults too.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
from pathlib import Path

import numpy as np

from .build import source_line_of_pc
from .errors import SimError

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int
_PROT_NONE, _PROT_READ, _PROT_RW = 0, 1, 3
_PAGE = mmap.PAGESIZE
_GUARD = 1 << 20  # bytes of PROT_NONE after each buffer: overruns of up to 1 MiB fault
_libs: dict[str, ctypes.CDLL] = {}

# dtype name -> numpy storage dtype (bfloat16 travels as its uint16 bit pattern)
STORAGE = {
    "float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "float64": np.float64,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_,
}


def dtype_name(d) -> str:
    """Normalize numpy dtypes, MLX dtypes and strings ("float32", "mlx.core.float16", "bfloat16")."""
    if isinstance(d, str):
        s = d
    else:
        try:
            s = np.dtype(d).name
        except TypeError:
            s = str(d)
    s = s.split(".")[-1].lower()
    s = {"bool_": "bool", "half": "float16", "float": "float32", "bf16": "bfloat16"}.get(s, s)
    if s not in STORAGE:
        raise SimError(f"dtype {d!r} is not supported by the CPU simulator "
                       f"(supported: {', '.join(STORAGE)})", kind="usage")
    return s


def f32_to_bf16_bits(a: np.ndarray) -> np.ndarray:
    u = np.asarray(a, dtype=np.float32, order="C").view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_bits_to_f32(a: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_storage(a, name: str) -> np.ndarray:
    """A C-contiguous array in the storage dtype of `name` (bfloat16: floats are rounded to bits)."""
    a = np.asarray(a)
    if name == "bfloat16":
        if a.dtype == np.uint16:
            return np.asarray(a, order="C")
        return f32_to_bf16_bits(a.astype(np.float32))
    return np.asarray(a, dtype=STORAGE[name], order="C")


class Buffer:
    """`nbytes` of shared memory that end where a guard region begins."""

    def __init__(self, nbytes: int):
        self.nbytes = int(nbytes)
        self.data_pages = max(1, -(-self.nbytes // _PAGE))
        self.map = mmap.mmap(-1, self.data_pages * _PAGE + _GUARD)
        c = ctypes.c_char.from_buffer(self.map)
        self.base = ctypes.addressof(c)
        del c
        self.offset = self.data_pages * _PAGE - ((self.nbytes + 15) // 16 * 16)
        self.addr = self.base + self.offset
        _libc.mprotect(self.base + self.data_pages * _PAGE, _GUARD, _PROT_NONE)

    def write(self, arr: np.ndarray) -> None:
        raw = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
        assert raw.size == self.nbytes
        view = np.frombuffer(self.map, np.uint8, self.nbytes, self.offset)
        view[:] = raw
        del view

    def fill_byte(self, b: int) -> None:
        view = np.frombuffer(self.map, np.uint8, self.nbytes, self.offset)
        view[:] = b
        del view

    def read_only(self) -> None:
        _libc.mprotect(self.base, self.data_pages * _PAGE, _PROT_READ)

    def read(self, dtype, shape) -> np.ndarray:
        view = np.frombuffer(self.map, np.uint8, self.nbytes, self.offset)
        out = view.copy().view(dtype).reshape(shape)
        del view
        return out

    def close(self) -> None:
        try:
            _libc.mprotect(self.base, self.data_pages * _PAGE + _GUARD, _PROT_RW)
            self.map.close()
        except (BufferError, ValueError):
            pass


class Scalars:
    """Slots for scalar kernel arguments: each holds the value as int64 and as double."""

    class Slot(ctypes.Structure):
        _fields_ = [("i", ctypes.c_longlong), ("d", ctypes.c_double)]

    def __init__(self):
        self.slots: list[Scalars.Slot] = []

    def add(self, v) -> int:
        s = Scalars.Slot()
        if isinstance(v, (bool, np.bool_)):
            s.i, s.d = int(v), float(v)
        elif isinstance(v, (int, np.integer)):
            s.i, s.d = int(v), float(v)
        else:
            f = float(v)
            s.d = f
            s.i = int(f) if np.isfinite(f) else 0
        self.slots.append(s)
        return ctypes.addressof(s)


def load(so: Path) -> ctypes.CDLL:
    lib = _libs.get(str(so))
    if lib is None:
        lib = ctypes.CDLL(str(so))
        lib.ksim_run.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong),
                                 ctypes.c_char_p, ctypes.c_int]
        lib.ksim_run.restype = ctypes.c_int
        _libs[str(so)] = lib
    return lib


_KINDS = {3: "deadlock", 4: "fault", 5: "crash", 6: "timeout", 7: "crash", 8: "crash", 9: "crash",
          10: "resource_limit"}


def describe_address(addr: int, regions) -> str:
    """Which buffer a faulting address belongs to, from (name, Buffer, is_input) triples."""
    for name, b, is_input in regions:
        if b.addr <= addr < b.addr + b.nbytes:
            return f"; the address is inside input '{name}': kernels must not write into inputs" if is_input else ""
        end = b.addr + b.nbytes
        if end <= addr < b.base + b.data_pages * _PAGE + _GUARD:
            return f"; the address is {addr - end} bytes past the end of '{name}' ({b.nbytes} bytes)"
    return ""


def launch(so: Path, what: str, pointers: list[int], nblocks, tg, total, partial: bool,
           dyn_smem: int = 0, timeout_s: float = 20.0, stack_kb: int | None = None, regions=(),
           reverse: bool = False, strict_barriers: bool = True) -> None:
    """Run the grid; raise SimError (with the kernel line of a fault when known) if it fails."""
    if stack_kb is None:
        stack_kb = int(os.environ.get("KSEARCH_SIM_STACK_KB", "256") or 256)
    lib = load(so)
    argv = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
    cfg = (ctypes.c_longlong * 15)(*nblocks, *tg, *total, int(partial), int(dyn_smem),
                                   int(timeout_s * 1000), int(stack_kb), int(reverse),
                                   int(not strict_barriers))
    msg = ctypes.create_string_buffer(4096)
    rc = lib.ksim_run(argv, cfg, msg, 4096)
    if rc == 0:
        return
    text = msg.value.decode("utf-8", "replace")
    line = file = None
    m = re.search(r"\s*\[(pc_offset|site)=0x([0-9a-f]+)\]", text)
    if m:
        # a return address (site) points after the call: look up the byte before it
        pc = int(m.group(2), 16) - (1 if m.group(1) == "site" else 0)
        line, file = source_line_of_pc(so, pc)
        text = text[:m.start()] + text[m.end():]
        if line is not None and m.group(1) == "site":
            text = text.replace("threadgroup barrier (__syncthreads/threadgroup_barrier)",
                                f"threadgroup barrier at {file} line {line}", 1)
    am = re.search(r"address (0x[0-9a-f]+)", text)
    if rc == 4 and am:
        text += describe_address(int(am.group(1), 16), regions)
    raise SimError(f"{what}: {text}", line, file=file, kind=_KINDS.get(rc, "crash"))


def schedule_dependent(a: np.ndarray, b: np.ndarray, dtype_name: str = "") -> str | None:
    """Why two runs' outputs differ beyond float reordering noise, or None when they agree.

    Floats may differ by the rounding of a different summation order (atomics): the tolerance is
    relative to the output's largest magnitude. Integers and booleans must match exactly."""
    if dtype_name == "bfloat16":
        a, b = bf16_bits_to_f32(a).reshape(a.shape), bf16_bits_to_f32(b).reshape(b.shape)
        tol = 1e-2
    else:
        tol = {2: 2e-3, 4: 1e-5, 8: 1e-9}.get(a.dtype.itemsize, 1e-5)
    if a.dtype.kind == "f":
        af, bf = a.astype(np.float64), b.astype(np.float64)
        finite = np.abs(af[np.isfinite(af)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        bad = ~np.isclose(af, bf, rtol=tol, atol=tol * scale, equal_nan=True)
    else:
        bad = a != b
    if not bad.any():
        return None
    idx = np.unravel_index(int(np.argmax(bad)), a.shape) if a.ndim else ()
    return f"{int(bad.sum())} elements differ, first at index {tuple(int(i) for i in idx)}: {a[idx]!r} vs {b[idx]!r}"


RACE_HINT = ("the result depends on the order in which threads run (a missing threadgroup_barrier / "
             "__syncthreads between writing and reading shared memory, a read of another threadgroup's "
             "output, or an order-dependent atomic). Two schedules were compared: warps and "
             "threadgroups forward, then in reverse")


def reverse_timeout(timeout_s: float, forward_s: float) -> float:
    """Time allowed to the race check's reversed run: it does the same work as the forward run."""
    return min(timeout_s, max(2.0, 10.0 * forward_s))


REVERSE_HANG = ("; this happened only when threadgroups ran in reverse order: the kernel waits for "
                "another threadgroup's progress (e.g. spins on a flag an earlier threadgroup sets), "
                "which GPUs do not guarantee; take the order from an atomic counter instead of the "
                "threadgroup index")


def run_both_orders(launch_once, check_races: bool, timeout_s: float) -> None:
    """Call launch_once(reverse, timeout) forward, then (race check) reversed with a bounded time."""
    import time

    t0 = time.monotonic()
    launch_once(False, timeout_s)
    if not check_races:
        return
    forward = time.monotonic() - t0
    try:
        launch_once(True, reverse_timeout(timeout_s, forward))
    except SimError as e:
        if e.kind in ("timeout", "deadlock"):
            raise SimError(e.message + REVERSE_HANG, e.line, file=e.file, kind="race") from None
        raise
