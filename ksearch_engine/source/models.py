"""Data types describing kernels found in source text (what `find_kernels` returns).

Positions are 0-based and LSP-style: `line` and `character` (UTF-16 code units), plus
UTF-8 byte offsets where an edit needs them.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Language = Literal["cuda", "metal", "mlx-metal", "mlx-cuda"]


class Position(BaseModel):
    line: int
    character: int


class Range(BaseModel):
    start: Position
    end: Position


class Param(BaseModel):
    """One function parameter, e.g. `const float* __restrict__ x` or `device float* y [[buffer(1)]]`."""
    name: str
    type: str                      # base type without qualifiers / pointer: "float", "T", "float4"
    qualifiers: list[str] = []     # const, __restrict__, device, threadgroup, constant, thread, volatile
    pointer: bool = False          # `*` (any depth) or array parameter
    reference: bool = False        # `&`
    attribute: str | None = None   # Metal attribute text, e.g. "[[buffer(0)]]"
    text: str = ""                 # the declaration as written

    @property
    def is_const(self) -> bool:
        return "const" in self.qualifiers


class TemplateParam(BaseModel):
    name: str
    kind: str                      # "typename" or the value type ("int", "bool", ...)
    default: str | None = None
    text: str = ""


class SharedDecl(BaseModel):
    """A `__shared__` (CUDA) or `threadgroup` (Metal) array declared in a kernel body."""
    name: str
    type: str
    sizes: list[str] = []          # one expression per dimension; [] or [""] for `extern ... x[]`
    dynamic: bool = False          # `extern __shared__ T x[];`
    line: int = 0
    text: str = ""


class LaunchSite(BaseModel):
    """`kernel<targs><<<grid, block, smem, stream>>>(args)` in host code."""
    kernel: str
    template_args: list[str] = []
    grid: str
    block: str
    shared_mem: str | None = None
    stream: str | None = None
    args: list[str] = []
    line: int
    range: Range
    byte_range: tuple[int, int] | None = None
    host_function: str | None = None
    host_byte_range: tuple[int, int] | None = None


class KernelInfo(BaseModel):
    """A kernel (`__global__`, Metal `kernel`, or an MLX custom-kernel source) or a device helper."""
    name: str
    language: Language
    qualifier: str                 # "__global__", "__device__", "kernel", "metal_kernel", "cuda_kernel", ""
    return_type: str = "void"
    params: list[Param] = []
    template_params: list[TemplateParam] = []
    shared: list[SharedDecl] = []
    launches: list[LaunchSite] = []
    byte_range: tuple[int, int]    # signature (template line included) through the closing brace
    range: Range
    name_range: Range
    body: str = ""                 # text between the braces (for MLX sources: the source string)
    body_byte_range: tuple[int, int] | None = None
    text: str = ""                 # the whole definition as written
    launch_bounds: str | None = None
    namespaces: list[str] = []     # enclosing `namespace a { namespace b {` as ["a", "b"] ("" for an anonymous one)
    # MLX custom kernels only:
    input_names: list[str] = []
    output_names: list[str] = []


class Diagnostic(BaseModel):
    message: str
    line: int                      # 0-based
    severity: Literal["error", "warning", "info"] = "error"


class ParseResult(BaseModel):
    language: Language | Literal["python", "unknown"]
    kernels: list[KernelInfo] = []
    helpers: list[KernelInfo] = []
    diagnostics: list[Diagnostic] = []
    path: str | None = None
    source: str = Field(default="", repr=False)
    # #define lines and other file-scope text a kernel body may rely on (macros, constants)
    preamble: list[str] = []

    def kernel(self, name: str) -> KernelInfo | None:
        return next((k for k in self.kernels if k.name == name), None)
