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
SLACK = 16        # readable zero bytes before each buffer's start (at least)
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
    """`nbytes` of shared memory that end where a guard region begins.

    `head` > 0: the memory of an allocation a kernel's pointer points inside (`d_in + R`, as MLX passes a slice
    `x[R:]`: the kernel's pointer is `addr + head`, and it may read the allocation before it at negative indices).
    Such a buffer starts right after a guard page, so that a read before the allocation's start faults; its end is
    rounded up to a page (the bytes after it read zeros)."""

    def __init__(self, nbytes: int, head: int = 0):
        self.nbytes = int(nbytes)
        self.head = int(head)
        if self.head:
            self.lead = _PAGE   # the guard page before the allocation's start
            self.data_pages = max(1, -(-self.nbytes // _PAGE))
            self.offset = self.lead
        else:
            self.lead = 0
            # SLACK zero bytes before the start: a read just before the array (`g_s[i - 1]` at i = 0, where the
            # program passes a pointer one element into its allocation) reads zeros, as a made-up workload's buffers
            # give
            self.data_pages = max(1, -(-((self.nbytes + 15) // 16 * 16 + SLACK) // _PAGE))
            self.offset = self.data_pages * _PAGE - ((self.nbytes + 15) // 16 * 16)
        self.map = mmap.mmap(-1, self.lead + self.data_pages * _PAGE + _GUARD)
        c = ctypes.c_char.from_buffer(self.map)
        self.base = ctypes.addressof(c)
        del c
        self.addr = self.base + self.offset
        _libc.mprotect(self.base + self.lead + self.data_pages * _PAGE, _GUARD, _PROT_NONE)
        if self.lead:
            _libc.mprotect(self.base, self.lead, _PROT_NONE)

    @property
    def pointer(self) -> int:
        """The address the kernel is given (inside the allocation by `head` bytes)."""
        return self.addr + self.head

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
        _libc.mprotect(self.base + self.lead, self.data_pages * _PAGE, _PROT_READ)

    def read(self, dtype, shape) -> np.ndarray:
        view = np.frombuffer(self.map, np.uint8, self.nbytes, self.offset)
        out = view.copy().view(dtype).reshape(shape)
        del view
        return out

    def read_tail(self, dtype, shape) -> np.ndarray:
        """The contents from the kernel's pointer on (all of it where `head` is 0)."""
        view = np.frombuffer(self.map, np.uint8, self.nbytes - self.head, self.offset + self.head)
        out = view.copy().view(dtype).reshape(shape)
        del view
        return out

    def close(self) -> None:
        try:
            _libc.mprotect(self.base, self.lead + self.data_pages * _PAGE + _GUARD, _PROT_RW)
            self.map.close()
        except (BufferError, ValueError):
            pass


def filled_buffer(arr: np.ndarray, head: np.ndarray | None = None) -> tuple["Buffer", np.ndarray]:
    """A Buffer holding `arr`, and what it holds from its start. With `head` (the allocation's elements before the
    kernel's pointer, in arr's storage dtype: the program passed `d_in + R`) the buffer holds head then arr, and the
    kernel's pointer (Buffer.pointer) is at arr."""
    if head is not None and head.size:
        whole = np.concatenate([np.ascontiguousarray(head).reshape(-1).view(np.uint8),
                                np.ascontiguousarray(arr).reshape(-1).view(np.uint8)])
        b = Buffer(whole.nbytes, head=head.nbytes)
    else:
        whole, b = arr, Buffer(arr.nbytes)
    b.write(whole)
    return b, whole


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
        if hasattr(lib, "ksim_nd_info"):
            lib.ksim_nd_info.argtypes = []
            lib.ksim_nd_info.restype = ctypes.c_void_p
        _libs[str(so)] = lib
    return lib


_KINDS = {3: "deadlock", 4: "fault", 5: "crash", 6: "timeout", 7: "crash", 8: "crash", 9: "crash",
          10: "resource_limit", 11: "assert"}


def describe_address(addr: int, regions) -> str:
    """Which buffer a faulting address belongs to, from (name, Buffer, is_input) triples."""
    for name, b, _is_input in regions:
        # before an array's start, past its slack (`a[i - k]` at small i, where the program passes a pointer k
        # elements into its allocation): the port's array has nothing there
        if b.head and b.base - _BEFORE_START <= addr < b.addr:
            return (f"; the address is {b.addr - addr} bytes before the start of the allocation '{name}' points into "
                    f"('{name}' points {b.head} bytes into it): the kernel reads or writes before the allocation "
                    f"its pointer points into (out of bounds)")
        if b.base - _BEFORE_START <= addr < b.addr:
            return (f"; the address is {b.addr - addr} bytes before the start of '{name}': the kernel reads or writes "
                    f"before the array it is given (a program passing a pointer into its allocation, such as "
                    f"`p + k`, has memory there; a port's array has none)")
    for name, b, is_input in regions:
        if b.addr <= addr < b.addr + b.nbytes:
            return f"; the address is inside input '{name}': kernels must not write into inputs" if is_input else ""
        end = b.addr + b.nbytes
        if end <= addr < b.base + b.lead + b.data_pages * _PAGE + _GUARD:
            return f"; the address is {addr - end} bytes past the end of '{name}' ({b.nbytes} bytes)"
    return ""


_BEFORE_START = 4096   # bytes below a buffer's mapping named "before its start" in a fault


ND_CAP = 1 << 14   # ksim.h's NdInfo table


class RunInfo:
    """What one grid run reports beside memory: the addresses order-dependent atomics (exchange,
    compare-and-swap) touched, the clock reads and the number of atomics (ksim.h's NdInfo)."""

    def __init__(self, addrs=(), sizes=(), clock_reads: int = 0, atomic_ops: int = 0, overflow: bool = False):
        self.addrs = np.asarray(addrs, dtype=np.uint64)
        self.sizes = np.asarray(sizes, dtype=np.uint32)
        self.clock_reads = int(clock_reads)
        self.atomic_ops = int(atomic_ops)
        self.overflow = bool(overflow)


def _run_info(lib) -> RunInfo:
    if not hasattr(lib, "ksim_nd_info"):
        return RunInfo()
    base = lib.ksim_nd_info()
    if not base:
        return RunInfo()
    head = (ctypes.c_int * 4).from_address(base)
    n = max(0, min(int(head[2]), ND_CAP))
    atomic_ops = ctypes.c_ulonglong.from_address(base + 16).value
    addrs = np.ctypeslib.as_array((ctypes.c_ulonglong * ND_CAP).from_address(base + 24))[:n].copy()
    sizes = np.ctypeslib.as_array((ctypes.c_uint * ND_CAP).from_address(base + 24 + 8 * ND_CAP))[:n].copy()
    return RunInfo(addrs, sizes, head[0], atomic_ops, bool(head[1]))


def launch(so: Path, what: str, pointers: list[int], nblocks, tg, total, partial: bool,
           dyn_smem: int = 0, timeout_s: float = 20.0, stack_kb: int | None = None, regions=(),
           reverse: bool | int = False, strict_barriers: bool = True, clock_mode: int = 0) -> RunInfo:
    """Run the grid; raise SimError (with the kernel line of a fault when known) if it fails.
    `reverse`: True runs warps and threadgroups in reverse order, 1 only the warps, 2 only the threadgroups.
    `clock_mode` 1 gives clock()/clock64() another base and rate (the race check's timing-data run)."""
    if stack_kb is None:
        stack_kb = int(os.environ.get("KSEARCH_SIM_STACK_KB", "256") or 256)
    lib = load(so)
    argv = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
    cfg = (ctypes.c_longlong * 16)(*nblocks, *tg, *total, int(partial), int(dyn_smem),
                                   int(timeout_s * 1000), int(stack_kb), 3 if reverse is True else int(reverse),
                                   int(not strict_barriers), int(clock_mode))
    msg = ctypes.create_string_buffer(4096)
    rc = lib.ksim_run(argv, cfg, msg, 4096)
    if rc == 0:
        return _run_info(lib)
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
    if rc == 11 and line is None:   # a failed assert() names its own file and line
        fm = re.search(r" at (.+?) line (\d+) in thread", text)
        if fm:
            file, line = fm.group(1), int(fm.group(2))
    am = re.search(r"address (0x[0-9a-f]+)", text)
    if rc == 4 and am:
        text += describe_address(int(am.group(1), 16), regions)
    raise SimError(f"{what}: {text}", line, file=file, kind=_KINDS.get(rc, "crash"))


def schedule_dependent(a: np.ndarray, b: np.ndarray, dtype_name: str = "") -> str | None:
    """Why two runs' outputs differ beyond float reordering noise, or None when they agree.

    Floats may differ by the rounding of a different summation order (atomics): the tolerance is
    relative to the output's largest magnitude. Integers and booleans must match exactly."""
    bad = differing(a, b, dtype_name)
    if not bad.any():
        return None
    return _first_difference(a, b, bad)


def _first_difference(a: np.ndarray, b: np.ndarray, bad: np.ndarray) -> str:
    idx = np.unravel_index(int(np.argmax(bad)), a.shape) if a.ndim else ()
    x, y = a[idx], b[idx]
    x, y = (x.item(), y.item()) if hasattr(x, "item") and not a.dtype.names else (x, y)
    return f"{int(bad.sum())} elements differ, first at index {tuple(int(i) for i in idx)}: {x!r} vs {y!r}"


def differing(a: np.ndarray, b: np.ndarray, dtype_name: str = "") -> np.ndarray:
    """Elementwise: where two runs' contents differ beyond float reordering noise (see schedule_dependent)."""
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
    elif a.dtype.names:   # structs: an element differs where any byte does
        bad = (np.ascontiguousarray(a).view(np.uint8).reshape(a.shape + (-1,))
               != np.ascontiguousarray(b).view(np.uint8).reshape(b.shape + (-1,))).any(axis=-1)
    else:
        bad = a != b
    return np.asarray(bad, dtype=bool).reshape(a.shape)


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


def run_both_orders(launch_once, check_races: bool, timeout_s: float) -> list[RunInfo]:
    """Call launch_once(reverse, timeout, clock_mode) forward, then (race check) reversed with a bounded
    time, and, where the kernel read the clock, forward once more with another clock (its timing data).
    Returns each run's RunInfo (launch_once returns it, or None for a run that launched nothing)."""
    import time

    t0 = time.monotonic()
    infos = [launch_once(False, timeout_s, 0) or RunInfo()]
    if not check_races:
        return infos
    forward = time.monotonic() - t0
    try:
        infos.append(launch_once(True, reverse_timeout(timeout_s, forward), 0) or RunInfo())
    except SimError as e:
        if e.kind in ("timeout", "deadlock"):
            raise SimError(e.message + REVERSE_HANG, e.line, file=e.file, kind="race") from None
        raise
    if infos[0].clock_reads:
        infos.append(launch_once(False, reverse_timeout(timeout_s, forward), 1) or RunInfo())
    return infos


def _which_order(relaunch, runs, k: int, rest: np.ndarray, dt: str) -> str:
    """Whether reversing only the threadgroups changes the racing elements (one more run), as a clause."""
    if relaunch is None:
        return ""
    try:
        relaunch(2)
    except SimError:
        return ""
    blocks = runs[-1][k]
    return BLOCK_ORDER if (differing(runs[0][k], blocks, dt) & rest).any() else WARP_ORDER


class OrderDependence:
    """Elements of one buffer whose value legitimately depends on the thread order or on timing:
    `clock` holds clock()/clock64() readings (they changed with the clock alone), `atomic` was last
    decided by an order-dependent atomic (exchange, compare-and-swap) and differs between schedules;
    `multiset`: the schedules left the same values in another order (slots taken through atomic
    counters), so the buffer is compared as a multiset."""

    def __init__(self, clock: np.ndarray, atomic: np.ndarray, multiset: bool = False):
        self.clock = np.asarray(clock, dtype=bool).reshape(-1)
        self.atomic = np.asarray(atomic, dtype=bool).reshape(-1)
        self.multiset = bool(multiset)

    def mask(self) -> np.ndarray:
        """Elements that cannot be compared by position."""
        return self.clock | self.atomic

    def describe(self, name: str) -> str:
        parts = []
        if self.clock.any():
            parts.append(f"{int(self.clock.sum())} element(s) hold clock()/clock64() readings (timing, not "
                         f"results)")
        if self.atomic.any():
            parts.append(f"{int(self.atomic.sum())} element(s) are left by whichever thread's atomicExch/atomicCAS "
                         f"came last (first at index {int(np.argmax(self.atomic))})")
        if self.multiset:
            parts.append("the threads' atomic order decides where each value goes: compared as a multiset")
        return f"buffer '{name}': " + "; ".join(parts)


def _touched(b: "Buffer", arr: np.ndarray, infos) -> np.ndarray:
    """Elements of `arr` (the contents of `b`) that an order-dependent atomic touched in any run."""
    mask = np.zeros(arr.size, dtype=bool)
    item = max(1, arr.dtype.itemsize)
    for info in infos:
        if not info.addrs.size:
            continue
        a = info.addrs.astype(np.int64) - int(b.pointer)
        end = a + info.sizes.astype(np.int64)
        hit = (end > 0) & (a < arr.size * item)
        for lo, hi in zip(a[hit], end[hit]):
            mask[max(0, lo // item):min(arr.size, -(-hi // item))] = True
    return mask.reshape(arr.shape)


def _same_multiset(a: np.ndarray, c: np.ndarray, dt: str) -> bool:
    x, y = a.reshape(-1), c.reshape(-1)
    if x.dtype.names:
        def rows(v):
            return sorted(map(bytes, np.ascontiguousarray(v).view(np.uint8).reshape(v.size, v.dtype.itemsize)))
        return rows(x) == rows(y)
    if dt == "bfloat16":
        x, y = bf16_bits_to_f32(x), bf16_bits_to_f32(y)
    return not differing(np.sort(x), np.sort(y), "" if dt == "bfloat16" else dt).any()


BLOCK_ORDER = (" when only the threadgroups' (blocks') order is reversed: one threadgroup reads what another "
               "writes, or two write different values to one place; GPUs run threadgroups concurrently and in any "
               "order, so it races there too (or the workload breaks an assumption of the kernel: its sizes, block "
               "shape, or data such as unique indices)")
WARP_ORDER = (" when the warps inside each threadgroup run in reverse order (the threadgroups' order alone does not "
              "change it): a missing threadgroup_barrier / __syncthreads, or two threads writing different values "
              "to one place")


def judge_orders(what: str, bufs, runs, infos, relaunch=None) -> dict[str, OrderDependence]:
    """The race check over the runs of run_both_orders. bufs: [(name, label, Buffer, dtype name)] in the
    order of each run's arrays; runs[0] forward, runs[1] reversed, runs[2] (when present) forward with
    another clock. An element that differs between the schedules is a race unless an order-dependent
    atomic decided it, it holds timing data, or the whole buffer holds the same values in another order
    after atomics ran. Raises SimError(kind="race"); returns {name: OrderDependence} of the allowed.
    `relaunch(reverse)` (launch_once) runs one more schedule to say whether a race is between threadgroups."""
    atomic_ops = max(i.atomic_ops for i in infos[:2]) if infos else 0
    out: dict[str, OrderDependence] = {}
    for k, (nm, label, b, dt) in enumerate(bufs):
        a, c = runs[0][k], runs[1][k]
        diff = differing(a, c, dt)
        clock = differing(a, runs[2][k], dt) if len(runs) > 2 else np.zeros(a.shape, dtype=bool)
        atom = _touched(b, a, infos) if any(i.addrs.size for i in infos) else np.zeros(a.shape, dtype=bool)
        rest = diff & ~(atom | clock)
        multiset = False
        if rest.any():
            # slots taken through atomic counters: the same values elsewhere, and at least one atomic per warp's
            # worth of moved elements (a sort whose barrier is missing also permutes, without atomics doing it)
            if atomic_ops * 32 >= int(rest.sum()) and not clock.any() and _same_multiset(a, c, dt):
                multiset = True
            else:
                which = _which_order(relaunch, runs, k, rest, dt)
                raise SimError(f"{what}: {label} '{nm}': " + (
                    f"the result depends on the order in which threads run: {_first_difference(a, c, rest)}{which}"
                    if which else f"{RACE_HINT}; {_first_difference(a, c, rest)}"), kind="race")
        if clock.any() or (diff & atom).any() or multiset:
            out[nm] = OrderDependence(clock, diff & atom, multiset)
    return out
