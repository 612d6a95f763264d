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


def _pystr(s: str) -> str:
    if '"""' not in s and not s.endswith("\\"):
        return 'r"""' + s + '"""'
    return repr(s)


def emit_module(tr, plan, profile, template_values, dyn_templates, static_bytes, k) -> str:
    src_name = tr.source_path.replace("\\", "/").split("/")[-1] if tr.source_path else "the CUDA source"
    ins = [a for a in plan.arrays if not a.output]
    outs = [a for a in plan.arrays if a.output]
    in_params = ", ".join(py_name(a.name) for a in ins)
    kw = ", ".join(f"{n}=None" for n, d in plan.kwargs)
    sig = in_params + (", *, " + kw if kw else "")
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
    lines.append(_HELPERS)
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
    w(f"    cfg = launch_config({in_params}{', ' + call_kw if call_kw else ''})")
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
    if profile is not None:
        ref = tr.task_hint["reference"].split("\n\n\n", 1)[1]
        w("")
        w("")
        w(f"# The {profile.family} family's definition in MLX operations (what the port is checked against).")
        lines.append(ref.rstrip("\n"))
    return "\n".join(lines) + "\n"


def _shape_tuple(shape: list[str] | None) -> str:
    """Python for an output shape: a tuple of dim names, or `tuple(x.shape)` for a copied shape."""
    if not shape:
        return "()"
    if shape[0].startswith("*"):
        return f"tuple({shape[0][1:]})"
    return "(" + ", ".join(shape) + ("," if len(shape) == 1 else "") + ")"


