"""What a launch capture records: the typed boundary between the CPU CUDA runtime (capture.py), the port's
checks and Optimize's tasks.

A capture runs the user's own host program (its ``main()``) on the CPU with ksearch's CUDA runtime and records
every kernel launch: geometry, scalar arguments, and each buffer argument's allocation, dtype and contents
before and after the kernel. Buffer contents live next to the manifest as ``.npy`` files (``before``/``after``
name them, relative to ``Capture.dir``), so a capture of large buffers does not travel through JSON.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, PrivateAttr


# a scalar argument can be NaN or infinite (srad's q0sqr of an image region with no variance): written as JSON's
# NaN / Infinity constants (Python's json and pydantic read them), never dropped to null
_KEEP_NAN = ConfigDict(ser_json_inf_nan="constants")


class ArgRecord(BaseModel):
    """One argument of a launch, in the kernel's parameter order."""
    model_config = _KEEP_NAN
    name: str                                   # the kernel's parameter name
    ctype: str                                  # the parameter's C type as written ("const float *", "int")
    kind: Literal["buffer", "scalar", "struct", "null", "unknown_pointer"]
    # scalar: its value; struct (passed by value): its bytes as hex
    value: int | float | bool | None = None
    raw_hex: str | None = None
    # struct: the argument's own type as the program passed it (`std::integral_constant<bool, true>` for a
    # `std::bool_constant<B>` parameter): what decides template arguments deduced from it
    arg_type: str | None = None
    # buffer: the allocation it points into, and where
    buffer: int | None = None                   # allocation id (stable within one capture)
    offset_bytes: int = 0                       # the pointer's offset into its allocation
    dtype: str | None = None                    # numpy dtype name of the pointee ("float32", "uint8", ...)
    elem_bytes: int | None = None               # sizeof(pointee) in C (a float4 buffer: 16, dtype float32)
    nbytes: int | None = None                   # bytes from the pointer to the end of its allocation
    memory: Literal["device", "managed", "host_mapped", "symbol"] = "device"
    before: str | None = None                   # .npy file: contents (from the pointer on) before the launch
    after: str | None = None                    # .npy file: contents after, when the kernel changed them
    written: bool = False                       # the contents changed during the launch
    # a pointer inside its allocation (offset_bytes > 0: `d_in + R`): .npy files of the allocation's elements before
    # the pointer (offset_bytes of them in bytes), before the launch and after it when the kernel changed them; a
    # kernel may read them at negative indices (a stencil's halo). None where the capture did not record them (an
    # offset of no whole elements, over the byte budget, or a capture made before they were recorded)
    head: str | None = None
    head_after: str | None = None
    # a buffer a struct argument points to (LaunchRecord.embedded): that argument's index, and the byte offset of
    # the pointer in the struct (the struct itself for a by-value one, the first struct of a buffer otherwise)
    of_arg: int | None = None
    at: int | None = None


class SymbolRecord(BaseModel):
    """A ``__constant__`` / ``__device__`` variable of the file, as the kernel saw it."""
    name: str
    nbytes: int
    before: str
    after: str | None = None
    written: bool = False


class LaunchRecord(BaseModel):
    model_config = _KEEP_NAN
    index: int                                  # launch order in the program (0-based, all kernels)
    kernel: str                                 # the kernel's name, without template arguments
    template_args: list[str] = []               # C++ text of the template arguments ("float", "256")
    line: int | None = None                     # 1-based line of the <<<...>>> launch in `file`
    file: str | None = None                     # file holding the launch
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int = 0                         # dynamic shared memory, bytes
    args: list[ArgRecord]
    embedded: list[ArgRecord] = []              # the buffers the struct arguments' pointer fields point to
    symbols: list[SymbolRecord] = []
    too_large: bool = False                     # contents not recorded (over the capture's byte budget)
    sim_error: str | None = None                # the simulator stopped in this launch (message names the line)
    seconds: float | None = None                # CPU time the capture's run of this launch took
    # recorded in a run of the program at smaller sizes (capture_scale.py): what was changed, in words
    scaled: str | None = None


class CaptureNote(BaseModel):
    """Something the capture stubbed, skipped or could not do: one line a user can act on."""
    # input: a file the program could not open for reading; argv: the command line the capture chose
    # scaled: launches recorded from a second run at smaller sizes; module: kernels a program loads at run time
    # (driver API, NVRTC) compiled into the capture, and the marker files standing for modules that are not there
    kind: Literal["stubbed", "skipped", "gpu_only", "limit", "program", "include", "input", "argv", "scaled", "module"]
    message: str
    file: str | None = None
    line: int | None = None


class Capture(BaseModel):
    model_config = _KEEP_NAN
    file: str                                   # the .cu file whose program ran
    dir: str                                    # folder holding the .npy contents
    argv: list[str] = []
    defines: dict[str, str] = {}
    exit_code: int | None = None
    status: Literal["ok", "partial", "failed"] = "ok"   # partial: stopped at a budget with launches recorded
    error: str | None = None                    # why it failed or stopped (file, line, what to do)
    launches: list[LaunchRecord] = []
    notes: list[CaptureNote] = []
    stdout_tail: str = ""
    seconds: float = 0.0
    launch_counts: dict[str, int] = {}          # launches run per kernel (recorded or not)
    # the run stopped at a launch too big or too slow to record, to be run again smaller (not saved)
    _stopped: dict | None = PrivateAttr(default=None)

    def kernels(self) -> list[str]:
        seen: list[str] = []
        for ln in self.launches:
            if ln.kernel not in seen:
                seen.append(ln.kernel)
        return seen

    def launches_of(self, kernel: str) -> list[LaunchRecord]:
        return [ln for ln in self.launches if ln.kernel == kernel]

    def load(self, name: str | None) -> np.ndarray | None:
        """The array saved under `name` (a before/after entry), or None."""
        return None if name is None else np.load(Path(self.dir) / name, allow_pickle=False)

    def save(self) -> Path:
        p = Path(self.dir) / "capture.json"
        p.write_text(self.model_dump_json(indent=1))
        return p

    @classmethod
    def read(cls, path: str | Path) -> "Capture":
        p = Path(path)
        if p.is_dir():
            p = p / "capture.json"
        return cls.model_validate_json(p.read_text())


__all__ = ["ArgRecord", "SymbolRecord", "LaunchRecord", "CaptureNote", "Capture"]
