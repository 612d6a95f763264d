"""run_mlx_kernel: runs a kernel written for mx.fast.metal_kernel / mx.fast.cuda_kernel on the CPU.

The function signature is generated the way MLX 0.32 generates it:
* Metal (mlx/backend/metal/custom_kernel.cpp): template parameters become ``template <typename T, int
  N, bool B>``; inputs are ``const device T* name`` (``const constant`` when the array has fewer than
  8 elements, ``T&`` for 0-d arrays); ``name_shape`` (``const constant int*``), ``name_strides``
  (``const constant int64_t*``) and ``name_ndim`` (``const constant int&``) exist when the source
  mentions them; outputs are ``device T* name`` (``device atomic<T>*`` with atomic_outputs); Metal
  attributes such as ``thread_position_in_grid`` are parameters only when the source mentions them.
  The grid is in threads; threadgroups at the edge are partial (dispatchThreads), and the threadgroup
  is clipped to the grid (MLX passes min(threadgroup, grid)).
* CUDA (mlx/backend/cuda/custom_kernel.cpp): ``__global__ void name(const T* in, const Shape in_shape,
  ..., T* out)`` inside ``namespace mlx::core::cu``; template arguments become ``constexpr int N``,
  ``constexpr bool B`` and ``using T = ...`` at the top of the body; the grid is in threads and MLX
  launches ceil(grid / threadgroup) full blocks; ``shared_memory`` bytes of dynamic shared memory.

Types: float16 is ``float16_t`` (Metal) / ``__half`` (CUDA), bfloat16 is ``bfloat16_t`` /
``__nv_bfloat16``. numpy has no bfloat16: a bfloat16 input may be given as float32 (rounded to
bfloat16) or as uint16 bit patterns (name it in ``input_dtypes``); bfloat16 outputs come back as
float32 arrays holding the exact bfloat16 values. Outputs without ``init_value`` start filled with
0xFF bytes (NaN for floats, -1 for signed ints) so unwritten elements show up.

Inputs are mapped read-only (a write faults and names the array), except **writable inputs**: an input
whose name ends in ``_inout`` (``WRITABLE_SUFFIX``), or one named in ``writable_inputs``. A kernel may
write those through a cast (in-out buffers of ported CUDA kernels: see translate/emit.py); their final
contents come back in ``inout_results`` when a dict is given, and the race check covers them too.
"""

from __future__ import annotations

import numpy as np

from . import build as _build
from . import runtime as rt
from .errors import SimError
from .preprocess import prepare

METAL_TYPES = {"float32": "float", "float16": "float16_t", "bfloat16": "bfloat16_t", "bool": "bool",
               "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
               "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
               "float64": "double"}
CUDA_TYPES = dict(METAL_TYPES, float16="__half", bfloat16="__nv_bfloat16")
MAX_CONSTANT_ARRAY_SIZE = 8
WRITABLE_SUFFIX = "_inout"

# (attribute, type, C++ expression giving its value for the running fiber)
METAL_ATTRIBUTES = [
    ("dispatch_quadgroups_per_threadgroup", "uint", "(ksim::g.tg_req.x * ksim::g.tg_req.y * ksim::g.tg_req.z + 3) / 4"),
    ("dispatch_simdgroups_per_threadgroup", "uint", "(ksim::g.tg_req.x * ksim::g.tg_req.y * ksim::g.tg_req.z + 31) / 32"),
    ("dispatch_threads_per_threadgroup", "uint3", "ksim::g.tg_req"),
    ("grid_origin", "uint3", "uint3(0u, 0u, 0u)"),
    ("grid_size", "uint3", "ksim::g.total"),
    ("quadgroup_index_in_threadgroup", "uint", "ksim::cur->lin / 4"),
    ("quadgroups_per_threadgroup", "uint", "(unsigned)(ksim::g.n + 3) / 4"),
    ("simdgroup_index_in_threadgroup", "uint", "ksim::cur->warp"),
    ("simdgroups_per_threadgroup", "uint", "(unsigned)(ksim::g.n + 31) / 32"),
    ("thread_execution_width", "uint", "32u"),
    ("thread_index_in_quadgroup", "uint", "ksim::cur->lin % 4"),
    ("thread_index_in_simdgroup", "uint", "ksim::cur->lane"),
    ("thread_index_in_threadgroup", "uint", "ksim::cur->lin"),
    ("thread_position_in_grid", "uint3", "ksim::grid_thread_pos()"),
    ("thread_position_in_threadgroup", "uint3", "ksim::cur->tid"),
    ("threadgroup_position_in_grid", "uint3", "ksim::g.block"),
    ("threadgroups_per_grid", "uint3", "ksim::g.nblocks"),
    ("threads_per_grid", "uint3", "ksim::g.total"),
    ("threads_per_simdgroup", "uint", "32u"),
    ("threads_per_threadgroup", "uint3", "ksim::g.bdim"),
]


def _template_value(v):
    """('type', dtype name) | ('int', n) | ('bool', b)."""
    if isinstance(v, (bool, np.bool_)):
        return "bool", bool(v)
    if isinstance(v, (int, np.integer)):
        return "int", int(v)
    return "type", rt.dtype_name(v)


def _dims(v, what: str) -> tuple[int, int, int]:
    t = tuple(int(x) for x in v)
    if len(t) != 3 or any(x < 0 for x in t):
        raise SimError(f"{what} must be three non-negative integers, got {v!r}", kind="usage")
    return t  # type: ignore[return-value]


def generate(dialect: str, name: str, input_names, output_names, source: str, header: str,
             in_dtypes: list[str], in_shapes: list[tuple], template, output_dtypes: list[str],
             atomic_outputs: bool, asserts: bool = True) -> tuple[str, list[str]]:
    """The C++ translation unit, and the argument list it expects (kinds, in order). `asserts=False`: assert()
    compiled out (NDEBUG)."""
    types = METAL_TYPES if dialect == "metal" else CUDA_TYPES
    targs = [(n, *_template_value(v)) for n, v in template]
    arg_kinds: list[str] = []  # "in:i", "shape:i", "strides:i", "ndim:i", "out:j"
    params: list[str] = []
    call: list[str] = []
    k = 0

    def a(i):
        return f"ksim::g.args[{i}]"

    for i, (nm, dt, shp) in enumerate(zip(input_names, in_dtypes, in_shapes)):
        t = types[dt]
        size = int(np.prod(shp)) if len(shp) else 1
        ndim = len(shp)
        if dialect == "metal":
            loc = "constant" if size < MAX_CONSTANT_ARRAY_SIZE else "device"
            ref = "&" if ndim == 0 else "*"
            params.append(f"  const {loc} {t}{ref} {nm} [[buffer({k})]]")
            call.append(f"*(const {t}*){a(k)}" if ndim == 0 else f"(const {t}*){a(k)}")
        else:
            params.append(f"    const {t}* {nm}")
            call.append(f"(const {t}*){a(k)}")
        arg_kinds.append(f"in:{i}")
        k += 1
        if ndim > 0:
            for suffix, mt, ct, kind in (("_shape", "const constant int*", "const __grid_constant__ Shape", "shape"),
                                         ("_strides", "const constant int64_t*", "const __grid_constant__ Strides", "strides"),
                                         ("_ndim", "const constant int&", "const __grid_constant__ int", "ndim")):
                if nm + suffix not in source:
                    continue
                if dialect == "metal":
                    params.append(f"  {mt} {nm}{suffix} [[buffer({k})]]")
                    call.append({"shape": f"(const int*){a(k)}", "strides": f"(const int64_t*){a(k)}",
                                 "ndim": f"*(const int*){a(k)}"}[kind])
                else:
                    params.append(f"    {ct} {nm}{suffix}")
                    call.append({"shape": f"*(const mlx::core::cu::Shape*){a(k)}",
                                 "strides": f"*(const mlx::core::cu::Strides*){a(k)}",
                                 "ndim": f"*(const int*){a(k)}"}[kind])
                arg_kinds.append(f"{kind}:{i}")
                k += 1
    for j, (nm, dt) in enumerate(zip(output_names, output_dtypes)):
        t = types[dt]
        if dialect == "metal":
            tt = f"atomic<{t}>" if atomic_outputs else t
            params.append(f"  device {tt}* {nm} [[buffer({k})]]")
            call.append(f"({tt}*){a(k)}")
        else:
            params.append(f"    {t}* {nm}")
            call.append(f"({t}*){a(k)}")
        arg_kinds.append(f"out:{j}")
        k += 1

    fname = f"custom_kernel_{name}"
    lines = [f'#include "ksim_{dialect}.h"']
    if not asserts:
        lines += ["#define NDEBUG 1", "#undef assert", "#define assert(e) ((void)0)"]
    if dialect == "cuda":
        lines.append("#define inf cuda::std::numeric_limits<float>::infinity()")
    # MLX appends its generated signature to the header with no newline in between (Metal: `template <` or
    # `[[kernel]] void`; CUDA: `namespace mlx::core::cu {`). A header whose last line has no newline therefore
    # runs into that text on the GPU (`#define B 32` + `namespace` -> `32namespace`); glue it the same way here.
    glued = bool(header) and not header.endswith("\n")
    lines += ['#line 1 "header"', prepare(header or "", dialect)]
    if not glued:
        lines.append('#line 1 "ksim-signature"')
    start = len(lines)
    if dialect == "metal":
        for attr, typ, expr in METAL_ATTRIBUTES:
            if attr in source:
                params.append(f"  {typ} {attr} [[{attr}]]")
                call.append(expr)
        if targs:
            kinds = {"type": "typename", "int": "int", "bool": "bool"}
            lines.append("template <" + ", ".join(f"{kinds[kd]} {n}" for n, kd, _ in targs) + ">")
        lines.append(f"[[kernel]] void {fname}(")
        lines.append(",\n".join(params) + ") {")
        lines += ['#line 1 "source"', prepare(source, dialect, in_function=True), "}"]
        tlist = ""
        if targs:
            vals = [types[v] if kd == "type" else (str(int(v)) if kd == "bool" else str(v)) for _, kd, v in targs]
            tlist = "<" + ", ".join(vals) + ">"
        lines += ['#line 1 "ksim-launch"',
                  f"static void ksim_entry() {{ {fname}{tlist}(" + ", ".join(call) + "); }"]
    else:
        lines += ["namespace mlx { namespace core { namespace cu {", "namespace cg = cooperative_groups;",
                  f"__global__ void {fname}(", ",\n".join(params) + ") {"]
        for n, kd, v in targs:
            if kd == "int":
                lines.append(f"  constexpr int {n} = {v};")
            elif kd == "bool":
                lines.append(f"  constexpr bool {n} = {'true' if v else 'false'};")
            else:
                lines.append(f"  using {n} = {types[v]};")
        lines += ['#line 1 "source"', prepare(source, dialect, in_function=True), "}", "}}}  // namespace mlx::core::cu",
                  '#line 1 "ksim-launch"',
                  f"static void ksim_entry() {{ mlx::core::cu::{fname}(" + ", ".join(call) + "); }"]
    if glued:  # the header's last line and the first generated line become one line, as on the GPU
        lines[start - 1:start + 1] = [lines[start - 1] + lines[start]]
    lines.append("KSIM_EXPORT_RUN(ksim_entry)")
    return "\n".join(lines) + "\n", arg_kinds


def run_mlx_kernel(dialect: str, name: str, input_names, output_names, source: str, header: str = "",
                   inputs=(), template=(), grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=(),
                   output_dtypes=(), init_value=None, atomic_outputs: bool = False,
                   shared_memory: int = 0, *, input_dtypes=None, timeout_s: float = 20.0,
                   ensure_row_contiguous: bool = True, check_races: bool = True,
                   strict_barriers: bool = True, writable_inputs=None,
                   inout_results: dict | None = None,
                   order_dependence: dict | None = None, asserts: bool = True,
                   input_heads: dict | None = None) -> list[np.ndarray]:
    """Run a metal_kernel / cuda_kernel body on the CPU; returns the outputs as numpy arrays.

    With ``check_races`` the grid runs twice (warps and threadgroups forward, then in reverse) and
    a result that depends on the order raises SimError(kind="race"), except where the order legitimately
    decides it (runtime.judge_orders: atomicExch/CAS, clock readings, atomic slots); those come back in
    ``order_dependence`` when a dict is given ({buffer name: OrderDependence}). With ``strict_barriers`` a
    barrier that threads which already returned never reach is a deadlock (SimError kind
    "deadlock"); without it those threads count as arrived, as on NVIDIA hardware. ``input_heads``
    {input index: array}: an input that is a slice of a larger allocation (MLX passes `x[R:]` as a pointer inside
    x's buffer): the allocation's elements before it, which the kernel may read at negative indices; a read before
    the allocation's start faults.
    """
    if dialect not in ("metal", "cuda"):
        raise SimError(f"dialect must be 'metal' or 'cuda', not {dialect!r}", kind="usage")
    what = f"{dialect}_kernel '{name}'"
    input_names, output_names = list(input_names), list(output_names)
    inputs = list(inputs)
    if not output_names:
        raise SimError(f"{what}: must specify at least one output", kind="usage")
    if len(inputs) != len(input_names):
        raise SimError(f"{what}: expected {len(input_names)} inputs ({', '.join(input_names)}), "
                       f"got {len(inputs)}", kind="usage")
    if len(output_shapes) != len(output_names) or len(output_dtypes) != len(output_names):
        raise SimError(f"{what}: output_shapes and output_dtypes need one entry per output "
                       f"({', '.join(output_names)})", kind="usage")
    grid = _dims(grid, "grid")
    tg = _dims(threadgroup, "threadgroup")
    if any(t == 0 for t in tg):
        raise SimError(f"{what}: threadgroup {tg} has a zero dimension", kind="usage")
    if tg[0] * tg[1] * tg[2] > 1024:
        raise SimError(f"{what}: threadgroup {tg} has {tg[0] * tg[1] * tg[2]} threads; the maximum "
                       f"is 1024", kind="usage")
    if dialect == "cuda" and shared_memory > 232448:
        raise SimError(f"{what}: shared_memory={shared_memory} bytes; an H100/H200 block can have at "
                       f"most 232448 (227 KB)", kind="resource_limit")
    if isinstance(template, dict):
        template = list(template.items())
    template = list(template or [])

    arrays, in_dtypes = [], []
    for i, x in enumerate(inputs):
        declared = input_dtypes[i] if input_dtypes and input_dtypes[i] else None
        arr = np.asarray(x)
        dn = rt.dtype_name(declared) if declared else rt.dtype_name(arr.dtype)
        arrays.append(rt.to_storage(arr, dn))
        in_dtypes.append(dn)
    writable = {n for n in input_names if n.endswith(WRITABLE_SUFFIX)} | set(writable_inputs or ())
    out_dtypes = [rt.dtype_name(d) for d in output_dtypes]
    out_shapes = [tuple(int(s) for s in shp) for shp in output_shapes]

    code, arg_kinds = generate(dialect, name, input_names, output_names, source, header, in_dtypes,
                               [a.shape for a in arrays], template, out_dtypes, atomic_outputs, asserts)
    so = _build.build(code, what)

    buffers: list[rt.Buffer] = []
    pointers: list[int] = []
    outs: list[rt.Buffer] = []
    # writable inputs: name, buffer, start (from the kernel's pointer on), dtype, the buffer's whole start
    inouts: list[tuple[str, rt.Buffer, np.ndarray, str, np.ndarray]] = []
    regions = []
    try:
        for kind in arg_kinds:
            k, idx = kind.split(":")
            idx = int(idx)
            if k == "in":
                arr = arrays[idx]
                head = (input_heads or {}).get(idx)
                b, whole = rt.filled_buffer(arr, None if head is None else
                                            rt.to_storage(np.asarray(head).reshape(-1), in_dtypes[idx]))
                if input_names[idx] in writable:
                    inouts.append((input_names[idx], b, arr, in_dtypes[idx], whole))
                else:
                    b.read_only()
            elif k in ("shape", "strides"):
                shp = arrays[idx].shape
                if k == "shape":
                    vals = np.array(list(shp) + ([0] * (10 - len(shp)) if dialect == "cuda" else []), np.int32)
                else:
                    st = [s // arrays[idx].itemsize for s in arrays[idx].strides]
                    vals = np.array(st + ([0] * (10 - len(st)) if dialect == "cuda" else []), np.int64)
                b = rt.Buffer(vals.nbytes)
                b.write(vals)
            elif k == "ndim":
                vals = np.array([arrays[idx].ndim], np.int32)
                b = rt.Buffer(4)
                b.write(vals)
            else:
                st = np.dtype(rt.STORAGE[out_dtypes[idx]])
                n = int(np.prod(out_shapes[idx])) if out_shapes[idx] else 1
                b = rt.Buffer(n * st.itemsize)
                if init_value is not None:
                    b.write(rt.to_storage(np.full(n, init_value, dtype=np.float64 if out_dtypes[idx] != "bool" else np.bool_), out_dtypes[idx]))
                else:
                    b.fill_byte(0xFF)
                outs.append(b)
            buffers.append(b)
            pointers.append(b.pointer)
            if k in ("in", "out"):
                nm = (input_names if k == "in" else output_names)[idx]
                regions.append((nm, b, k == "in" and nm not in writable))

        if dialect == "metal":
            tgc = tuple(max(1, min(t, g)) for t, g in zip(tg, grid))
            nblocks = tuple(-(-g // t) for g, t in zip(grid, tgc))
            total, partial = grid, True
        else:
            tgc = tg
            nblocks = tuple(-(-g // t) for g, t in zip(grid, tg))
            total, partial = tuple(n * t for n, t in zip(nblocks, tg)), False
        initial = [b.read(np.uint8, (b.nbytes,)) for b in outs]
        runs = []

        def launch_once(reverse: bool, limit: float, clock_mode: int = 0):
            if runs:   # a later run starts from the same memory
                for b, raw in zip(outs, initial):
                    b.write(raw)
                for _, b, _, _, whole in inouts:
                    b.write(whole)
            info = None
            if all(n > 0 for n in nblocks):  # an empty grid runs nothing
                info = rt.launch(so, what, pointers, nblocks, tgc, total, partial, dyn_smem=shared_memory,
                                 timeout_s=limit, regions=regions, reverse=reverse,
                                 strict_barriers=strict_barriers, clock_mode=clock_mode)
            runs.append([b.read(rt.STORAGE[dt], shp) for b, dt, shp in zip(outs, out_dtypes, out_shapes)]
                        + [b.read_tail(arr.dtype, arr.shape) for _, b, arr, _, _ in inouts])
            return info

        infos = rt.run_both_orders(launch_once, check_races, timeout_s)
        if check_races:
            bufs = [(nm, "output", b, dt) for nm, b, dt in zip(output_names, outs, out_dtypes)] \
                + [(nm, "in-out input", b, dt) for nm, b, _, dt, _ in inouts]
            allowed = rt.judge_orders(what, bufs, runs, infos,
                                      lambda order: launch_once(order, rt.reverse_timeout(timeout_s, 1.0), 0))
            if order_dependence is not None:
                order_dependence.update(allowed)
        if inout_results is not None:
            for (nm, _, arr, dt, _), a in zip(inouts, runs[0][len(outs):]):
                inout_results[nm] = rt.bf16_bits_to_f32(a).reshape(arr.shape) if dt == "bfloat16" else a
        runs[0] = runs[0][:len(outs)]
        return [rt.bf16_bits_to_f32(a).reshape(shp) if dt == "bfloat16" else a
                for a, dt, shp in zip(runs[0], out_dtypes, out_shapes)]
    finally:
        for b in buffers:
            b.close()
