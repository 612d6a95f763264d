"""install_mlx_shim: makes mx.fast.metal_kernel / mx.fast.cuda_kernel run on the CPU simulator.

After ``install_mlx_shim()`` the kernel objects those functions return take the same call arguments
as MLX's (inputs, template, grid, threadgroup, output_shapes, output_dtypes, init_value, verbose,
stream) and run through ``run_mlx_kernel`` on numpy copies of the inputs, giving back mx.arrays.
The run is eager: the outputs are computed when the kernel object is called (inside ``mx.compile``
tracing it cannot work). Code that imported ``metal_kernel`` by name before the shim keeps MLX's.

Writable inputs: an input whose name ends in ``_inout`` (``mlx_kernels.WRITABLE_SUFFIX``) is mapped
writable, and what the kernel wrote into it is stored back into that mx.array's own memory, as a GPU
kernel writing through a cast pointer would (the in-out convention of ported CUDA kernels; see
translate/emit.py). Other inputs stay read-only: a write to one faults and names it.
"""

from __future__ import annotations

import numpy as np

from .mlx_kernels import WRITABLE_SUFFIX, run_mlx_kernel

_saved: dict[str, object] = {}
_options: dict[str, object] = {"timeout_s": 20.0, "check_races": True, "strict_barriers": True, "asserts": True}
# Allocations a caller's arrays may be slices of (register_allocation): an input whose data lies inside one, past
# its start (MLX passes `x[R:]` as a pointer into x's buffer), runs with the allocation's elements before it, which
# the kernel may read at negative indices, as on a GPU.
allocations: list = []
# When a list: every kernel call appends (kernel name, {buffer name: runtime.OrderDependence}) for the
# elements whose value the thread order or the clock legitimately decides (translate/check.py reads it).
order_log: list | None = None


def _dtype_name(d) -> str:
    return str(d).split(".")[-1]


def register_allocation(x) -> None:
    """Make `x` (an evaluated 1-D mx.array) an allocation whose slices kernels get as pointers inside it."""
    import mlx.core as mx

    mx.eval(x)
    allocations.append(x)


def _address(x) -> int | None:
    try:
        return np.frombuffer(memoryview(x), np.uint8).__array_interface__["data"][0]
    except (TypeError, ValueError, BufferError):
        return None


def _head_of(x) -> np.ndarray | None:
    """The elements of a registered allocation before the (evaluated) mx.array `x`, where `x` lies inside one past its
    start; else None."""
    if not allocations:
        return None
    import mlx.core as mx

    mx.eval(x)
    at = _address(x)
    if at is None:
        return None
    for whole in allocations:
        start = _address(whole)
        if start is None or whole.dtype != x.dtype:
            continue
        off = at - start
        if 0 < off < whole.nbytes and off % whole.itemsize == 0:
            flat = whole.reshape(-1)[: off // whole.itemsize]
            return np.array(flat.view(mx.uint16) if x.dtype == mx.bfloat16 else flat)
    return None


class SimKernel:
    """What the patched ``mx.fast.metal_kernel(...)`` / ``cuda_kernel(...)`` returns."""

    def __init__(self, dialect, name, input_names, output_names, source, header="",
                 ensure_row_contiguous=True, atomic_outputs=False, shared_memory=0, **_):
        self.dialect = dialect
        self.name = name
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.source = source
        self.header = header
        self.atomic_outputs = atomic_outputs
        self.shared_memory = shared_memory
        if not self.output_names:
            raise ValueError(f"[{dialect}_kernel] Must specify at least one output.")

    def __call__(self, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None,
                 init_value=None, verbose=False, stream=None, **_):
        import mlx.core as mx

        if isinstance(inputs, dict):
            inputs = [inputs[n] for n in self.input_names]
        np_inputs, in_dtypes, heads = [], [], {}
        for i, x in enumerate(inputs):
            if isinstance(x, mx.array):
                head = _head_of(x)
                if head is not None:
                    heads[i] = head
                dn = _dtype_name(x.dtype)
                np_inputs.append(np.array(x.astype(mx.float32) if dn == "bfloat16" else x))
                in_dtypes.append(dn)
            else:  # python scalars become 0-d arrays, as MLX does
                a = np.asarray(x)
                if a.dtype == np.float64:
                    a = a.astype(np.float32)
                elif a.dtype == np.int64:
                    a = a.astype(np.int32)
                np_inputs.append(a)
                in_dtypes.append(None)
        if isinstance(output_shapes, dict):
            output_shapes = [output_shapes[n] for n in self.output_names]
        if isinstance(output_dtypes, dict):
            output_dtypes = [output_dtypes[n] for n in self.output_names]
        if isinstance(template, dict):
            template = list(template.items())
        tmpl = []
        for n, v in template or []:
            tmpl.append((n, _dtype_name(v) if isinstance(v, mx.Dtype) else v))
        out_names = [_dtype_name(d) for d in output_dtypes]
        inout: dict = {}
        order: dict = {}
        outs = run_mlx_kernel(self.dialect, self.name, self.input_names, self.output_names,
                              self.source, self.header, np_inputs, tmpl, tuple(grid),
                              tuple(threadgroup), [tuple(s) for s in output_shapes], out_names,
                              init_value=init_value, atomic_outputs=self.atomic_outputs,
                              shared_memory=self.shared_memory, input_dtypes=in_dtypes,
                              inout_results=inout, order_dependence=order, input_heads=heads or None,
                              **_options)
        if order_log is not None:
            order_log.append((self.name, order))
        for nm, x in zip(self.input_names, inputs):
            if nm.endswith(WRITABLE_SUFFIX) and nm in inout and isinstance(x, mx.array):
                _write_back(x, inout[nm])
        result = []
        for a, dn in zip(outs, out_names):
            arr = mx.array(a)
            if dn == "bfloat16":
                arr = arr.astype(mx.bfloat16)
            result.append(arr)
        return result


def _write_back(x, values: np.ndarray) -> None:
    """Store `values` into the memory of the (evaluated) mx.array `x`, in place."""
    import mlx.core as mx

    mx.eval(x)
    if x.dtype == mx.bfloat16:
        view = np.frombuffer(memoryview(x), dtype=np.uint16)
        np.copyto(view, _bf16_bits(values).reshape(view.shape))
        return
    view = np.array(x, copy=False)
    view.flags.writeable = True
    np.copyto(view, np.asarray(values, dtype=view.dtype).reshape(view.shape))


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    from .runtime import f32_to_bf16_bits
    return f32_to_bf16_bits(np.asarray(values, dtype=np.float32))


def install_mlx_shim(timeout_s: float = 20.0, check_races: bool = True, strict_barriers: bool = True) -> None:
    """Patch mx.fast.metal_kernel and mx.fast.cuda_kernel in this process (idempotent).

    `timeout_s` limits each kernel run; `check_races` repeats each run in another thread order
    and rejects results that depend on it; `strict_barriers` (see run_mlx_kernel).
    """
    import mlx.core as mx

    _options.update(timeout_s=timeout_s, check_races=check_races, strict_barriers=strict_barriers)
    if _saved:
        return
    _saved["metal_kernel"] = mx.fast.metal_kernel
    _saved["cuda_kernel"] = mx.fast.cuda_kernel

    def metal_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                     atomic_outputs=False, compile_options=None):
        return SimKernel("metal", name, input_names, output_names, source, header,
                         ensure_row_contiguous, atomic_outputs)

    def cuda_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                    shared_memory=0):
        return SimKernel("cuda", name, input_names, output_names, source, header,
                         ensure_row_contiguous, False, shared_memory)

    mx.fast.metal_kernel = metal_kernel
    mx.fast.cuda_kernel = cuda_kernel


def uninstall_mlx_shim() -> None:
    """Restore MLX's own mx.fast.metal_kernel / cuda_kernel."""
    import mlx.core as mx

    if not _saved:
        return
    mx.fast.metal_kernel = _saved.pop("metal_kernel")
    mx.fast.cuda_kernel = _saved.pop("cuda_kernel")
