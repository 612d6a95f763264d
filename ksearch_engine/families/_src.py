"""Shared pieces for rendering candidate modules: module headers, dialect spellings, simple warp reductions.

Templates emit *text* (a candidate module, docs/CONTRACTS.md). Kernel dimensions are passed as template
constants so one source serves Metal (`mx.fast.metal_kernel`) and CUDA (`mx.fast.cuda_kernel`) alike, and
every knob changes the generated code.
"""
from __future__ import annotations

import hashlib
import json

def tag(tid: str, knobs: dict, kind: str) -> str:
    """A short identifier for a kernel name: the template, the kind and a hash of the knobs."""
    h = hashlib.sha1(json.dumps(knobs, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{tid.replace('.', '_')}_{kind}_{h}"


def header(family: str, tid: str, knobs: dict, kind: str) -> str:
    knob_txt = ", ".join(f"{k}={v}" for k, v in knobs.items()) or "no knobs"
    return f'"""{family} candidate from template {tid} ({kind}): {knob_txt}."""\nimport mlx.core as mx\n'


def kernel_ctor(kind: str, name: str, inputs: list[str], outputs: list[str], src_var: str = "_SOURCE",
                hdr_var: str = "_HEADER", shared_memory: int = 0) -> str:
    """The call that builds the kernel object for `kind` ('metal' or 'cuda')."""
    if kind == "metal":
        return (f"mx.fast.metal_kernel(name={name!r}, input_names={inputs!r}, output_names={outputs!r}, "
                f"source={src_var}, header={hdr_var})")
    if kind == "cuda":
        extra = f", shared_memory={shared_memory}" if shared_memory else ""
        return (f"mx.fast.cuda_kernel(name={name!r}, input_names={inputs!r}, output_names={outputs!r}, "
                f"source={src_var}, header={hdr_var}{extra})")
    raise ValueError(f"kernel kind must be 'metal' or 'cuda', not {kind!r}")


class Dialect:
    """Spellings that differ between Metal (MLX metal_kernel bodies) and CUDA (MLX cuda_kernel bodies)."""

    def __init__(self, kind: str, fast_math: bool = False):
        if kind not in ("metal", "cuda"):
            raise ValueError(f"no kernel dialect for kind {kind!r}")
        self.kind = kind
        self.fast = fast_math

    @property
    def metal(self) -> bool:
        return self.kind == "metal"

    # thread indices (1-D); Metal names are MLX's attribute names, which it declares when the body uses them
    def tid(self) -> str:
        return "(int)thread_position_in_threadgroup.x" if self.metal else "(int)threadIdx.x"

    def bid(self, axis: str = "x") -> str:
        return f"(int)threadgroup_position_in_grid.{axis}" if self.metal else f"(int)blockIdx.{axis}"

    def shared(self, decl: str) -> str:
        return f"threadgroup {decl};" if self.metal else f"__shared__ {decl};"

    def barrier(self) -> str:
        return "threadgroup_barrier(mem_flags::mem_threadgroup);" if self.metal else "__syncthreads();"

    def shfl_xor(self, v: str, off: int | str) -> str:
        return f"simd_shuffle_xor({v}, {off})" if self.metal else f"__shfl_xor_sync(0xffffffffu, {v}, {off})"

    def shfl(self, v: str, lane: str) -> str:
        return f"simd_shuffle({v}, {lane})" if self.metal else f"__shfl_sync(0xffffffffu, {v}, {lane})"

    def exp(self, x: str) -> str:
        if self.metal:
            return f"fast::exp({x})" if self.fast else f"metal::precise::exp({x})"
        return f"__expf({x})" if self.fast else f"expf({x})"

    def rsqrt(self, x: str) -> str:
        return f"metal::rsqrt({x})" if self.metal else f"rsqrtf({x})"

    def fmax(self, a: str, b: str) -> str:
        return f"metal::max({a}, {b})" if self.metal else f"fmaxf({a}, {b})"

    def to_f(self, x: str) -> str:
        return f"static_cast<float>({x})"

    def to_t(self, x: str, t: str = "T") -> str:
        return f"static_cast<{t}>({x})"

    @property
    def neg_inf(self) -> str:
        return "(-3.0e38f)"  # a finite "minus infinity": exp(x - it) stays 0 and no header macro is needed

    def device_ptr(self, t: str = "T") -> str:
        return f"device const {t}*" if self.metal else f"const {t}*"

    def warp_reduce(self, var: str, op: str, width: int) -> list[str]:
        """Butterfly over `width` lanes (a power of two <= 32); every lane ends with the result."""
        lines, off = [], width // 2
        while off >= 1:
            other = self.shfl_xor(var, off)
            lines.append(f"{var} = {self.fmax(var, other)};" if op == "max" else f"{var} += {other};")
            off //= 2
        return lines


def kv_signature(paged: bool) -> tuple[str, str, str, str]:
    """What a decode candidate's kernel() takes and reads off its inputs, contiguous or paged: (its parameters, the
    lines that read the sizes, the MLX inputs, the extra template arguments)."""
    if paged:
        return ("q, k_pages, v_pages, block_table",
                "    Bt, Hq, _, Dh = q.shape\n    Hkv, P = k_pages.shape[1], k_pages.shape[2]\n"
                "    nblk = block_table.shape[1]\n    S = nblk * P\n",
                "[q, k_pages, v_pages, block_table]", '("NBLK", nblk), ("PAGE", P), ')
    return "q, k, v", "    Bt, Hq, _, Dh = q.shape\n    Hkv, S = k.shape[1], k.shape[2]\n", "[q, k, v]", ""
