"""Writes the text of the port module (`<stem>_mlx.py`) from a translation plan."""
from __future__ import annotations

from .hostexpr import py_name

_HELPERS = '''

def _dim3(x=1, y=1, z=1):
    """CUDA's dim3: a tuple (x, y, z) of ints; dim3(dim3) is itself."""
    if isinstance(x, tuple):
        return x
    return (int(x), int(y), int(z))


def _cdiv(a, b):
    """C division: truncates for ints."""
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _cmod(a, b):
    return a - _cdiv(a, b) * b if isinstance(a, int) and isinstance(b, int) else math.fmod(a, b)


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _backend():
    """'metal' or 'cuda': MLX's GPU backend here. Without a GPU (ksearch's CPU simulator) the Metal port runs,
    or the CUDA-backend port when KSEARCH_SIM_DIALECT=cuda."""
    if mx.metal.is_available():
        return "metal"
    if mx.cuda.is_available():
        return "cuda"
    # no GPU: mx.fast.metal_kernel says so, unless the ksearch simulator is installed
    return "cuda" if os.environ.get("KSEARCH_SIM_DIALECT") == "cuda" else "metal"
'''


_LAUNCH = '''

# ---- launch(): the CUDA calling convention -------------------------------------------------------------
# In-out buffers. CUDA kernels write into buffers that hold data (y = a*x + y, masks, histograms); an MLX
# custom kernel's outputs are fresh, uninitialised buffers. So each buffer the kernel may write goes through
#   1. a copy kernel: `buf` = a fresh output holding the buffer's current contents (a custom kernel, never an
#      MLX op: ops may share or donate the caller's buffer, custom kernels always allocate their outputs);
#   2. the main kernel, which takes `buf` as an INPUT named `<name>_inout`, writes it through a cast of the
#      const pointer, and has one dummy output `done`;
#   3. a copy-out kernel whose inputs are `buf` AND `done`, giving a fresh output with the final contents.
# Why this order holds on a GPU: MLX orders kernels by their inputs and outputs only. Step 3 reads `done`, an
# output of step 2, so MLX's Metal encoder puts a memory barrier between them (it does so when a dispatch
# reads a buffer an earlier dispatch wrote since the last barrier; the barrier covers all buffers, `buf`
# included), and MLX's CUDA graph gets an edge 2 -> 3. Returning `buf` itself (or mx.depends(buf, [done]))
# would not be safe: `buf` is an output of step 1 only, so a later reader could be ordered after step 1 but
# concurrently with step 2. Nothing else ever holds `buf`, so no other node reads it half-written and MLX
# cannot donate it elsewhere. Metal passes inputs of fewer than 8 elements in `constant` memory, which
# cannot be written: buffers are padded to 8 elements and the padding sliced off.


def _copy_object(kind, with_dep):
    key = ("copy", kind, with_dep)
    if key not in _kernels:
        names = ["inp", "after"] if with_dep else ["inp"]
        if kind == "metal":
            src = "uint i = thread_position_in_grid.x;\\nif (i < uint(inp_shape[0])) out[i] = inp[i];\\n"
            _kernels[key] = mx.fast.metal_kernel(name="ks_copy", input_names=names, output_names=["out"], source=src)
        else:
            src = ("size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;\\n"
                   "if (i < size_t(inp_shape[0])) out[i] = inp[i];\\n")
            _kernels[key] = mx.fast.cuda_kernel(name="ks_copy", input_names=names, output_names=["out"], source=src)
    return _kernels[key]


def _copy(x, kind, after=None):
    """A fresh buffer with the contents of the flat array `x` (after the kernel that made `after`)."""
    n = x.size
    tg = max(1, min(256, n))
    return _copy_object(kind, after is not None)(
        inputs=[x] if after is None else [x, after], template=[("T", x.dtype)], grid=(n, 1, 1),
        threadgroup=(tg, 1, 1), output_shapes=[(n,)], output_dtypes=[x.dtype])[0]


def _launch_object(kind, shared_mem, type_defs=(), struct_types=()):
    """The launch kernel; `type_defs` [(template type, C type)]: template types that are no MLX dtype (a struct, a
    typedef of the file's), declared in the header of an instantiation of their own; `struct_types`: those whose
    parameters arrive as their bytes (KS_STRUCT_<name> makes the kernel read them so)."""
    key = ("launch", kind, shared_mem if kind == "cuda" else 0, tuple(type_defs), tuple(sorted(struct_types)))
    if key not in _kernels:
        extra = "".join(f"typedef {t} {n};\\n" + (f"#define KS_STRUCT_{n} 1\\n" if n in struct_types else "")
                        for n, t in type_defs)
        name = NAME + "".join("_" + "".join(c if c.isalnum() else "_" for c in t) for _, t in type_defs)
        if kind == "metal":
            _kernels[key] = mx.fast.metal_kernel(name=name, input_names=LAUNCH_INPUT_NAMES, output_names=["ks_done"],
                                                 source=LAUNCH_METAL_SOURCE, header=LAUNCH_METAL_HEADER + extra)
        else:
            _kernels[key] = mx.fast.cuda_kernel(name=name, input_names=LAUNCH_INPUT_NAMES, output_names=["ks_done"],
                                                source=LAUNCH_CUDA_SOURCE, header=LAUNCH_CUDA_HEADER + extra,
                                                shared_memory=shared_mem)
    return _kernels[key]


_C_DTYPES = {"float": "float32", "double": "float32", "half": "float16", "__half": "float16",
             "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "int": "int32", "int32_t": "int32",
             "unsigned": "uint32", "unsigned int": "uint32", "uint": "uint32", "uint32_t": "uint32",
             "int64_t": "int64", "long": "int64", "long long": "int64", "size_t": "uint64",
             "unsigned long long": "uint64", "uint64_t": "uint64", "char": "int8", "signed char": "int8",
             "int8_t": "int8", "unsigned char": "uint8", "uint8_t": "uint8", "short": "int16",
             "int16_t": "int16", "unsigned short": "uint16", "uint16_t": "uint16", "bool": "bool"}


def _mx_dtype(name):
    """MLX's dtype named as numpy names it (C's bool is mx.bool_)."""
    return mx.bool_ if name == "bool" else getattr(mx, name)


def _template_args(template):
    """[(name, value)] for MLX from the C++ template arguments as strings (["float", "256"])."""
    template = list(template or [])
    if len(template) != len(TEMPLATE_PARAMS):
        raise TypeError(f"{NAME} takes {len(TEMPLATE_PARAMS)} template arguments "
                        f"({', '.join(t['name'] for t in TEMPLATE_PARAMS) or 'none'}), got {len(template)}")
    out = []
    for t, v in zip(TEMPLATE_PARAMS, template):
        text = " ".join(str(v).split())
        if t["kind"] == "function":   # the port is one instantiation: the function is written in its calls
            if text.lstrip("&").split("::")[-1].strip(" ()") != t["value"]:
                raise TypeError(f"{NAME}: this port is for {t['name']} = {t['value']} (MLX kernels take no function "
                                f"as a template argument); port the kernel again for {t['name']} = {text}")
            continue
        if t["kind"] == "typename":
            dt = _C_DTYPES.get(text.replace("const ", ""))
            if dt is None and text.isidentifier():   # a struct or typedef of the file's
                out.append((t["name"], ("ks_type", text)))
                continue
            if dt is None:
                raise TypeError(f"{NAME}: template type {t['name']} = {text} has no MLX dtype")
            out.append((t["name"], _mx_dtype(dt)))
        elif text in ("true", "false"):
            out.append((t["name"], text == "true"))
        else:
            # a number, or a constant of the file (an enumerator: `WRITE`, `test_t::WRITE`)
            expr = text.rstrip("uUlL").replace("u)", ")").split("::")[-1]
            out.append((t["name"], int(eval(expr, {"__builtins__": {}}, dict(globals().get("ENUMERATORS") or {})))))
    return out


def launch(*args, grid, block, shared_mem=0, template=None, symbols=None):
    """Runs the kernel with CUDA's convention; returns {name: new contents} for every pointer it may write.

    args: in the CUDA parameter order: a flat mx.array per pointer (its whole contents from the pointer on,
    of the pointee's scalar dtype: a float4* takes 4x the floats; a pointer inside an allocation that the kernel
    reads before, `d_in + R`, as the allocation sliced: x[R:]), a number per scalar. grid counts blocks,
    block threads, as in kernel<<<grid, block, shared_mem>>>; template: the C++ template arguments as
    strings (["float", "256"]); symbols: {name: contents} of the file-scope __constant__/__device__ variables
    the kernel uses (SYMBOLS; what cudaMemcpyToSymbol put there), each else its initializer or zeros; the
    __device__ ones come back with the pointers, as "symbol:<name>". The returned arrays have the shapes and dtypes given.
    """
    if len(args) < len(PARAMS) and all("default" in p for p in PARAMS[len(args):]):
        args = tuple(args) + tuple(p["default"] for p in PARAMS[len(args):])   # default arguments, as in C++
    if len(args) != len(PARAMS):
        raise TypeError(f"{NAME} takes {len(PARAMS)} arguments ({', '.join(p['name'] for p in PARAMS)}), "
                        f"got {len(args)}")
    kind = _backend()
    grid, block = _dim3(*tuple(grid)), _dim3(*tuple(block))
    tmpl = _template_args(template)
    type_defs = [(n, v[1]) for n, v in tmpl if isinstance(v, tuple)]
    tmpl = [(n, v) for n, v in tmpl if not isinstance(v, tuple)]
    types = {n: v for n, v in tmpl if isinstance(v, mx.Dtype)}
    # a template type the instantiation makes a struct of the file (a functor, a payoff): its parameters' bytes
    struct_types = {p["template_type"] for p, a in zip(PARAMS, args) if p.get("template_type") and not p["pointer"]
                    and p["template_type"] in dict(type_defs)
                    and (isinstance(a, (bytes, bytearray, memoryview)) or getattr(getattr(a, "dtype", None), "names", None))}
    inputs, written = [], []
    unchanged = {}   # pointers not const that the kernel never stores through: handed back as given
    for p, a in zip(PARAMS, args):
        if p.get("tag"):   # an empty tag (std::bool_constant<B>{}): its value is a template argument, nothing to pass
            continue
        if a is None and p.get("texture"):   # a texture the launch does not bind: an empty one (never fetched)
            a = None if p["pointer"] else (1 if p["name"].endswith(("__h", "__d")) else 0)
        elif a is None and not p["pointer"]:
            raise TypeError(f"{NAME}: no value for parameter '{p['name']}' ({p['ctype']}): launch() takes a "
                            "number for each scalar parameter, and the bytes of each struct passed by value")
        if p.get("nullable"):
            tmpl = tmpl + [("KS_NULL_" + p["name"], a is None)]
        if p["pointer"] and a is None:   # NULL: a placeholder buffer the kernel never reads (it tests for NULL)
            inputs.append(mx.zeros((8,), dtype=_mx_dtype(p["dtype"] or "float32") if p["dtype"] != "float64"
                                   else mx.float32))
            continue
        if p["pointer"] and p.get("repack"):   # structs holding doubles: each to the ports' layout (doubles as float)
            import numpy as np
            raw = np.ascontiguousarray(np.array(a)).view(np.uint8).reshape(-1)
            count = raw.size // p["c_bytes"]
            c_rows = raw[:count * p["c_bytes"]].reshape(count, p["c_bytes"])
            rows = np.zeros((max(count, 1), p["port_bytes"]), dtype=np.uint8)
            for src, sdt, dst, ddt in p["repack"]:
                sd, dd = np.dtype(sdt), np.dtype(ddt)
                v = np.ascontiguousarray(c_rows[:, src:src + sd.itemsize]).view(sd).astype(dd)
                rows[:count, dst:dst + dd.itemsize] = v.view(np.uint8).reshape(count, dd.itemsize)
            flat = mx.array(rows.reshape(-1))
            if p["written"]:
                flat = _copy(flat, kind)
                written.append((p["name"], flat, raw.size, ("repack", p, raw, count)))
            inputs.append(flat)
            continue
        if p["pointer"]:
            a = a if isinstance(a, mx.array) else mx.array(a)
            flat = a.reshape(-1)
            n = flat.size
            if n < 8:   # Metal: inputs under 8 elements are `constant` (see above)
                flat = mx.concatenate([flat, mx.zeros((8 - n,), dtype=flat.dtype)])
            if p["written"] and p.get("stored", True):
                flat = _copy(flat, kind)
                written.append((p["name"], flat, n, a.shape))
            elif p["written"]:
                # not const, but the kernel never stores through it (nor through a pointer made from it, nor in a
                # helper it is passed to): passed as it is, so a slice x[R:] keeps the elements before it that a
                # stencil reads (in[i - R]), and handed back unchanged
                unchanged[p["name"]] = a
            inputs.append(flat)
        elif p.get("struct") or p.get("template_type") in struct_types:
            # a struct by value (or a template type the instantiation makes a struct): its bytes (bytes, or a numpy
            # structured scalar/array)
            import numpy as np
            raw = bytes(a) if isinstance(a, (bytes, bytearray, memoryview)) else np.asarray(a).tobytes()
            repack, port_bytes = p.get("repack"), p.get("port_bytes")
            if p.get("template_type") in struct_types:
                repack, port_bytes = (globals().get("STRUCT_REPACK") or {}).get(
                    dict(type_defs)[p["template_type"]], (None, None))
            if repack:   # its doubles as the ports' floats (both ports compute doubles as float)
                out = bytearray(port_bytes)
                for src, sdt, dst, ddt in repack:
                    v = np.frombuffer(raw, dtype=sdt, count=1, offset=src).astype(ddt)
                    out[dst:dst + v.itemsize] = v.tobytes()
                raw = bytes(out)
            raw = raw + bytes(max(0, 8 - len(raw)))   # Metal: inputs under 8 elements are `constant`
            inputs.append(mx.array(np.frombuffer(raw, dtype=np.uint8)))
        else:
            dt = types.get(p.get("template_type")) or _mx_dtype(p["dtype"])
            if dt == mx.float64 or (kind == "metal" and dt in (mx.bfloat16,)):
                dt = mx.float32
            inputs.append(mx.array([a], dtype=dt))
    unknown = sorted(set(symbols or {}) - {s["name"] for s in SYMBOLS})
    if unknown:
        raise TypeError(f"{NAME}: symbols= names {', '.join(unknown)}, which the kernel does not use "
                        f"(it uses: {', '.join(s['name'] for s in SYMBOLS) or 'none'})")
    for s in SYMBOLS:   # file-scope device memory, as one more buffer each
        import numpy as np
        a = (symbols or {}).get(s["name"])
        src = np.dtype("uint16" if s["dtype"] == "bfloat16" else s["dtype"])
        dst = np.dtype("float32") if src == np.float64 else src   # both ports compute doubles as float
        if a is None:
            vals = np.full((s["count"],), s["init"] or 0, dtype=dst)
        else:
            raw = np.ascontiguousarray(np.asarray(a)).reshape(-1)
            if raw.dtype != src and raw.nbytes == s["count"] * src.itemsize:   # its bytes (what a capture holds)
                raw = raw.view(src)
            vals = raw.astype(dst)
        flat = mx.array(vals)
        if s["dtype"] == "bfloat16":
            flat = flat.view(mx.bfloat16)
        n = flat.size
        if n < 8:   # Metal: inputs under 8 elements are `constant` (see above)
            flat = mx.concatenate([flat, mx.zeros((8 - n,), dtype=flat.dtype)])
        if s["written"]:
            flat = _copy(flat, kind)
            written.append(("symbol:" + s["name"], flat, n, (n,)))
        inputs.append(flat)
    if kind == "metal" and STATIC_SHARED_BYTES + shared_mem > APPLE_THREADGROUP_BYTES:
        raise ValueError(f"{NAME}: {STATIC_SHARED_BYTES + shared_mem} bytes of threadgroup memory; "
                         f"Apple GPUs allow {APPLE_THREADGROUP_BYTES}: use a smaller block or tile")
    if kind == "metal":
        tmpl = tmpl + [(c, max(1, int(shared_mem) // e)) for c, e in LAUNCH_DYNAMIC_SHARED]
    threads = tuple(g * b for g, b in zip(grid, block))   # MLX: grid in threads
    if not written or 0 in threads:
        if written and 0 in threads:
            return {**unchanged, **{name: _unpack(buf, shape) if shape and shape[0] == "repack"
                                    else buf[:n].reshape(shape) for name, buf, n, shape in written}}
        # nothing to return: still run it, so that a fault shows
    done = _launch_object(kind, int(shared_mem), type_defs, struct_types)(
        inputs=inputs, template=tmpl, grid=threads, threadgroup=block, output_shapes=[(1,)],
        output_dtypes=[mx.uint32])[0]
    if not written:
        mx.eval(done)
        return dict(unchanged)
    return {**unchanged, **{name: _unpack(_copy(buf, kind, after=done), shape) if shape and shape[0] == "repack"
                            else _copy(buf, kind, after=done)[:n].reshape(shape) for name, buf, n, shape in written}}


def _unpack(buf, how):
    """A buffer of the ports' structs (doubles as float) back to the C structs' bytes (launch() of structs holding
    doubles)."""
    import numpy as np
    _, p, raw, count = how
    rows = np.array(buf).view(np.uint8).reshape(-1)[:count * p["port_bytes"]].reshape(count, p["port_bytes"])
    out = np.array(raw, copy=True)
    c_rows = out[:count * p["c_bytes"]].reshape(count, p["c_bytes"])
    for src, sdt, dst, ddt in p["repack"]:
        sd, dd = np.dtype(sdt), np.dtype(ddt)
        v = np.ascontiguousarray(rows[:, dst:dst + dd.itemsize]).view(dd).astype(sd)
        c_rows[:, src:src + sd.itemsize] = v.view(np.uint8).reshape(count, sd.itemsize)
    return mx.array(out)
'''


def _pystr(s: str) -> str:
    if '"""' not in s and not s.endswith("\\"):
        return 'r"""' + s + '"""'
    return repr(s)


def emit_module(tr, plan, profile, template_values, dyn_templates, static_bytes, k) -> str:
    src_name = tr.source_path.replace("\\", "/").split("/")[-1] if tr.source_path else "the CUDA source"
    ins = [a for a in plan.arrays if not a.output]
    outs = [a for a in plan.arrays if a.output]
    plan.kwargs = [(n, d) for n, d in plan.kwargs if n.isidentifier()]
    in_params = ", ".join(py_name(a.name) for a in ins)
    kw = ", ".join(f"{n}=None" for n, d in plan.kwargs)
    sig = ", ".join(x for x in (in_params, "*, " + kw if kw else "") if x)
    lines: list[str] = []
    w = lines.append
    w(f'"""MLX port of `{k.name}` from {src_name} (written by ksearch; edit freely).')
    w("")
    w("kernel(*inputs) runs the Metal port (mx.fast.metal_kernel) on an Apple GPU and the CUDA-backend port")
    w("(mx.fast.cuda_kernel) on an NVIDIA GPU; both share one kernel body. Conventions:")
    w("* pointer parameters the kernel writes are outputs, the others inputs;")
    w("* scalar parameters are passed as 1-element arrays `<name>_arg` and read back on the body's first lines;")
    w("* template parameters (and dynamic shared-memory sizes on Metal) are MLX template arguments;")
    w("* the grid is in threads (blocks x threads per block), as MLX wants; launch_config() keeps CUDA's blocks.")
    if tr.report:
        w("")
        w("Translation report:")
        for i in tr.report:
            w(f"  {i.severity}: line {i.line + 1}: {i.construct}: {i.message}")
    w('"""')
    w("import math")
    w("import os")
    w("")
    w("import mlx.core as mx")
    w("")
    w(f"NAME = {k.name!r}")
    w(f"INPUT_NAMES = {tr.input_names!r}")
    w(f"OUTPUT_NAMES = {tr.output_names!r}")
    w(f"ATOMIC_OUTPUTS = {tr.atomic_outputs!r}")
    if plan.enumerators:
        w(f"ENUMERATORS = {plan.enumerators!r}   # the file's enum constants, for template=[...] by name")
    if plan.struct_repack:   # a template type the instantiation makes one of these structs: its doubles as float
        w(f"STRUCT_REPACK = {({n: [[list(x) for x in r], b] for n, (r, b) in plan.struct_repack.items()})!r}")
    w(f"STATIC_SHARED_BYTES = {static_bytes}   # of __shared__ arrays (threadgroup memory)")
    w("APPLE_THREADGROUP_BYTES = 32768")
    w("")
    w(f"METAL_HEADER = {_pystr(tr.header)}")
    w("")
    w(f"METAL_SOURCE = {_pystr(tr.metal_source)}")
    w("")
    w(f"CUDA_HEADER = {_pystr(tr.cuda_header)}")
    w("")
    w(f"CUDA_SOURCE = {_pystr(tr.cuda_source)}")
    w("")
    w("# launch(): the kernel's parameters in CUDA's order; `written`: launch() returns its new contents")
    w(f"PARAMS = {tr.params!r}")
    w(f"TEMPLATE_PARAMS = {tr.template_params!r}")
    w(f"LAUNCH_INPUT_NAMES = {tr.launch_input_names!r}")
    w(f"LAUNCH_DYNAMIC_SHARED = {tr.launch_dynamic_shared!r}   # Metal: (template constant, bytes per element)")
    w("")
    w(f"LAUNCH_METAL_HEADER = {_pystr(tr.launch_metal_header)}")
    w("")
    w(f"LAUNCH_METAL_SOURCE = {_pystr(tr.launch_metal_source)}")
    w("")
    w(f"LAUNCH_CUDA_SOURCE = {_pystr(tr.launch_cuda_source)}")
    w("")
    w(f"LAUNCH_CUDA_HEADER = {_pystr(tr.launch_cuda_header or tr.cuda_header)}")
    w("# file-scope __constant__/__device__ variables the kernel uses: launch(..., symbols={name: contents})")
    w(f"SYMBOLS = {tr.symbols!r}")
    lines.append(_HELPERS)
    lines.append(_LAUNCH)
    w("")
    w("_kernels = {}")
    w("")
    w("")
    w("def _kernel_object(kind, shared_mem):")
    w("    key = (kind, shared_mem if kind == 'cuda' else 0)")
    w("    if key not in _kernels:")
    w("        if kind == 'metal':")
    w("            _kernels[key] = mx.fast.metal_kernel(name=NAME, input_names=INPUT_NAMES, output_names=OUTPUT_NAMES,")
    w("                                                 source=METAL_SOURCE, header=METAL_HEADER,")
    w("                                                 atomic_outputs=ATOMIC_OUTPUTS)")
    w("        else:")
    w("            _kernels[key] = mx.fast.cuda_kernel(name=NAME, input_names=INPUT_NAMES, output_names=OUTPUT_NAMES,")
    w("                                                source=CUDA_SOURCE, header=CUDA_HEADER, shared_memory=shared_mem)")
    w("    return _kernels[key]")
    w("")
    w("")
    cut = len(lines)   # where kernel(*inputs) and its launch_config start (_unusable_wrapper checks them)
    w(f"def launch_config({sig}):")
    w('    """Sizes, CUDA launch configuration (grid in blocks), scalar arguments and output shapes."""')
    for line in plan.config_lines:
        w("    " + line)
    for n, d in plan.kwargs:   # defaults may read the input shapes, so they are resolved here
        if d == "None":
            w(f"    if {n} is None:")
            w(f"        raise TypeError('{k.name}: pass {n}= (it cannot be read from the input shapes)')")
        else:
            w(f"    {n} = {d} if {n} is None else {n}")
    w(f"    grid = {plan.grid}")
    w(f"    block = {plan.block}")
    w(f"    shared_mem = int({plan.smem})")
    tmpl = [f"({n!r}, {py_name(n)})" for n in template_values] + [f"({c!r}, {e})" for c, e in dyn_templates]
    scal = ", ".join(f"{s.name!r}: {s.value}" for s in plan.scalars)
    oshapes = ", ".join(_shape_tuple(a.shape) for a in outs)
    w("    return {")
    w("        'grid': grid, 'block': block, 'shared_mem': shared_mem,")
    w(f"        'template': [{', '.join(tmpl)}],")
    w(f"        'scalars': {{{scal}}},")
    w(f"        'output_shapes': [{oshapes}],")
    w(f"        'output_dtypes': [{', '.join('mx.' + a.dtype for a in outs)}],")
    w("    }")
    w("")
    w("")
    w(f"def kernel({sig}):")
    w(f'    """Runs {k.name} on MLX arrays; returns ' + ("the output" if len(outs) == 1 else "(" + ", ".join(a.name for a in outs) + ")") + '."""')
    call_kw = ", ".join(f"{n}={n}" for n, _ in plan.kwargs)
    w(f"    cfg = launch_config({', '.join(x for x in (in_params, call_kw) if x)})")
    w("    kind = _backend()")
    w("    if kind == 'metal' and STATIC_SHARED_BYTES + cfg['shared_mem'] > APPLE_THREADGROUP_BYTES:")
    w("        raise ValueError(f\"{NAME}: {STATIC_SHARED_BYTES + cfg['shared_mem']} bytes of threadgroup memory; \"")
    w("                         f\"Apple GPUs allow {APPLE_THREADGROUP_BYTES}: use a smaller block or tile\")")
    arg_exprs = []
    for kind_, i in plan.order:
        if kind_ == "array":
            a = plan.arrays[i]
            if not a.output:
                arg_exprs.append(py_name(a.name))
        else:
            s = plan.scalars[i]
            arg_exprs.append(f"mx.array([cfg['scalars'][{s.name!r}]], dtype=mx.{s.dtype})")
    w("    inputs = [" + ", ".join(arg_exprs) + "]")
    w("    grid = tuple(g * b for g, b in zip(cfg['grid'], cfg['block']))   # MLX: grid in threads")
    w("    outs = _kernel_object(kind, cfg['shared_mem'])(")
    w("        inputs=inputs, template=cfg['template'], grid=grid, threadgroup=cfg['block'],")
    w("        output_shapes=cfg['output_shapes'], output_dtypes=cfg['output_dtypes'],")
    w("        init_value=0 if ATOMIC_OUTPUTS else None)")
    w("    return outs[0]" if len(outs) == 1 else "    return tuple(outs)")
    why = _unusable_wrapper("\n".join(lines) + "\n", cut_text="\n".join(lines[cut:]))
    if why:   # host code this module does not follow (a framework's tensors): launch() stands alone
        lines[cut:] = _refusing_wrapper(k.name, why)
    if profile is not None:
        ref = tr.task_hint["reference"].split("\n\n\n", 1)[1]
        w("")
        w("")
        w(f"# The {profile.family} family's definition in MLX operations (what the port is checked against).")
        lines.append(ref.rstrip("\n"))
    return "\n".join(lines) + "\n"


def _unusable_wrapper(module: str, cut_text: str) -> str | None:
    """Why the generated `launch_config`/`kernel(*inputs)` cannot run (a syntax error, a name nothing defines),
    or None. They are made from the host code around the launch; code it does not follow (a framework's tensor
    API: `x.size(0)`, `x.data_ptr<float>()`) must not cost the module its launch()."""
    import builtins
    import symtable
    try:
        compile(module, "port_module", "exec")
        table = symtable.symtable(module, "port_module", "exec")
    except SyntaxError as e:
        return e.msg
    module_names = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    for fn in table.get_children():
        if fn.get_name() not in ("launch_config", "kernel") or f"def {fn.get_name()}(" not in cut_text:
            continue
        for sym in fn.get_symbols():
            n = sym.get_name()
            if sym.is_referenced() and sym.is_global() and n not in module_names and not hasattr(builtins, n):
                return f"'{n}' is not defined there"
    return None


def _refusing_wrapper(name: str, why: str) -> list[str]:
    msg = (f"{name}: kernel(*inputs) could not be made from the host code around its launch ({why}); call "
           f"launch(*args, grid=..., block=...) with the kernel's own arguments, as CUDA does")
    return ["def launch_config(*inputs, **sizes):",
            '    """Not available for this kernel: see kernel()."""',
            f"    raise NotImplementedError({msg!r})",
            "", "",
            "def kernel(*inputs, **sizes):",
            f'    """Not available for this kernel: {why}. Use launch()."""',
            f"    raise NotImplementedError({msg!r})"]


def _shape_tuple(shape: list[str] | None) -> str:
    """Python for an output shape: a tuple of dim names, or `tuple(x.shape)` for a copied shape."""
    if not shape:
        return "()"
    if shape[0].startswith("*"):
        return f"tuple({shape[0][1:]})"
    return "(" + ", ".join(shape) + ("," if len(shape) == 1 else "") + ")"


