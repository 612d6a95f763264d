"""translate_kernel: one CUDA kernel (from find_kernels) → the text of an MLX module with a Metal port
(mx.fast.metal_kernel), a CUDA-backend port (mx.fast.cuda_kernel), a wrapper `kernel(*inputs)` and, when
the family is recognized, a `reference(...)` in MLX ops.

Conventions of the ports (documented in the module they emit):
* pointer parameters the kernel writes are outputs, the others inputs (MLX: `const device T*` / `device T*`);
* scalar parameters (ints, floats) become 1-element input arrays named `<name>_arg`, read back into a local
  `<name>` on the first lines of the body: one compiled kernel serves every size;
* template parameters of the kernel become MLX template arguments; `extern __shared__` arrays get a
  template size constant (Metal) or `shared_memory=` bytes (CUDA backend);
* the grid is in threads (blocks × threads per block), like MLX wants.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from ..source.cfamily import in_namespaces_of, param_from_node, parse_bytes
from ..source.models import KernelInfo, Param, ParseResult
from . import analysis
from .hostexpr import HostExprError, expr_to_py, host_functions, host_prelude, py_name
from .launch import passing
from .metal_support import THREAD_ATTRIBUTES, metal_support
from .profiles import Profile, find_profile
from .rewrite import Issue
from .rewrite import RewriteContext, Rewriter
from .rules import RuleTable, load_rules

# said of a construct the CUDA-backend port cannot run either (device-side launches, grid-wide barriers)
_NOR_CUDA = (" (the CUDA-backend port cannot do it either: MLX launches kernels without cooperative launch or "
             "relocatable device code)")

APPLE_THREADGROUP_BYTES = 32768


class Translation(BaseModel):
    kernel: str
    source_path: str | None = None
    module_path: str | None = None
    family: str | None = None
    module_text: str
    metal_source: str
    cuda_source: str
    header: str               # Metal header (helpers, constants)
    cuda_header: str = ""
    input_names: list[str] = []
    output_names: list[str] = []
    atomic_outputs: bool = False
    report: list[Issue] = []
    rules_applied: list[str] = []
    task_hint: dict = {}
    # the launch() path (CUDA's convention, in-out buffers): see launch.py and emit.py
    params: list[dict] = []
    template_params: list[dict] = []
    launch_input_names: list[str] = []
    launch_metal_source: str = ""
    launch_metal_header: str = ""
    launch_cuda_source: str = ""
    launch_dynamic_shared: list[tuple[str, int]] = []
    launch_cuda_header: str = ""
    symbols: list[dict] = []   # file-scope device memory launch() passes as buffers (symbols.py)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.report if i.severity == "error"]


class TranslateError(ValueError):
    """The request cannot be translated at all (no such kernel, not a CUDA kernel)."""


@dataclass
class _Array:
    name: str
    ctype: str
    dtype: str
    output: bool
    shape: list[str] | None = None


@dataclass
class _Scalar:
    name: str
    ctype: str
    dtype: str
    value: str = ""            # python expression in launch_config's namespace


@dataclass
class _Plan:
    arrays: list[_Array] = field(default_factory=list)
    scalars: list[_Scalar] = field(default_factory=list)
    order: list[tuple[str, int]] = field(default_factory=list)   # ("array"|"scalar", index) in param order
    config_lines: list[str] = field(default_factory=list)
    kwargs: list[tuple[str, str]] = field(default_factory=list)   # wrapper keyword args (name, default)
    template: list[tuple[str, str]] = field(default_factory=list)  # (name, python expr)
    dims: dict[str, int] = field(default_factory=dict)
    grid: str = "_dim3(1)"
    block: str = "_dim3(256)"
    smem: str = "0"
    tags: set[int] = field(default_factory=set)   # indexes of empty tag parameters (std::bool_constant<B>): no input
    enumerators: dict[str, int] = field(default_factory=dict)   # the file's enum constants (template arguments)
    struct_repack: dict = field(default_factory=dict)   # {struct: (repack, port bytes)}: template types with doubles


def module_path_for(source_path: str | Path) -> Path:
    """Where a port of `dir/name.cu` goes: `dir/name_mlx.py`."""
    p = Path(source_path)
    return p.with_name(p.stem + "_mlx.py")


def _ctype_dtype(ctype: str, template_types: dict[str, str]) -> str:
    c = " ".join(ctype.split())
    if c in template_types:
        return template_types[c]
    return analysis.C_TO_MX.get(c, "float32")


def translate_kernel(parse_result: ParseResult, kernel_name: str, source_path: str | Path | None = None,
                     rules: RuleTable | None = None, function_args: dict[str, str] | None = None) -> Translation:
    """Ports one CUDA kernel of `parse_result` to an MLX module. Raises TranslateError only when there is
    nothing to translate; everything else the translator cannot do is in `report`. `function_args`: the device
    function each function template parameter stands for where no launch site of the file names one (a capture
    does: the port is for that instantiation)."""
    table = rules or load_rules()
    k = parse_result.kernel(kernel_name)
    src_path = str(source_path) if source_path else parse_result.path
    where = src_path or "this file"
    if k is None:
        known = ", ".join(x.name for x in parse_result.kernels) or "none"
        raise TranslateError(f"{where}: no kernel named '{kernel_name}' (kernels here: {known})")
    if k.language != "cuda":
        raise TranslateError(f"{where}: '{kernel_name}' is a {k.language} kernel; Port to MLX translates CUDA "
                             "kernels (Metal and MLX kernels can be optimized directly)")
    from ..source.conditionals import has_conditionals
    helper_names = [h.name for h in parse_result.helpers]
    if has_conditionals(k.text) or (len(set(helper_names)) < len(helper_names)
                                    and has_conditionals(parse_result.source)):
        # `#if` in its parameter list or body, or helpers defined once per branch (`#ifndef DOUBLE_PRECISION`
        # float f(...) `#else` double f(...): one definition twice once Metal computes doubles as float):
        # decided as nvcc decides it, where known
        parse_result = _with_resolved_conditionals(parse_result, kernel_name)
        k = parse_result.kernel(kernel_name) or k
    from .textures import TextureError, port_textures
    issues: list[Issue] = []
    _textures: list[str] = []
    try:   # texture reads become buffer reads with the texture unit's index arithmetic (textures.py)
        parse_result, _textures = port_textures(parse_result, kernel_name)
        k = parse_result.kernel(kernel_name) or k
    except TextureError as e:
        issues.append(Issue(construct=e.construct, line=e.line, severity="error", message=e.message))
    from .asynccopy import lower_async_copies   # cuda::memcpy_async through a pipeline/barrier: plain copies
    parse_result = lower_async_copies(parse_result, kernel_name, issues)
    k = parse_result.kernel(kernel_name) or k
    from .sharedproxy import port_shared_proxies   # `T *s = SharedMemory<T>();` is an extern __shared__ array
    parse_result = port_shared_proxies(parse_result, kernel_name, _included_texts(parse_result.source, src_path))
    k = parse_result.kernel(kernel_name) or k
    from .headers import resolve_param_types, type_aliases, with_aggregates, with_library_typedefs
    full = with_library_typedefs(with_aggregates(parse_result.preamble, parse_result.source),   # unions the parser
                                 parse_result.source)                      # missed; cufftComplex's typedef
    if full is not parse_result.preamble:
        parse_result = parse_result.model_copy(update={"preamble": full})
        k = parse_result.kernel(kernel_name) or k
    resolve_param_types(k, type_aliases(parse_result.preamble))   # `fp d_lambda` with #define fp float
    line0 = k.range.start.line
    source_bytes = parse_result.source.encode()
    from ..sim.cub import includes_cub, reason as cub_reason, unsupported_uses   # CUB: only what sim/ksim_cub.h has
    if includes_cub(parse_result.source):
        for h in [k] + [h for h in parse_result.helpers if re.search(rf"\b{re.escape(h.name)}\s*\(", k.text)]:
            for name, line in unsupported_uses(h.text, h.range.start.line):
                issues.append(Issue(construct=name, line=line, severity="error", message=cub_reason(name) + "; port that part by hand"))

    # -- parameters ----------------------------------------------------------------------------
    launch = k.launches[0] if k.launches else None
    if k.launches and len(k.launches) > 1:
        issues.append(Issue(construct=f"{k.name}<<<...>>>", line=k.launches[1].line, severity="info",
                            message=f"{len(k.launches)} launch sites; the port follows the first (line "
                                    f"{launch.line + 1})"))
    host_fns = _host_functions_cached(source_bytes, tuple(parse_result.preamble)) if launch is not None else {}
    fnames = set(host_fns)
    template_values: dict[str, str] = {}     # name -> python expression
    fn_args: dict[str, str] = {}             # function template parameter -> the device function it stands for
    template_types: dict[str, str] = {}      # typename param -> mx dtype name
    profile = find_profile(k.name, src_path)
    for i, tp in enumerate(k.template_params):
        arg = launch.template_args[i] if launch and i < len(launch.template_args) else tp.default
        if arg is None and profile is not None and tp.name in profile.templates:
            arg = str(profile.templates[tp.name])
            issues.append(Issue(construct=f"template <{tp.text}>", line=line0, severity="warning",
                                message=f"{tp.name} = {arg}, the usual value for a {profile.family} kernel "
                                        "(no launch site gives one)"))
        if _function_pointer_kind(tp, parse_result.source):
            fn = _device_function_named((function_args or {}).get(tp.name, arg), parse_result, src_path)
            if fn is not None:   # template <fn_ptr F> at F = a device function of the file: its calls name it
                fn_args[tp.name] = fn
                continue
            issues.append(Issue(construct=f"template <{tp.text}>", line=line0, severity="error",
                                message=f"template parameter '{tp.name}' is a function ({tp.kind}): the ports cannot "
                                        "take a function as a template argument; port by hand with the function a "
                                        f"launch passes written in its place{f' ({arg})' if arg and arg != tp.name else ''}"))
            template_values[tp.name] = "0"
            continue
        if tp.kind == "typename":
            dt = analysis.C_TO_MX.get(" ".join((arg or "float").split()), "float32")
            template_types[tp.name] = dt
            template_values[tp.name] = f"mx.{dt}"
        elif arg is None:
            issues.append(Issue(construct=f"template <{tp.text}>", line=line0, severity="error", scope="launch_config",
                                message=f"no value for template parameter {tp.name}: no launch site gives one; "
                                        f"set it in the port's template list"))
            template_values[tp.name] = "0"
        else:
            try:
                template_values[tp.name] = expr_to_py(arg, launch.line if launch else line0, fnames)
            except HostExprError as e:
                issues.append(Issue(construct=arg, line=launch.line if launch else line0, message=str(e),
                                    scope="launch_config"))
                template_values[tp.name] = "0"

    declared_tparams = list(k.template_params)
    if fn_args:
        k = _with_function_args(k, fn_args)
    called = analysis.called_helpers(k, _helper_pool(parse_result, src_path))
    from .lift import apply_lifts, plan_lifts   # struct parameters' followed pointer fields: buffers of their own
    lifts = plan_lifts(k, parse_result.preamble, [h.text for h in called])
    if lifts:
        k, parse_result, lifts = apply_lifts(k, parse_result, lifts)
    pointers = {p.name for p in k.params if p.pointer}
    for lf in lifts:
        issues.append(Issue(construct=f"{lf.param}{'->' if lf.param in pointers else '.'}{lf.field}",
                            line=line0, severity="warning",
                            message=f"'{lf.param}' holds a pointer ({lf.struct}::{lf.field}) that the kernel follows: "
                                    f"both ports take what it points to as the buffer '{lf.name}' (after the kernel's "
                                    f"own parameters), and the struct with that field as an unused 8-byte word"))
    written = analysis.written_pointers(k, called)   # (lifting renames fields, never a call)
    plan = _Plan()
    from .launch import tag_params   # std::bool_constant<B>, std::true_type, an empty struct: nothing to pass
    plan.tags = set(tag_params(k, parse_result.preamble))
    for p in k.params:
        if p.pointer:
            out = p.name in written and not p.is_const
            if not p.is_const and not out:
                issues.append(Issue(construct=p.text, line=line0, severity="info",
                                    message=f"'{p.name}' is not const but never written: treated as an input"))
            if p.type in ("float4", "float2", "int4", "int2", "half2"):
                issues.append(Issue(construct=p.text, line=line0, severity="warning",
                                    message=f"'{p.name}' is a vector pointer ({p.type}); the port passes a scalar "
                                            "array, so its length counts scalars: check the shapes"))
            plan.order.append(("array", len(plan.arrays)))
            plan.arrays.append(_Array(p.name, p.type, _ctype_dtype(p.type, template_types), out))
        elif any(k.params[i] is p for i in plan.tags):   # its value is a template argument, known at the launch
            continue
        else:
            ctype = " ".join(p.type.split())
            if ctype not in analysis.C_TO_MX and ctype not in template_types:
                from .launch import SCALAR
                from .launch import norm_type
                from .layout import by_value_problem
                problem = by_value_problem(norm_type(ctype), parse_result.preamble)
                if problem is not None and problem.kind == "double":   # launch() repacks its bytes (layout.py)
                    from .layout import double_repack
                    if double_repack(norm_type(ctype), parse_result.preamble) is not None:
                        problem = None
                by_bytes = problem is None
                issues.append(Issue(construct=p.text, line=line0, severity="error",
                                    scope="inputs" if ctype in SCALAR or by_bytes else "kernel",   # launch() passes it
                                    message=(f"texture object '{p.name}' ({ctype}): Metal textures are another API "
                                             "that MLX kernels do not take; port by hand")
                                    if analysis_texture(ctype) else
                                    (f"parameter '{p.name}' is passed {passing(p)} and {problem}: "
                                     + ("its pointers mean nothing in another address space; pass the buffers as "
                                        "parameters" if problem.kind == "pointer" else
                                        "both ports compute doubles as float (Metal has no double), so its layout "
                                        "differs there; pass its fields separately"))
                                    if problem is not None and problem.kind in ("pointer", "double") else
                                    f"parameter '{p.name}' of type {ctype} is passed {passing(p)}: only scalars "
                                    "and pointers map onto MLX kernel inputs (launch() passes a file-scope struct "
                                    "without pointers as its bytes)"))
            plan.order.append(("scalar", len(plan.scalars)))
            plan.scalars.append(_Scalar(p.name, p.type, _ctype_dtype(p.type, template_types)))
    if not any(a.output for a in plan.arrays):
        issues.append(Issue(construct=k.name, line=line0, severity="error", scope="inputs",
                            message="kernel(*inputs) found no pointer parameter the kernel writes: MLX kernels need "
                                    "at least one output (launch() takes every non-const pointer as in-out)"))

    # -- Metal body and header ----------------------------------------------------------------
    shared_names = {s.name for s in k.shared}
    # (with those the member functions of the classes it uses call: placed before those classes, _helper_places)
    helpers, from_classes = _helpers_with_class_callees(k, parse_result, src_path)
    helpers, _twins = analysis.double_twins(helpers)   # f(double) beside f(float): one function in float ports
    for h in _twins:
        issues.append(Issue(construct=h.text.split("{")[0].strip(), line=h.range.start.line, severity="warning",
                            message=f"'{h.name}' on doubles is its float overload once both ports compute doubles "
                                    "as float: the ports keep the float one"))
    # member functions of the classes it uses that read thread attributes or declare __shared__ storage take them
    # like helpers; classes whose objects live in threadgroup memory get threadgroup member functions (classmembers.py)
    cmembers, members = _class_members(k, helpers, parse_result, src_path)
    from .helpershared import helper_shared   # shared arrays helpers (or the file) declare: Metal declares them
    _type_rules = table.by_kind("type")       # in the kernel
    hshared = helper_shared(k, helpers + members, lambda t: (_type_rules[" ".join(t.split())].metal
                                                   if " ".join(t.split()) in _type_rules else t),
                            set(_identifiers(k.text)),
                            sum((_file_shared_cached(t) for t in _included_texts(parse_result.source, src_path)), ())
                            + _file_shared_cached(parse_result.source))   # (a local header's ones too)
    shared_names |= {s.name for s in hshared.file_scope}
    # the CUDA-backend port declares the file-scope ones in its header, as written
    file_shared_decls = list(dict.fromkeys(s.text.strip() for s in hshared.file_scope))
    for construct, line, message in hshared.problems:
        issues.append(Issue(construct=construct, line=line, severity="error", message=message))
    ctx = RewriteContext(shared_names=shared_names, outputs={a.name for a in plan.arrays if a.output},
                         helper_pointer_spaces=analysis.helper_pointer_spaces(k, helpers, shared_names,
                                                                              hshared.tg_names))
    if members:
        from .classmembers import class_terms
        hshared.params = class_terms(cmembers, hshared.params)
    ctx.helper_params, ctx.hoisted, ctx.dynamic_alias = hshared.params, hshared.hoisted, hshared.alias
    ctx.dynamic_shared.update(hshared.dynamic)
    atomic_callees = {r.callee for r in table.rules if r.requires == "atomic_outputs"}
    ctx.atomic = bool(atomic_callees & set(_identifiers(k.body)))
    ctx.helper_attrs = _helper_attributes(table, helpers + members, shared_names)
    ctx.tg_classes, ctx.tg_data = set(cmembers.tg_classes), dict(cmembers.tg_data)
    ctx.tg_types = {n for c in cmembers.tg_resident for n in cmembers.type_names(c)}
    ctx.class_names = set(cmembers.classes)
    from .wmma import fragment_aliases   # helpers' fragment references get `thread` in Metal (wmma.py)
    ctx.fragment_types = fragment_aliases(parse_result.source)
    rw = Rewriter(table, line_offset=line0, context=ctx)
    _, metal_body = rw.rewrite_function(k.text, helper=False)
    metal_body = _with_vote(_with_clock(_align_first(_with_hoisted(metal_body, hshared.kernel_decls))))
    header_parts = []
    device_classes = _device_class_names(k, parse_result.preamble)
    preamble = analysis.needed_preamble(parse_result.preamble, [k.text] + [h.text for h in helpers]
                                        + _instantiated_types(k, parse_result.source) + device_classes
                                        + file_shared_decls)
    preamble = _namespace_aliases(parse_result.source, [k.text] + [h.text for h in helpers] + preamble, preamble) \
        + _primary_declarations(helpers, parse_result.source) \
        + [_without_host_members(e, parse_result.preamble) for e in preamble]
    issues += _class_problems(cmembers, ctx, parse_result.source, src_path, line0)
    from .classcheck import shared_object_calls   # member calls on a __shared__ object of a class whose objects
    issues += [Issue(construct=c, line=ln, severity="error", message=msg) for c, ln, msg in shared_object_calls(
        preamble, [(k.text, line0)] + [(h.text, h.range.start.line) for h in helpers], cmembers.mixed)]   # also
    # live in thread memory (classcheck.py)
    places = _helper_places(preamble, helpers, from_classes)
    pre = Rewriter(table, line_offset=0, context=ctx)
    helper_parts = []
    for h in helpers:
        hr = Rewriter(table, line_offset=h.range.start.line, context=_helper_ctx(ctx, hshared, h))
        whole, _ = hr.rewrite_function(h.text, helper=True)
        helper_parts.append(in_namespaces_of(h, whole))
        rw.issues += hr.issues
        rw.applied += [a for a in hr.applied if a not in rw.applied]
    header_parts = _interleaved(preamble, lambda run: [_metal_entries(pre, run)], helpers, helper_parts, places)
    rw.applied += [a for a in pre.applied if a not in rw.applied]
    # MLX glues its generated signature straight onto the header: end it with a newline
    metal_header = "\n\n".join(header_parts) + "\n" if header_parts else ""
    support = metal_support("\n".join(header_parts) + metal_body)
    if support:
        metal_header = support + "\n" + metal_header
    metal_header = _cuda_arch(metal_header + metal_body) + metal_header
    from .wmma import metal_issues as _wmma_issues   # what the Metal port's wmma cannot do (wmma.py)
    wmma_issues = _wmma_issues(k.text, line0) + [i for h in helpers for i in _wmma_issues(h.text, h.range.start.line)]
    rw.issues += wmma_issues
    rw_issues = list(rw.issues)
    for i in rw.issues:
        issues.append(i)
    dyn = [s for s in list(k.shared) + hshared.shared if s.dynamic]
    if len(dyn) > 1:
        issues.append(Issue(construct="extern __shared__", line=dyn[1].line, severity="error",
                            message="several extern __shared__ arrays alias one buffer in CUDA; in Metal each "
                                    "becomes its own array: merge them into one before porting"))

    # -- CUDA-backend body ----------------------------------------------------------------------
    cuda_header_parts = ["#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif"]
    if "cooperative_groups" in "\n".join(preamble) or "cooperative_groups::" in k.text \
            or any("cooperative_groups::" in h.text for h in helpers):
        cuda_header_parts.append("#include <cooperative_groups.h>")
        if re.search(r"::reduce\s*\(", k.text + "".join(h.text for h in helpers)):
            cuda_header_parts.append("#include <cooperative_groups/reduce.h>")
    if re.search(r"\bdouble\b", "\n".join([k.text] + [h.text for h in helpers] + preamble)):
        # MLX arrays on a GPU have no float64 (launch() passes double buffers as float32, as the Metal port takes
        # them): the CUDA-backend port computes in float like the Metal port
        cuda_header_parts.append("#define double float   // ksearch: MLX GPU arrays have no float64")
        issues.append(Issue(construct="double", line=line0, severity="warning",
                            message="double buffers and arithmetic are float in both ports (MLX GPU arrays have no "
                                    "float64; Metal has no double)"))
    if _LEGACY_WARP.search("\n".join([k.text] + [h.text for h in helpers] + preamble)):
        # pre-CUDA 9 shuffles and votes: NVRTC declares them only below sm_70; the CUDA-backend port maps them
        # onto their _sync forms over the full warp, which is what they meant
        cuda_header_parts.append(LEGACY_WARP_CUDA)
    from .wmma import cuda_header_lines   # <mma.h> and the file's nvcuda namespace lines (wmma.py)
    cuda_header_parts += cuda_header_lines(parse_result.source, [k.text] + [h.text for h in helpers])
    from .launch import tag_support   # a std integral constant tag the body reads: NVRTC has no <type_traits>
    if tag_support(k, parse_result.preamble):
        cuda_header_parts.append(tag_support(k, parse_result.preamble))
    from .curand import support as curand_support, uses_curand   # cuRAND's device API (curand.py)
    if uses_curand("\n".join([k.text] + [h.text for h in helpers] + preamble)):
        cuda_header_parts.append(curand_support("cuda"))
    cuda_base = list(cuda_header_parts)
    cuda_header_parts += _interleaved(preamble + file_shared_decls, list, helpers,
                                      [in_namespaces_of(h, h.text) for h in helpers], places)
    cuda_header = "\n\n".join(cuda_header_parts) + "\n"
    for i in issues:   # these break the CUDA-backend port too
        if i.construct.endswith("<<<...>>>") or i.construct in ("grid.sync()", "this_grid()"):
            i.message += _NOR_CUDA
    # -- the launch() path: CUDA's parameter order, pointers cast from flat inputs, in-out buffers --------
    from . import launch as lp
    from . import symbols as sy
    type_rules = table.by_kind("type")

    def metal_type(t: str) -> str:
        r = type_rules.get(" ".join(t.split()))
        return r.metal if r is not None and r.metal else t

    # __constant__ tables the program fills and __device__ variables: launch() passes them as buffers (symbols.py)
    syms = sy.used(sy.file_symbols(parse_result.source, parse_result.preamble), [k.text] + [h.text for h in helpers])
    syms = [x for x in syms if x.name not in {p.name for p in k.params}]
    hsyms = sy.helper_symbols(helpers, syms)
    if syms:
        issues.append(Issue(construct=syms[0].decl, line=line0, severity="error", scope="inputs",
                            message=f"the kernel uses file-scope device memory ({', '.join(x.name for x in syms)}): "
                                    "kernel(*inputs) does not take it; launch(..., symbols={name: contents}) does"))
    lpreamble = [e for e in preamble if not sy.declares(e, syms)]
    from .layout import source_files   # (the helpers may follow a struct's pointer field; files place the field)
    params_table = lp.param_table(k, written, set(template_types), parse_result.preamble, issues,
                                  texts=[h.text for h in helpers], sources=source_files(parse_result.source, src_path))
    for e in params_table:   # a lifted pointer field: which struct argument's field it is (captask, portcheck)
        lf = next((x for x in lifts if x.name == e["name"]), None)
        if lf is not None:
            e["lifted"] = {"param": lf.param, "field": lf.field, "at": lf.at}
    for e in params_table:   # a texture's texels and geometry: launch() takes an unbound texture as an empty one
        head, _, tail = e["name"].rpartition("__")
        if e["name"] in _textures or (head in _textures and tail in ("w", "h", "d", "m")):
            e["texture"] = True
    lctx = RewriteContext(shared_names=set(shared_names), outputs=set(), cast_atomics=True,
                          helper_pointer_spaces=ctx.helper_pointer_spaces, helper_attrs=ctx.helper_attrs,
                          helper_params={n: list(hshared.params.get(n, [])) + [(x.param("metal", metal_type), x.name)
                                                                              for x in hsyms.get(n, [])]
                                         for n in set(hshared.params) | set(hsyms)},
                          hoisted=hshared.hoisted, dynamic_alias=hshared.alias,
                          tg_classes=ctx.tg_classes, tg_types=ctx.tg_types, tg_data=ctx.tg_data)
    lctx.fragment_types, lctx.class_names = ctx.fragment_types, ctx.class_names
    lctx.dynamic_shared.update(hshared.dynamic)
    lrw = Rewriter(table, line_offset=line0, context=lctx)
    _, launch_metal_body = lrw.rewrite_function(k.text, helper=False)
    launch_metal_body = _with_vote(_with_clock(_align_first(_with_hoisted(launch_metal_body, hshared.kernel_decls))))
    lheader_parts = []
    launch_issues = list(lrw.issues) + wmma_issues   # the launch() port has the same Metal wmma
    lpre = Rewriter(table, line_offset=0, context=lctx)
    lhelper_parts = []
    for h in helpers:
        lhr = Rewriter(table, line_offset=h.range.start.line, context=_helper_ctx(lctx, hshared, h))
        whole, _ = lhr.rewrite_function(h.text, helper=True)
        lhelper_parts.append(in_namespaces_of(h, whole))
        launch_issues += lhr.issues
    lplaces = _helper_places(lpreamble, helpers, from_classes)
    lheader_parts += _interleaved(lpreamble, lambda run: [_metal_entries(lpre, run)], helpers, lhelper_parts, lplaces)
    launch_issues += lpre.issues
    # problems only the `kernel(*inputs)` wrapper has (outputs as fresh arrays, atomic<T> outputs): launch()
    # translates the same code without them, so they never block a port checked through launch()
    launch_keys = {(i.construct, i.line, i.message) for i in launch_issues}
    for i in issues:
        if i.severity == "error" and i.scope == "kernel" and any(i is r for r in rw_issues) \
                and (i.construct, i.line, i.message.removesuffix(_NOR_CUDA)) not in launch_keys:
            i.scope = "inputs"
    uses_atomics = any("ks_atomic_" in x for x in [launch_metal_body] + lheader_parts)
    support = metal_support("\n".join(lheader_parts) + launch_metal_body)
    launch_metal_header = (lp.metal_atomic_helpers() if uses_atomics else "") + (support + "\n" if support else "") \
        + "\n\n".join(lheader_parts) + "\n"
    launch_metal_header = _cuda_arch(launch_metal_header + launch_metal_body) + launch_metal_header
    # the CUDA-backend launch: without the symbols' declarations; helpers that use one take it as a parameter
    launch_cuda_body = k.body
    launch_cuda_helpers = [in_namespaces_of(h, h.text) for h in helpers]
    if hsyms:
        from .rules import RuleTable
        cctx = RewriteContext(helper_params={n: [(x.param("cuda"), x.name) for x in v] for n, v in hsyms.items()})
        plain = RuleTable(version=table.version, rules=[])
        _, launch_cuda_body = Rewriter(plain, line_offset=line0, context=cctx).rewrite_function(k.text, helper=False)
        launch_cuda_helpers = [in_namespaces_of(h, Rewriter(plain, line_offset=h.range.start.line, context=cctx)
                                                .rewrite_function(h.text, helper=True)[0]) for h in helpers]
    launch_cuda_header = "\n\n".join(cuda_base + _interleaved(lpreamble + file_shared_decls, list, helpers,
                                                             launch_cuda_helpers, lplaces)) + "\n" \
        if syms else cuda_header
    sym_metal = "".join(x.view("metal", metal_type) for x in syms)
    sym_cuda = "".join(x.view("cuda") for x in syms)

    # -- the launch, shapes and scalars ----------------------------------------------------------
    _plan_launch(plan, k, launch, profile, template_values, issues, source_bytes, fnames)
    macros = [f"{py_name(n)} = {v}" for n, v in analysis.define_constants(parse_result.preamble).items()]
    plan.config_lines = macros + [f"{py_name(n)} = {v}" for n, v in host_fns.items()] + plan.config_lines
    from .layout import double_repack   # functors of the file holding doubles: launch() hands both ports floats
    plan.struct_repack = {n: (r[0], r[1]) for n in device_classes
                          for r in [double_repack(n, parse_result.preamble)] if r is not None}
    if any(tp.kind != "typename" for tp in k.template_params):   # `template <test_t T>` launched as <WRITE>
        enum_env = analysis.constants_env([e for e in parse_result.preamble if analysis.is_enum(e)], {})
        plan.enumerators = {n: v for n, v in enum_env.items() if isinstance(v, int)}

    # -- scalar prologue (same text for both dialects, Metal types translated) ---------------------
    prologue_cuda = "".join(f"    {s.ctype} {s.name} = {s.name}_arg[0];\n" for s in plan.scalars)
    prologue_metal = Rewriter(table).rewrite_snippet(prologue_cuda) + ("\n" if prologue_cuda else "")
    tags_cuda, tags_metal = (lp.tag_declarations(k, parse_result.preamble, d) for d in ("cuda", "metal"))
    metal_source = (("    // scalar parameters arrive as 1-element arrays\n" + prologue_metal) if prologue_cuda else "") \
        + tags_metal + _dedent_body(metal_body)
    cuda_source = (("    // scalar parameters arrive as 1-element arrays\n" + prologue_cuda) if prologue_cuda else "") \
        + tags_cuda + _dedent_body(k.body)
    note = "    // launch(): pointers arrive as flat arrays <name>_in / <name>_inout, scalars as 1-element arrays\n"
    structs = {e["name"]: e for e in params_table if e.get("struct")}
    # a parameter of a template type (`template <class Payoff> k(Payoff p)`): a number or, where the instantiation
    # makes it a struct of the file, its bytes (launch() then defines KS_STRUCT_<type>)
    ttyped = {e["name"]: e["template_type"] for e in params_table if e.get("template_type") and not e["pointer"]}
    if structs or ttyped:   # by-value structs arrive as their bytes: the kernel reinterprets them

        def one(s, dialect):
            ctype = s.ctype if dialect == "cuda" else metal_type(s.ctype)
            bare = " ".join(ctype.replace("const", " ").split())
            plain = f"    {s.ctype} {s.name} = {s.name}_arg[0];"
            plain = plain + "\n" if dialect == "cuda" else Rewriter(table).rewrite_snippet(plain) + "\n"
            if s.name in structs:
                return lp.struct_prologue(s.name, bare, dialect)
            if s.name in ttyped:
                return (f"#ifdef KS_STRUCT_{ttyped[s.name]}\n" + lp.struct_prologue(s.name, bare, dialect)
                        + "#else\n" + plain + "#endif\n")
            return plain
        l_cuda = "".join(one(s, "cuda") for s in plan.scalars)
        l_metal = "".join(one(s, "metal") for s in plan.scalars)
    else:
        l_cuda, l_metal = prologue_cuda, prologue_metal
    launch_metal_source = note + lp.pointer_prologue(k, params_table, "metal", metal_type) + sym_metal + l_metal \
        + ("\n" if l_metal and not l_metal.endswith("\n") else "") + tags_metal + _dedent_body(launch_metal_body)
    launch_cuda_source = note + lp.pointer_prologue(k, params_table, "cuda", metal_type) + sym_cuda + l_cuda \
        + tags_cuda + _dedent_body(launch_cuda_body)

    # -- shared memory budget --------------------------------------------------------------------
    env = analysis.constants_env(parse_result.preamble, {n: _try_eval(v) for n, v in template_values.items()})
    static_bytes = 0
    for s in list(k.shared) + hshared.shared:
        if s.dynamic:
            continue
        n = 1
        for size in s.sizes:
            v = analysis.eval_size(size, env) if size else None
            if v is None:
                n = None
                break
            n *= v
        if n is None:
            issues.append(Issue(construct=s.text, line=s.line, severity="info",
                                message=f"size of shared array '{s.name}' not known at translation time"))
            continue
        static_bytes += n * analysis.MX_SIZE.get(analysis.C_TO_MX.get(s.type, "float32"), 4)
    if static_bytes > APPLE_THREADGROUP_BYTES:
        issues.append(Issue(construct="__shared__", line=k.shared[0].line, severity="error",
                            message=f"{static_bytes} bytes of shared memory; an Apple GPU threadgroup has at most "
                                    f"{APPLE_THREADGROUP_BYTES} (tile smaller, or keep more in registers)"))
    dyn_templates = []
    for s in dyn:
        const = ctx.dynamic_shared.get(s.name, f"{s.name.upper()}_SIZE")
        elem = analysis.MX_SIZE.get(analysis.C_TO_MX.get(s.type, "float32"), 4)
        dyn_templates.append((const, f"max(1, int(shared_mem) // {elem})"))
        if plan.smem in ("0", ""):
            issues.append(Issue(construct=s.text, line=s.line, severity="error", scope="launch_config",
                                message=f"extern __shared__ '{s.name}' needs a size: no launch site gives the "
                                        f"shared-memory bytes; set shared_mem in launch_config()"))

    from .emit import emit_module   # local import: emit imports this module's types
    tr = Translation(kernel=k.name, source_path=src_path,
                     module_path=str(module_path_for(src_path)) if src_path else None,
                     family=profile.family if profile else None, module_text="", metal_source=metal_source,
                     cuda_source=cuda_source, header=metal_header, cuda_header=cuda_header,
                     input_names=_input_names(plan), output_names=[a.name for a in plan.arrays if a.output],
                     atomic_outputs=ctx.atomic, report=issues, rules_applied=list(rw.applied))
    tr.params = params_table
    tr.template_params = [{"name": t.name, "kind": "function", "value": fn_args[t.name]} if t.name in fn_args
                          else {"name": t.name, "kind": "typename" if t.kind == "typename" else "value"}
                          for t in declared_tparams]
    tr.launch_input_names = lp.launch_input_names(k, params_table) + [x.input_name for x in syms]
    tr.symbols = [x.entry() for x in syms]
    tr.launch_cuda_header = launch_cuda_header
    tr.launch_metal_source, tr.launch_cuda_source = launch_metal_source, launch_cuda_source
    tr.launch_metal_header = launch_metal_header
    tr.launch_dynamic_shared = [(lctx.dynamic_shared.get(s.name, f"{s.name.upper()}_SIZE"),
                                 lp.POINTEE.get(lp.norm_type(s.type), ("", 4))[1]) for s in dyn]
    tr.task_hint = _task_hint(plan, profile, k, template_values)
    if profile is not None:
        ref = profile.reference
        for n, v in template_values.items():
            ref = _replace_word(ref, n, v)
        tr.task_hint["reference"] = "import math\n\nimport mlx.core as mx\n\n\n" + ref
    tr.module_text = emit_module(tr, plan, profile, template_values, dyn_templates, static_bytes, k)
    return tr


def _with_resolved_conditionals(parse_result: ParseResult, kernel_name: str) -> ParseResult:
    """`parse_result` re-read with the file's preprocessor conditionals decided by the macros its program, local
    headers and own text define (source/conditionals.py; every line keeps its number); the same parse_result when
    nothing changes or the kernel is no longer found."""
    from ..source import find_kernels
    from ..source.conditionals import known_macros, resolve_conditionals

    try:
        before = find_kernels(parse_result.source, parse_result.path)
        own = set(before.preamble)
        extra = [e for e in parse_result.preamble if e not in own]   # the program's and headers' entries
        text, _ = resolve_conditionals(parse_result.source, known_macros(extra))
        if text == parse_result.source:
            return parse_result
        new = find_kernels(text, parse_result.path)
    except Exception:   # a reading this cannot follow: the file as it is
        return parse_result
    if new.kernel(kernel_name) is None:
        return parse_result
    new.preamble = extra + [e for e in new.preamble if e not in extra]
    own_helpers = {h.text for h in before.helpers}
    names = {h.name for h in new.helpers}
    new.helpers = [h for h in parse_result.helpers if h.text not in own_helpers and h.name not in names] + new.helpers
    return new


def _with_vote(body: str) -> str:
    """The kernel's Metal body with the threadgroup counter of its voting barriers declared first (metal_support.VOTE)."""
    if "ks_vote" not in body:
        return body
    return "\n    threadgroup atomic_int ks_vote[1];   // ksearch: __syncthreads_count/_and/_or count here\n" \
        + body.lstrip("\n")


def _with_clock(body: str) -> str:
    """The kernel's Metal body with its per-thread clock counter declared first where it (or a helper it passes the
    counter to) reads the clock: Metal has no clock (specs/translation.yaml time.clock)."""
    import re
    if not re.search(r"\bks_clock_ticks\b", body):
        return body
    return "\n    ulong ks_clock_ticks = 0;   // ksearch: Metal has no clock: clock()/clock64() count this thread's reads\n" \
        + body.lstrip("\n")


def _with_hoisted(body: str, decls: list[str]) -> str:
    """The kernel's Metal body with the shared arrays its helpers declare, declared first (helpershared.py)."""
    if not decls:
        return body
    lead = "\n    // ksearch: threadgroup arrays the helpers declare (Metal declares them in the kernel)\n"
    return lead + "".join(f"    {d}\n" for d in decls) + body.lstrip("\n")


def _helper_ctx(ctx: RewriteContext, hshared, h: KernelInfo) -> RewriteContext:
    """`ctx` for rewriting helper `h`: its threadgroup parameters (shared arrays it declares or is passed) count
    as shared memory in its body (local pointers into them are `threadgroup`)."""
    import dataclasses
    spaces = ctx.helper_pointer_spaces.get(h.name, {})
    extra = set(hshared.tg_names.get(h.name, set())) | {p.name for i, p in enumerate(h.params)
                                                          if spaces.get(i) == "threadgroup"}
    if not extra:
        return ctx
    return dataclasses.replace(ctx, shared_names=set(ctx.shared_names) | extra)


def analysis_texture(ctype: str) -> bool:
    from .launch import TEXTURE_TYPES, norm_type
    return norm_type(ctype) in TEXTURE_TYPES


def lp_struct_ok(ctype: str, preamble: list[str]) -> bool:
    """A by-value struct that launch() passes as its bytes (no pointers, no doubles)."""
    from . import launch as lp
    from .layout import by_value_problem
    return by_value_problem(lp.norm_type(ctype), preamble) is None


def _helper_pool(parse_result: ParseResult, src_path: str | None) -> list[KernelInfo]:
    """The device helpers of the local headers the file includes (next to the file) that it does not define
    itself, then the file's own."""
    import os
    pool = list(parse_result.helpers)
    if not src_path or "#include" not in parse_result.source:
        return pool
    from .headers import header_helpers
    names = {h.name for h in pool}
    try:
        extra = _header_helpers_cached(parse_result.source, os.path.dirname(os.path.abspath(src_path)))
    except Exception:   # a header that cannot be read or parsed gives no helpers
        extra = []
    # a header's helpers come first, as its #include puts them before the file's own code
    return [h for h in extra if h.name not in names] + pool


def _included_texts(source: str, src_path: str | None) -> tuple[str, ...]:
    """The local headers the file includes (next to it), for constructs defined there (sharedproxy.py)."""
    import os
    if not src_path or "#include" not in source:
        return ()
    try:
        return _included_texts_cached(source, os.path.dirname(os.path.abspath(src_path)))
    except Exception:   # a header that cannot be read gives nothing
        return ()


@lru_cache(maxsize=16)
def _included_texts_cached(source: str, folder: str) -> tuple[str, ...]:
    from .headers import included_texts
    return tuple(included_texts(source, [folder]))


@lru_cache(maxsize=16)
def _header_helpers_cached(source: str, folder: str) -> list[KernelInfo]:
    from .headers import header_helpers
    return header_helpers(source, [folder])


def _namespace_aliases(source: str, texts: list[str], preamble: list[str]) -> list[str]:
    """File-scope `namespace cg = cooperative_groups;` / `using namespace cooperative_groups;` lines the code
    relies on (both ports' headers need them; Metal's header defines the namespace, metal_support.py)."""
    import re
    used = set(_identifiers("\n".join(texts)))
    out = []
    from .wmma import uses_wmma
    wmma = any(uses_wmma(x) for x in texts)   # nvcuda's lines only where the code uses wmma (wmma.py defines it)
    for m in re.finditer(r"^[ \t]*(?:namespace\s+(\w+)\s*=\s*(?:::)?([\w:]+)|using\s+namespace\s+((?:::)?"
                         r"(?:cooperative_groups|nvcuda)[\w:]*))\s*;", source, re.M):
        line = m.group(0).strip()
        if line in preamble or line in out:
            continue
        if "nvcuda" in line and not wmma:
            continue
        if m.group(3) or (m.group(1) in used and m.group(2).startswith(("cooperative_groups", "nvcuda"))):
            out.append(line)
    return out


def _function_pointer_kind(tp, source: str) -> bool:
    """Whether a non-type template parameter is a function pointer: written `R (*f)(...)`, or of a type the file
    names as one (`using fn_ptr = void (*)(float*, int);`, `typedef void (*fn_ptr)(float*, int);`)."""
    import re
    if tp.kind == "typename":
        return False
    if re.search(r"\(\s*\*", tp.text):
        return True
    kind = re.escape(tp.kind.strip())
    return re.search(rf"\busing\s+{kind}\s*=[^;]*\(\s*\*\s*\)\s*\(|\btypedef\b[^;]*\(\s*\*\s*{kind}\s*\)\s*\(",
                     source) is not None


def function_name(arg: str | None) -> str | None:
    """The function a function template argument names (`f`, `&f`, `ns::f`, `(&f)`), else None."""
    import re
    m = re.fullmatch(r"\s*\(?\s*&?\s*\(?\s*(?:[\w]+\s*::\s*)*(\w+)\s*\)?\s*\)?\s*", arg or "")
    return m.group(1) if m else None


def _device_function_named(arg: str | None, parse_result: ParseResult, src_path: str | None) -> str | None:
    """The device function of the file (or its local headers) that a function template argument names, else None."""
    name = function_name(arg)
    return name if name and any(h.name == name for h in _helper_pool(parse_result, src_path)) else None


def _with_function_args(k: KernelInfo, function_args: dict[str, str]) -> KernelInfo:
    """The kernel instantiated at its function template arguments: the parameter's calls in the body call the
    function itself (both ports call it directly; Metal has no function pointers), and the parameter leaves the
    kernel's template list."""
    def sub(text: str) -> str:
        for name, fn in function_args.items():
            text = _replace_word(text, name, fn)
        return text
    cut = k.text.find("{")
    text = k.text if cut < 0 else k.text[:cut] + sub(k.text[cut:])
    return k.model_copy(update={"body": sub(k.body), "text": text,
                                "template_params": [tp for tp in k.template_params if tp.name not in function_args]})


def _helper_attributes(table: RuleTable, helpers: list[KernelInfo], shared_names: set[str]) -> dict[str, list[str]]:
    """{helper: Metal thread attributes it reads, directly or through the helpers it calls}: Metal gives them to
    the kernel only, so such helpers take them as trailing parameters (metal_support.py)."""
    import re
    direct: dict[str, set[str]] = {}
    for h in helpers:
        scratch = Rewriter(table, line_offset=h.range.start.line,
                           context=RewriteContext(shared_names=set(shared_names)))
        whole, _ = scratch.rewrite_function(h.text, helper=True)
        # overloads share one entry (their calls are told apart by the C++ compiler, not here): every overload
        # takes the attributes any of them reads, so a wrapper overload calling the one that reads them passes them
        direct.setdefault(h.name, set()).update(a for a in THREAD_ATTRIBUTES if re.search(r"\b" + a + r"\b", whole))
    calls: dict[str, set[str]] = {}
    for h in helpers:
        calls.setdefault(h.name, set()).update(set(_identifiers(h.body)) & set(direct) - {h.name})
    changed = True
    while changed:
        changed = False
        for n in direct:
            more = set().union(*(direct[c] for c in calls[n])) - direct[n] if calls[n] else set()
            if more:
                direct[n] |= more
                changed = True
    return {n: [a for a in THREAD_ATTRIBUTES if a in v] for n, v in direct.items() if v}


_CLASS_ENTRY = re.compile(r"\s*(?:template\s*<(?:[^<>;{}]|<[^<>;{}]*>)*>\s*)?(?:typedef\s+)?(?:struct|class|union)\b")


def _helpers_with_class_callees(k: KernelInfo, parse_result: ParseResult, src_path: str | None
                                ) -> tuple[list[KernelInfo], set[str]]:
    """The helpers the kernel calls and those the member functions of the classes it uses call (callees first), and
    the names of the latter (the ports' headers put them among the file-scope entries, before the classes:
    _helper_places)."""
    pool = _helper_pool(parse_result, src_path)
    helpers = analysis.called_helpers(k, pool)
    if not pool:
        return helpers, set()
    texts = [k.text] + [h.text for h in helpers] + _instantiated_types(k, parse_result.source)
    classes = [e for e in analysis.needed_preamble(parse_result.preamble, texts)
               if "(" in e and _CLASS_ENTRY.match(analysis.unwrap_namespaces(e))]
    if not classes:
        return helpers, set()
    from_classes = analysis.called_helpers(k.model_copy(update={"text": "\n".join(classes)}), pool)
    if not from_classes:
        return helpers, set()
    return (analysis.called_helpers(k.model_copy(update={"text": k.text + "\n" + "\n".join(classes)}), pool),
            {h.name for h in from_classes})


def _helper_places(preamble: list[str], helpers: list[KernelInfo], from_classes: set[str]) -> dict[str, int]:
    """{helper: index of the file-scope entry it goes before} for the helpers classes call: right after the last
    entry it names (a macro, a type) and after its callees, so that a class after it finds it declared. Others
    follow all the entries, as before."""
    if not from_classes:
        return {}
    provides = [analysis.entry_provides(e) for e in preamble]
    names = {h.name for h in helpers}
    at: dict[str, int] = {}
    for h in helpers:   # callees first
        if h.name not in from_classes:
            continue
        words = set(_identifiers(h.text))
        place = max([i + 1 for i, p in enumerate(provides) if p & words] or [0])
        place = max([place] + [at.get(c, len(preamble)) for c in (set(_identifiers(h.body)) & names) - {h.name}])
        at[h.name] = place
    return {n: i for n, i in at.items() if i < len(preamble)}


def _interleaved(preamble: list[str], render, helpers: list[KernelInfo], helper_parts: list[str],
                 at: dict[str, int]) -> list[str]:
    """Header parts: the file-scope entries (`render` makes parts of a run of them) with the helpers of `at` placed
    among them, then the other helpers in their order."""
    out: list[str] = []
    start = 0
    for cut in sorted(set(at.values())) + [len(preamble)]:
        if preamble[start:cut]:
            out += render(preamble[start:cut])
        out += [p for h, p in zip(helpers, helper_parts) if at.get(h.name) == cut]
        start = cut
    return out + [p for h, p in zip(helpers, helper_parts) if h.name not in at]


def _class_members(k: KernelInfo, helpers: list[KernelInfo], parse_result: ParseResult, src_path: str | None):
    """(what classmembers.py finds about the classes the kernel and its helpers use, their member functions as
    helpers for helper_shared and the thread-attribute analysis)."""
    from . import classmembers as cmod
    texts = [k.text] + [h.text for h in helpers] + _instantiated_types(k, parse_result.source)
    entries = analysis.needed_preamble(parse_result.preamble, texts)
    if not any(re.search(r"\b(?:struct|class|union)\b", e) and "(" in e for e in entries):
        return cmod.ClassMembers(), []
    cm = cmod.read_classes(entries)
    if not cm.classes:
        return cm, []
    bodies = [m.text for c in cm.classes.values() for m in c.members]
    cmod.residency(cm, [k.text] + [h.text for h in helpers] + bodies)
    cmod.template_bindings(cm, [k.text] + [h.text for h in helpers], {t.name for t in k.template_params})
    return cm, cmod.pseudo_helpers(cm)


def _class_problems(cm, ctx: RewriteContext, source: str, src_path: str | None, line0: int) -> list[Issue]:
    """Errors for what the Metal port cannot carry of the member functions of the classes the kernel uses
    (classmembers.py), each at its line where the class is in the kernel's file, else at the kernel's line naming
    the header's."""
    import os
    from .classcheck import metal_class_problems
    from .classmembers import member_problems
    raw = member_problems(cm, ctx.helper_attrs, ctx.helper_params)
    if not raw:
        return []
    found = metal_class_problems(cm, raw, source, src_path)
    if any(not line for _, _, line, _ in found) and src_path and "#include" in source:
        from .headers import included_files
        try:
            headers = included_files(source, [os.path.dirname(os.path.abspath(src_path))])
        except Exception:   # a header that cannot be read: the class's file stays unnamed
            headers = []
        found = metal_class_problems(cm, raw, source, src_path, headers)
    own = os.path.basename(src_path or "this file")
    return [Issue(construct=construct, line=line - 1 if fname == own and line else line0, severity="error",
                  message=message) for construct, fname, line, message in found]


@lru_cache(maxsize=16)
def _file_shared_cached(source: str):
    """helpershared.file_shared of a source (one parse for all its kernels); callers must not change the items."""
    from .helpershared import file_shared
    return tuple(file_shared(source))


@lru_cache(maxsize=16)
def _host_functions_cached(source: bytes, preamble: tuple[str, ...]) -> dict[str, str]:
    """host_functions() once per file text: the language server translates every kernel of a file."""
    return host_functions(source, list(preamble))


def _instantiated_types(k, source: str) -> list[str]:
    """Type names the file passes as template arguments (`runTest<RGBA8>(...)`, `k<float><<<...>>>`), for a kernel
    with typename parameters: launch() declares them as its template types, so both headers need their
    definitions."""
    import re
    if not any(tp.kind == "typename" for tp in k.template_params):
        return []
    return sorted(set(re.findall(r"\b[A-Za-z_]\w*\s*<\s*([A-Za-z_]\w*)\s*(?:,[^<>;]*)?>\s*(?:\(|<<<)", source or "")))


_LEGACY_WARP = re.compile(r"\b__(?:shfl|shfl_up|shfl_down|shfl_xor|any|all|ballot)\s*\(")
LEGACY_WARP_CUDA = """// ksearch: pre-CUDA 9 warp shuffles and votes (not declared for sm_70 and later) as their _sync forms
template <typename T> __device__ inline T ks_shfl(T v, int s, int w = 32) { return __shfl_sync(0xffffffffu, v, s, w); }
template <typename T> __device__ inline T ks_shfl_up(T v, unsigned d, int w = 32) { return __shfl_up_sync(0xffffffffu, v, d, w); }
template <typename T> __device__ inline T ks_shfl_down(T v, unsigned d, int w = 32) { return __shfl_down_sync(0xffffffffu, v, d, w); }
template <typename T> __device__ inline T ks_shfl_xor(T v, int m, int w = 32) { return __shfl_xor_sync(0xffffffffu, v, m, w); }
#define __shfl(...) ks_shfl(__VA_ARGS__)
#define __shfl_up(...) ks_shfl_up(__VA_ARGS__)
#define __shfl_down(...) ks_shfl_down(__VA_ARGS__)
#define __shfl_xor(...) ks_shfl_xor(__VA_ARGS__)
#define __any(p) __any_sync(0xffffffffu, (p))
#define __all(p) __all_sync(0xffffffffu, (p))
#define __ballot(p) __ballot_sync(0xffffffffu, (p))
"""


def _without_host_members(entry: str, preamble: list[str]) -> str:
    """A class definition without its host-only member functions (no `__device__`, not constexpr: an
    `operator new` that calls cudaMallocManaged, a method that prints): device code cannot call them, and neither
    port's compiler has the host API they call."""
    if not re.match(r"\s*(?:template\s*<[^{;]*>\s*)?(?:struct|class)\b", analysis.unwrap_namespaces(entry)) \
            or "(" not in entry:
        return entry
    from ..launchsites import balanced
    from ..sim.preprocess import mask_comments
    code = mask_comments(entry)
    open_at = code.find("{")
    if open_at < 0:
        return entry
    from ..sim.preprocess import device_qualifiers
    device = device_qualifiers("\n".join(preamble)) | {"constexpr"}
    spans, depth, seg, i = [], 0, open_at + 1, open_at + 1
    while i < len(code):
        c = code[i]
        if c == "}" and depth == 0:
            break
        if c in ";}":
            seg = i + 1
        elif c == "{":
            close = balanced(code, i, "{", "}")
            if close <= 0:
                return entry
            head = re.sub(r"\b(?:public|private|protected)\s*:(?!:)", lambda m: " " * len(m.group(0)), code[seg:i])
            start = seg + len(head) - len(head.lstrip())
            # a member function's head (not `T x = {...}`; `operator=` is a name)
            name_part = re.sub(r"\boperator\s*[^\s(]+", "operator", head.split("(")[0])
            is_fn = "(" in head and not re.search(r"\b(?:struct|class|union|enum)\b", head) and "=" not in name_part
            if is_fn and not set(re.findall(r"[A-Za-z_]\w*", head)) & device:
                spans.append((start, close + 1))
            i = close
            seg = close + 1
        i += 1
    out = entry
    for a, b in reversed(spans):
        out = out[:a] + re.sub(r"[^\n]", " ", out[a:b]) + out[b:]
    return out


def _device_class_names(k, preamble: list[str]) -> list[str]:
    """For a kernel that takes a parameter of a template type by value (`template <class Payoff> k(Payoff p)`): the
    file's classes with device member functions (functors, payoffs), which an instantiation the capture records
    (`Payoff = PayoffPut`, deduced from the argument) names: both headers need their definitions."""
    typenames = {tp.name for tp in k.template_params if tp.kind == "typename"}
    if not any(not p.pointer and re.sub(r"\b(?:const|volatile)\b|[&\s]", "", p.type) in typenames for p in k.params):
        return []
    from ..sim.preprocess import device_qualifiers
    device_words = device_qualifiers("\n".join(preamble))
    out = []
    for e in preamble:
        # a plain class at file scope (a template type argument names a complete type; a class template such as
        # CUB's collectives, or one inside a namespace, is no such argument)
        m = re.match(r"\s*(?:struct|class)\s+([A-Za-z_]\w*)[^;{]*\{", e)
        if m and set(re.findall(r"[A-Za-z_]\w*", e)) & device_words:
            out.append(m.group(1))
    return out


def _cuda_arch(text: str) -> str:
    """`#if __CUDA_ARCH__ >= 700` around code the port keeps: the Metal port takes the branches a current GPU's
    device compile takes (the simulator compiles originals with the same value)."""
    if not re.search(r"\b__CUDA_ARCH__\b", text):
        return ""
    return "#ifndef __CUDA_ARCH__\n#define __CUDA_ARCH__ 900   // ksearch: the branches a current GPU compiles\n#endif\n"


_ALIGN_AFTER_SPACE = re.compile(r"\bthreadgroup(\s+)(alignas\s*\((?:[^()]|\([^()]*\))*\))")


def _align_first(text: str) -> str:
    """`threadgroup alignas(alignof(float4)) float As[16];` (from `__shared__ alignas(...)`): C++ takes no attribute
    in the middle of the declaration's specifiers, so alignas goes first."""
    return _ALIGN_AFTER_SPACE.sub(lambda m: m.group(2) + m.group(1) + "threadgroup", text)


def _metal_align(text: str) -> str:
    """CUDA's __align__(n) is C++'s alignas(n) in Metal."""
    import re
    return re.sub(r"\b__align__\s*\(", "alignas(", text)


_CLASS_HEAD = re.compile(r"^[ \t]*(?:template[ \t]*<[^;{}()]*>[ \t]*\n?[ \t]*)?(?:struct|class|union)\b"
                         r"(?:[^;{}()=]|(?:alignas|__align__)[ \t]*\([ \t]*\w+[ \t]*\))*\{", re.M)
# a member function returning a reference: `E& operator[](int j)`, `const E& at(int j) const`
_REF_RETURN = re.compile(r"(^|[;{}]|\binline\b|\bstatic\b)([ \t]*)((?:const[ \t]+)?[A-Za-z_][\w:]*(?:<[^<>;{}()]*>)?"
                         r"[ \t]*&)(?=[ \t]*(?:operator\b|[A-Za-z_]\w*[ \t]*\())", re.M)


def _primary_declarations(helpers, source: str) -> list[str]:
    """`template <typename T> __device__ T myrand(T i);`: the primary template a helper specializes explicitly
    (`template<> __device__ uint64_t myrand(uint64_t x) {...}`) where the file only declares it; C++ takes no
    specialization without it."""
    from ..sim.preprocess import mask_comments
    out = []
    code = None
    for h in helpers:
        if not re.match(r"\s*template\s*<\s*>", h.text):
            continue
        code = code if code is not None else mask_comments(source)
        m = re.search(rf"(?m)^[ \t]*template\s*<[^<>;{{}}]*(?:<[^<>;{{}}]*>[^<>;{{}}]*)*>\s*(?:(?:__device__|__host__|"
                      rf"__forceinline__|inline|static)\s+)*[\w:<>*&\s]+?\b{re.escape(h.name)}\s*\([^;{{}}]*\)\s*;", code)
        if m and m.group(0) not in out:
            out.append(source[m.start():m.end()].strip())
    return out


_TEMPLATE_DECL_QUALIFIERS = re.compile(r"(?m)^([ \t]*template\s*<[^;{}]*>\s*)((?:(?:__device__|__host__|__forceinline__)"
                                       r"\s+)+)(?=[^;{}]*\)\s*;)")


def _metal_entries(rewriter: Rewriter, run: list[str]) -> str:
    """A run of file-scope entries (macros, types, constants) in Metal."""
    text = _metal_macro_qualifiers(_metal_packed_fields(_metal_class_members(
        rewriter.rewrite_snippet(_metal_align("\n".join(run))))))
    return _TEMPLATE_DECL_QUALIFIERS.sub(lambda m: m.group(1), text)   # a function template's declaration


def _metal_macro_qualifiers(text: str) -> str:
    """`#define HD __host__ __device__` (a file's shorthand for its function qualifiers), for Metal: CUDA's
    qualifiers dropped from the macro, `__forceinline__`/`__inline__` as one `inline`."""
    def fix(m):
        body = re.sub(r"\b(?:__host__|__device__|__noinline__)\b", " ", m.group(2))
        body = re.sub(r"\b(?:__forceinline__|__inline__)\b", "inline", body)
        body = re.sub(r"\binline(?:\s+inline\b)+", "inline", body)
        return m.group(1) + " ".join(body.split())
    return re.sub(r"(?m)^([ \t]*#[ \t]*define[ \t]+[A-Za-z_]\w*(?:\([^)]*\))?[ \t]+)([^\n]*\b(?:__host__|__device__|"
                  r"__forceinline__|__noinline__|__inline__)\b[^\n]*)$", fix, text)


def _metal_class_members(text: str) -> str:
    """Inside a file-scope struct/class (template) body, for Metal: `__device__`/`__host__` dropped, `__forceinline__`
    is `inline`; a member returning a reference returns a `thread` one (an unqualified reference is not allowed in
    MSL); `static constexpr`/`static const` data members live in `constant` memory; `memcpy` (Metal has none) is `ks_memcpy`, a
    byte loop through thread pointers (metal_support.py)."""
    from ..launchsites import balanced
    out, last = [], 0
    for m in _CLASS_HEAD.finditer(text):
        if m.start() < last:
            continue
        close = balanced(text, m.end() - 1, "{", "}")
        if close <= 0:
            continue
        body = text[m.end():close]
        if "(" not in body:   # plain data: nothing to do
            continue
        body = re.sub(r"\b__forceinline__\b", "inline", body)
        body = re.sub(r"[ \t]*\b(?:__device__|__host__)\b[ \t]*", " ", body)
        body = _REF_RETURN.sub(lambda r: r.group(1) + r.group(2) + (r.group(3) if re.search(
            r"\b(?:thread|device|threadgroup|constant)\b", r.group(3)) else "thread " + r.group(3)), body)
        head = text[m.start():m.end()]
        types = set(re.findall(r"\b(?:class|typename)[ \t]+([A-Za-z_]\w*)", head.split("struct")[0].split("union")[0])
                    if head.lstrip().startswith("template") else [])
        own = re.search(r"\b(?:struct|class|union)\b(?:[ \t]+(?:alignas|__align__)[ \t]*\([^()]*\))?[ \t]+([A-Za-z_]\w*)",
                        head)
        types |= {own.group(1)} if own else set()
        types |= {"float", "int", "unsigned", "uint", "half", "bool", "char", "short", "long", "float2", "float4",
                  "int2", "int4", "uint2", "uint4", "size_t"}
        # a reference parameter of a member (`Acc operator+(const Acc& o) const`) is a `thread` reference too
        body = re.sub(r"([(,][ \t]*)((?:const[ \t]+)?(" + "|".join(sorted(types)) + r")(?:<[^<>;{}()]*>)?[ \t]*&)"
                      r"(?=[ \t]*[A-Za-z_]\w*[ \t]*[,)])", lambda r: r.group(1) + "thread " + r.group(2), body)
        body = re.sub(r"\bstatic[ \t]+(constexpr|const)\b(?![ \t]+constant\b)", r"static constant \1", body)
        body = re.sub(r"(?<![\w.:>])(?:std::)?memcpy[ \t]*\(", "ks_memcpy(", body)
        out.append(text[last:m.end()] + body)
        last = close
    return "".join(out) + text[last:] if out else text


_VEC3 = r"\b((?:u?char|u?short|u?int|uint|float|half))3\b"


def _metal_packed_fields(text: str) -> str:
    """3-vector fields of structs as Metal's packed_T3: CUDA's float3 is 12 bytes aligned to 4, Metal's 16 aligned
    to 16, so a struct holding one would have another layout in the Metal port than in the buffer it is given."""
    import re
    out, last = [], 0
    for m in re.finditer(r"\b(?:struct|union)\b[^;{}()]*\{", text):
        if m.start() < last:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[last:m.end()])
        # (not the thread attributes member functions take as parameters: classmembers.py)
        out.append(re.sub(_VEC3 + r"(?=\s+(?!(?:" + "|".join(THREAD_ATTRIBUTES) + r")\b)[A-Za-z_])",
                          lambda v: f"packed_{v.group(1)}3", text[m.end():i]))
        last = i
    out.append(text[last:])
    return "".join(out)


def _replace_word(text: str, word: str, value: str) -> str:
    import re
    return re.sub(r"\b" + re.escape(word) + r"\b", value, text)


def _identifiers(text: str) -> list[str]:
    import re
    return re.findall(r"[A-Za-z_]\w*", text)


def _try_eval(py: str):
    try:
        return eval(py, {"__builtins__": {}, "mx": None}, {})
    except Exception:
        return None


def _dedent_body(body: str) -> str:
    lines = body.strip("\n").splitlines()
    return "\n".join(lines) + "\n"


def _input_names(plan: _Plan) -> list[str]:
    names = []
    for kind, i in plan.order:
        if kind == "array" and not plan.arrays[i].output:
            names.append(plan.arrays[i].name)
        elif kind == "scalar":
            names.append(plan.scalars[i].name + "_arg")
    return names


def _host_params(host_text: bytes) -> list[Param]:
    root = parse_bytes(host_text, "cuda").root_node
    fn = next((c for c in root.children if c.type == "function_definition"), None)
    if fn is None:
        return []
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    plist = d.child_by_field_name("parameters") if d is not None else None
    out = []
    for p in (plist.named_children if plist is not None else []):
        prm = param_from_node(p, host_text, host_text)
        if prm is not None:
            out.append(prm)
    return out


def _plan_launch(plan: _Plan, k: KernelInfo, launch, profile: Profile | None, template_values: dict[str, str],
                 issues: list[Issue], source_bytes: bytes, fnames: set[str]) -> None:
    """Fills plan.config_lines (Python run by launch_config), grid/block/smem, scalar values and shapes."""
    lines: list[str] = []
    inputs = [a for a in plan.arrays if not a.output]
    # template constants first: shapes may use them
    for name, value in template_values.items():
        lines.append(f"{py_name(name)} = {value}")
    host_scalars: list[Param] = []
    host_text = b""
    if launch is not None and launch.host_byte_range is not None:
        host_text = source_bytes[launch.host_byte_range[0]:launch.host_byte_range[1]]
        host_scalars = [p for p in _host_params(host_text) if not p.pointer and "Stream" not in p.type
                        and p.type != "cudaStream_t"]
    bind_to = host_scalars if launch is not None else [type("P", (), {"name": s.name, "type": s.ctype})()
                                                       for s in plan.scalars]
    # -- shapes from the family profile ---------------------------------------------------------
    specs = profile.scalars if profile is not None and (launch is not None or profile.kernel_scalars is None) \
        else (profile.kernel_scalars if profile is not None else [])
    use_profile = profile is not None and len(profile.arrays) == len(plan.arrays) and len(specs) == len(bind_to)
    if profile is not None and not use_profile:
        issues.append(Issue(scope="launch_config", construct=k.name, line=k.range.start.line, severity="warning",
                            message=f"looks like a {profile.family} kernel but its parameters do not match the "
                                    f"{profile.family} profile ({len(profile.arrays)} arrays, "
                                    f"{len(specs)} sizes): shapes are guessed, check launch_config()"))
    taken = {a.name for a in plan.arrays}
    rename: dict[str, str] = {}
    if use_profile:
        for a, shape in zip(plan.arrays, profile.arrays):
            a.shape = list(shape)
        rename = {d: (d + "_dim" if d in taken else d) for s in profile.arrays for d in s}
        for a in plan.arrays:
            a.shape = [rename.get(d, d) if d not in template_values else d for d in a.shape]
        plan.dims = {rename.get(d, d): v for d, v in profile.dims.items()}
        known: set[str] = set(template_values)
        for a in inputs:
            for axis, d in enumerate(a.shape or []):
                if d not in known:
                    lines.append(f"{d} = {py_name(a.name)}.shape[{axis}]")
                    known.add(d)
        for p, spec in zip(bind_to, specs):
            if spec.startswith("="):
                plan.kwargs.append((py_name(p.name), spec[1:]))
            else:
                d = rename.get(spec, spec)
                if d not in known:
                    issues.append(Issue(scope="launch_config", construct=p.name, line=k.range.start.line, severity="warning",
                                        message=f"size '{p.name}' is not readable from the input shapes"))
                    plan.kwargs.append((py_name(p.name), "None"))
                elif py_name(p.name) != d:
                    lines.append(f"{py_name(p.name)} = {d}")
    else:
        ints = [p for p in bind_to if " ".join(p.type.split()) in analysis.C_TO_MX
                and "float" not in p.type and "double" not in p.type]
        floats = [p for p in bind_to if p not in ints]
        if len(ints) == 1 and inputs:
            n = py_name(ints[0].name)
            lines.append(f"{n} = {py_name(inputs[0].name)}.size")
            for a in plan.arrays:
                a.shape = [n]
            plan.dims = {n: 1024}
            issues.append(Issue(scope="launch_config", construct=k.name, line=k.range.start.line, severity="warning",
                                message=f"kernel family not recognized: every array is taken as 1-D of length "
                                        f"{ints[0].name} (= the first input's size); check launch_config()"))
        else:
            for p in ints:
                plan.kwargs.append((py_name(p.name), "None"))
            first = py_name(inputs[0].name) if inputs else None
            for a in plan.arrays:
                a.shape = None if first is None else [f"*{first}.shape"]
            issues.append(Issue(scope="launch_config", construct=k.name, line=k.range.start.line, severity="warning",
                                message="kernel family not recognized: pass the sizes ("
                                        + ", ".join(p.name for p in ints) + ") as keyword arguments to kernel(); "
                                        "outputs are shaped like the first input: check launch_config()"))
        for p in floats:
            plan.kwargs.append((py_name(p.name), "1.0"))
    # -- host code before the launch ------------------------------------------------------------
    if launch is not None:
        lines.append("stream = None")
        if host_text:
            start = launch.byte_range[0] if launch.byte_range else _byte_of_line(source_bytes, launch.range.start.line)
            launch_byte = start - launch.host_byte_range[0]
            prelude, skipped = host_prelude(host_text.decode("utf-8", "replace"), max(0, launch_byte),
                                            _line_of_byte(source_bytes, launch.host_byte_range[0]), fnames)
            lines += prelude
            for line, why in skipped:
                issues.append(Issue(scope="launch_config", construct="host code", line=line, severity="warning", message=why))
        try:
            plan.grid = f"_dim3({expr_to_py(launch.grid, launch.line, fnames)})"
            plan.block = f"_dim3({expr_to_py(launch.block, launch.line, fnames)})"
            plan.smem = expr_to_py(launch.shared_mem, launch.line, fnames) if launch.shared_mem else "0"
        except HostExprError as e:
            issues.append(Issue(scope="launch_config", construct=f"<<<{launch.grid}, {launch.block}>>>", line=e.line, message=str(e)))
        for s, arg in zip(plan.scalars, _kernel_args_for(k, launch, plan.tags)):
            try:
                s.value = expr_to_py(arg, launch.line, fnames) if arg is not None else "0"
            except HostExprError as e:
                issues.append(Issue(scope="launch_config", construct=arg, line=e.line, message=str(e)))
                s.value = "0"
        for p, arg in zip(k.params, launch.args):
            if p.pointer and arg.strip() != p.name and not arg.strip().isidentifier():
                issues.append(Issue(scope="launch_config", construct=arg, line=launch.line, severity="warning",
                                    message=f"'{p.name}' receives `{arg}` (an offset pointer?); the port passes "
                                            "the array it is given: for a pointer inside an allocation pass the "
                                            "allocation sliced at the offset (`x[R:]`), so the kernel reads the "
                                            "elements before it at negative indices as on a GPU"))
    elif use_profile and profile.launch is not None:
        plan.grid, plan.block, plan.smem = (_rename_dims(e, rename) for e in profile.launch)
        for s in plan.scalars:
            s.value = py_name(s.name)
        issues.append(Issue(scope="launch_config", construct=k.name, line=k.range.start.line, severity="warning",
                            message=f"no launch site in this file: the port uses the usual {profile.family} launch "
                                    f"(grid {plan.grid}, block {plan.block}); check launch_config()"))
    else:
        first_out = next((a for a in plan.arrays if a.output), None)
        size = f"_numel(({', '.join(first_out.shape)},))" if first_out and first_out.shape \
            and not first_out.shape[0].startswith("*") \
            else (f"{py_name(inputs[0].name)}.size" if inputs else "1")
        plan.grid = f"_dim3(_cdiv({size} + 255, 256))"
        plan.block = "_dim3(256)"
        for s in plan.scalars:
            s.value = py_name(s.name)
        issues.append(Issue(scope="launch_config", construct=k.name, line=k.range.start.line, severity="warning",
                            message="no launch site in this file: the port launches 1-D blocks of 256 threads over "
                                    "the first output; check launch_config()"))
    plan.config_lines = lines


def _rename_dims(expr: str, rename: dict[str, str]) -> str:
    for old, new in rename.items():
        if old != new:
            expr = _replace_word(expr, old, new)
    return expr


def _kernel_args_for(k: KernelInfo, launch, tags=frozenset()) -> list[str | None]:
    out = []
    for i, p in enumerate(k.params):
        if not p.pointer and i not in tags:
            out.append(launch.args[i] if i < len(launch.args) else None)
    return out


def _byte_of_line(data: bytes, line: int) -> int:
    pos = 0
    for _ in range(line):
        pos = data.index(b"\n", pos) + 1
    return pos


def _line_of_byte(data: bytes, off: int) -> int:
    return data.count(b"\n", 0, off)


def _task_hint(plan: _Plan, profile: Profile | None, k: KernelInfo, template_values: dict[str, str]) -> dict:
    dims = dict(plan.dims)
    tvals = {n: _try_eval(v) for n, v in template_values.items()}
    env = {**{n: v for n, v in tvals.items() if isinstance(v, int)}, **dims}

    def num(v):
        if isinstance(v, str):
            try:
                return float(eval(v, {"__builtins__": {}}, env))
            except Exception:
                return 1.0
        return v

    inputs, outputs = [], []
    for idx, a in enumerate(plan.arrays):
        shape = [(tvals[d] if d in tvals and isinstance(tvals[d], int) else d) for d in (a.shape or ["N"])]
        entry = {"name": a.name, "shape": shape, "dtype": a.dtype}
        if a.output:
            outputs.append(entry)
            continue
        init = dict(profile.init.get(idx, {})) if profile else {}
        if a.dtype.startswith(("int", "uint")) and not init:
            init = {"init": "randint", "low": 0, "high": 8}
        for key in ("low", "high"):
            if key in init:
                init[key] = num(init[key])
        entry.update(init)
        inputs.append(entry)
    return {"family": profile.family if profile else None, "kernel": k.name, "inputs": inputs, "outputs": outputs,
            "dims": dims, "bench_dims": dict(profile.bench_dims) if profile else {},
            "scalars": {n: d for n, d in plan.kwargs}, "template": {n: tvals[n] for n in tvals}}
