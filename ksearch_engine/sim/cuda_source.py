"""run_cuda_source: runs one ``__global__`` kernel of a whole ``.cu`` file on the CPU.

The file may hold host code (``main``, ``cudaMalloc``, ``<<<...>>>`` launches): functions that are
neither ``__global__`` nor ``__device__`` are blanked before compiling, and CUDA's own headers are
provided by ksim.h. The launch follows CUDA: ``grid`` counts blocks, ``block`` threads per block.
Pointer parameters take numpy arrays (copied in; every pointer argument is returned after the run),
scalar parameters take Python numbers; both by parameter name. A ``__constant__`` / ``__device__``
variable of the file can be given by its name too (numpy array): it is set before the launch, as
``cudaMemcpyToSymbol`` would.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np

from . import build as _build
from . import runtime as rt
from .errors import SimError
from .preprocess import _CURRENT, find_kernel, inline_local_includes, list_kernels, prepare, strip_host_code

# base type word -> numpy dtypes a pointer to it accepts
_POINTEE = {
    "float": {np.float32}, "double": {np.float64}, "__half": {np.float16}, "half": {np.float16},
    "__nv_bfloat16": {np.uint16}, "nv_bfloat16": {np.uint16},
    "int": {np.int32}, "int32_t": {np.int32}, "unsigned": {np.uint32}, "uint32_t": {np.uint32},
    "uint": {np.uint32}, "int64_t": {np.int64}, "uint64_t": {np.uint64}, "size_t": {np.uint64},
    "int8_t": {np.int8}, "uint8_t": {np.uint8}, "int16_t": {np.int16}, "uint16_t": {np.uint16},
    "bool": {np.bool_}, "float2": {np.float32}, "float4": {np.float32}, "int4": {np.int32},
    "int2": {np.int32}, "half2": {np.float16}, "__half2": {np.float16}, "char": {np.int8, np.uint8},
}


def _pointee(ptype: str) -> str | None:
    words = [w for w in re.findall(r"[A-Za-z_]\w*", ptype)
             if w not in ("const", "volatile", "__restrict__", "__restrict", "restrict", "signed", "struct")]
    if "unsigned" in words:
        rest = [w for w in words if w != "unsigned"]
        if not rest or rest == ["int"]:
            return "unsigned"
        return None
    if words.count("long") == 2 or words == ["long"]:
        return "int64_t"
    return words[-1] if words else None


def _is_global_symbol(source: str, name: str) -> bool:
    """Whether `name` is a __constant__, __device__ or __managed__ variable of the file."""
    pat = rf"__(?:constant|device|managed)__\s[^;(){{}}]*?\b{re.escape(name)}\s*(?:\[|;|=|,)"   # `float a, b;`
    return re.search(pat, source) is not None


def _set_symbols(so, what: str, symbols: dict) -> None:
    """Copy values into __constant__/__device__ variables, as cudaMemcpyToSymbol would."""
    lib = rt.load(so)
    for n, v in symbols.items():
        addr = getattr(lib, f"ksim_sym_{n}")
        addr.restype = ctypes.c_void_p
        size = getattr(lib, f"ksim_symsize_{n}")
        size.restype = ctypes.c_ulong
        data = np.ascontiguousarray(v)
        if data.nbytes > size():
            raise SimError(f"{what}: {data.nbytes} bytes given for '{n}', which holds {size()} bytes",
                           kind="usage")
        ctypes.memmove(addr(), data.ctypes.data, data.nbytes)


def _param_info(so, n: int) -> tuple[list[int], list[int]]:
    lib = rt.load(so)
    sizes = (ctypes.c_ulong * max(n, 1))()
    kinds = (ctypes.c_int * max(n, 1))()
    lib.ksim_param_info(sizes, kinds)
    return list(sizes)[:n], list(kinds)[:n]


def _as_bytes(v) -> bytes | None:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, (np.ndarray, np.void)):
        return np.ascontiguousarray(v).tobytes()
    return None


class Results(dict):
    """run_cuda_source's {pointer argument: contents after the launch}; `order_dependence` names the
    elements whose value the thread order or the clock decides (runtime.OrderDependence), by argument."""

    order_dependence: dict = {}
    notes: list = []
    asserted = False   # the launch failed an assert() (translate.check re-runs it without asserts)


def run_cuda_source(source: str, kernel: str, grid=(1, 1, 1), block=(1, 1, 1), args=None,
                    shared_mem_bytes: int = 0, *, template_args=None, filename: str = "kernel.cu",
                    timeout_s: float = 20.0, check_races: bool = True,
                    strict_barriers: bool = True, include_dirs=None, host_api: bool | None = None,
                    asserts: bool = True, textures: dict | None = None,
                    heads: dict | None = None) -> dict[str, np.ndarray]:
    """Launch `kernel` from `source` (a whole .cu file) over `grid` blocks of `block` threads.

    With ``check_races`` the grid runs twice (forward, then warps and blocks in reverse) and a
    result that depends on the order raises SimError(kind="race"), except what the order legitimately
    decides (runtime.judge_orders), listed in the result's ``order_dependence``. ``strict_barriers=False``
    lets threads that returned early count as arrived at later barriers (NVIDIA hardware does;
    CUDA calls it undefined), for original kernels written with ``if (i >= n) return;``.
    A failed assert() raises SimError(kind="assert"); ``asserts=False`` compiles them out (NDEBUG).

    ``textures`` ({texture parameter or texture reference name: {"data": texels (numpy, one channel's dtype),
    "w", "h", "d", "dims", "comps", "addr": [x, y, z address modes], "linear", "normalized", "norm_read",
    "linear_mem"}}) makes texture objects / binds references over those texels before the launch (the host
    runtime's textures, ksim_tex.h); a texture parameter needs no entry in ``args`` then.

    ``heads`` ({pointer parameter: array}): a pointer inside its allocation (the program passed `d_in + R`): the
    allocation's elements before it, which the kernel may read at negative indices; a read before the allocation's
    start faults. The result holds each buffer from the pointer on.
    """
    args = dict(args or {})
    info = find_kernel(source, kernel)
    if info is None:
        known = ", ".join(list_kernels(source)) or "none"
        raise SimError(f"{filename}: no __global__ kernel named '{kernel}' (kernels found: {known})",
                       kind="usage")
    what = f"kernel '{kernel}' of {filename}"
    if info.is_template and not template_args:
        raise SimError(f"{what} is a template: pass template_args, e.g. template_args=['float', '256']",
                       kind="usage")
    names = [p.name for p in info.params]
    for n in textures or {}:
        if n in names:
            args.setdefault(n, 0)      # its handle, made below
    missing = [n for n in names if n not in args]
    symbols = {n: args[n] for n in args if n not in names and _is_global_symbol(source, n)}
    extra = [n for n in args if n not in names and n not in symbols]
    if missing or extra:
        raise SimError(f"{what} takes ({', '.join(names)}); missing: {', '.join(missing) or '-'}; "
                       f"unknown: {', '.join(extra) or '-'}", kind="usage")
    grid = tuple(int(x) for x in (list(grid) + [1, 1])[:3])
    block = tuple(int(x) for x in (list(block) + [1, 1])[:3])
    if block[0] * block[1] * block[2] > 1024 or min(block) < 1:
        raise SimError(f"{what}: block {block} must have 1 to 1024 threads", kind="usage")

    if shared_mem_bytes > 232448:
        raise SimError(f"{what}: shared_mem_bytes={shared_mem_bytes}; an H100/H200 block can have at "
                       f"most 232448 (227 KB)", kind="resource_limit")
    if include_dirs:   # local headers, as nvcc -I finds them (their host code is blanked like the file's)
        source = inline_local_includes(source, list(include_dirs)).replace(_CURRENT, filename)
    body = prepare(strip_host_code(source, keep_kernel=kernel), "cuda")
    if not asserts:   # NDEBUG, and no assert() from the headers already read
        body = f'#define NDEBUG 1\n#undef assert\n#define assert(e) ((void)0)\n#line 1 "{filename}"\n' + body
    targs = "<" + ", ".join(str(t) for t in template_args) + ">" if template_args else ""
    textures = dict(textures or {})
    refs = [n for n in textures if n not in names and not textures[n].get("surface")]
    srefs = [n for n in textures if n not in names and textures[n].get("surface")]
    libs = library_headers(source)
    so = _compile(body, info, targs, symbols, filename, what, True if textures or libs else host_api, refs, libs,
                  srefs)
    surfaces = {n: t for n, t in textures.items() if t.get("surface")}
    textures = {n: t for n, t in textures.items() if not t.get("surface")}
    keep = _make_textures(so, textures, args, names, what) if textures else []
    extra = _make_surfaces(so, surfaces, args, names, what) if surfaces else []
    try:
        return _launch(so, info, args, grid, block, shared_mem_bytes, what, timeout_s, check_races, strict_barriers,
                       extra, heads)
    finally:
        del keep


_KIND = {"f": 2, "i": 0, "u": 1, "b": 1}   # cudaChannelFormatKind of a texel's numpy kind


def _make_textures(so, textures: dict, args: dict, names: list[str], what: str) -> list:
    """Texture objects (for texture parameters: `args` gets their handles) and bound texture references (by the
    reference's name), made over the given texels with the host runtime (ksim_tex.h), as cudaCreateTextureObject /
    cudaBindTexture would have. Returns what must stay alive while the kernel runs."""
    lib = rt.load(so)
    keep = []
    for name, t in textures.items():
        data = np.ascontiguousarray(t["data"])
        keep.append(data)
        comps = int(t.get("comps", 1))
        bits = data.dtype.itemsize * 8
        addr = list(t.get("addr", (1, 1, 1)))
        cfg = (ctypes.c_longlong * 15)(_KIND[data.dtype.kind], bits, comps, int(t["w"]), int(t.get("h", 1)),
                                       int(t.get("d", 1)), int(t.get("dims", 1)), *addr[:3],
                                       int(bool(t.get("linear"))), int(bool(t.get("normalized"))),
                                       int(bool(t.get("norm_read"))), int(bool(t.get("linear_mem"))), 0)
        fn = lib.ksim_tex_make if name in names else getattr(lib, f"ksim_tex_bind_{name}", None)
        if fn is None:
            raise SimError(f"{what}: '{name}' is neither a parameter nor a texture reference of the file",
                           kind="usage")
        fn.restype = ctypes.c_ulonglong if name in names else None
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_longlong)]
        handle = fn(data.ctypes.data, cfg)
        if name in names:
            args[name] = int(handle)
    return keep


def _make_surfaces(so, surfaces: dict, args: dict, names: list[str], what: str) -> list:
    """Surface objects (for surface parameters: `args` gets their handles) and bound surface references, each over a
    CUDA array holding the given elements (one channel's dtype; "w", "h", "d" in elements, "comps" channels,
    "layered"), as cudaMallocArray + cudaCreateSurfaceObject / cudaBindSurfaceToArray would have. Returns
    [(name, buffer, array)]: the launch writes the buffer and returns what the kernel left there under the name."""
    lib = rt.load(so)
    out = []
    for name, t in surfaces.items():
        data = np.ascontiguousarray(t["data"])
        b = rt.Buffer(max(1, data.nbytes))
        out.append((name, b, data))
        b.write(data)
        comps = int(t.get("comps", 1))
        cfg = (ctypes.c_longlong * 8)(_KIND[data.dtype.kind], data.dtype.itemsize * 8, comps, int(t["w"]),
                                      int(t.get("h", 1)), int(t.get("d", 1)), int(bool(t.get("layered"))), 0)
        fn = lib.ksim_surf_make if name in names else getattr(lib, f"ksim_surf_bind_{name}", None)
        if fn is None:
            raise SimError(f"{what}: '{name}' is neither a parameter nor a surface reference of the file", kind="usage")
        fn.restype = ctypes.c_ulonglong
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_longlong)]
        handle = fn(ctypes.c_void_p(b.addr), cfg)
        if name in names:
            args[name] = int(handle)
    return out


# a surface over given elements: cfg = kind, bits, comps, w, h, d, layered (ksim_tex.h's cudaArray, not owned)
_SURF_MAKE = r"""
static cudaArray* ksim_surf_array(void* data, const long long* c) {
  int b = (int)c[1], n = (int)c[2];
  cudaChannelFormatDesc ch{b, n > 1 ? b : 0, n > 2 ? b : 0, n > 3 ? b : 0, (cudaChannelFormatKind)c[0]};
  return new cudaArray{(char*)data, ch, (size_t)c[3], (size_t)c[4], (size_t)c[5], (size_t)(b / 8) * n,
                       (unsigned)(cudaArraySurfaceLoadStore | (c[6] ? cudaArrayLayered : 0))};
}
KSIM_EXPORT unsigned long long ksim_surf_make(void* data, const long long* c) {
  cudaResourceDesc r{};
  r.resType = cudaResourceTypeArray;
  r.res.array.array = ksim_surf_array(data, c);
  cudaSurfaceObject_t h = 0;
  cudaCreateSurfaceObject(&h, &r);
  return h;
}
"""
_SURF_BIND = r"""
KSIM_EXPORT unsigned long long ksim_surf_bind_{n}(void* data, const long long* c) {{
  cudaBindSurfaceToArray({n}, ksim_surf_array(data, c));
  return 0;
}}
"""


# a texture over given texels: cfg = kind, bits, comps, w, h, d, dims, addr x/y/z, linear, normalized, norm read,
# linear memory (ksim_tex.h's Tex, finished by its own rules)
_TEX_MAKE = r"""
static ksim_tex::Tex ksim_tex_of(const void* data, const long long* c) {
  ksim_tex::Tex t;
  int b = (int)c[1], n = (int)c[2];
  t.ch = cudaChannelFormatDesc{b, n > 1 ? b : 0, n > 2 ? b : 0, n > 3 ? b : 0, (cudaChannelFormatKind)c[0]};
  t.elem = (size_t)(b / 8) * n;
  t.base = (const char*)data;
  t.w = (size_t)c[3]; t.h = (size_t)c[4]; t.d = (size_t)c[5];
  t.pitch = t.w * t.elem;
  t.dims = (int)c[6];
  t.linear_mem = c[13] != 0;
  return t;
}
KSIM_EXPORT unsigned long long ksim_tex_make(const void* data, const long long* c) {
  ksim_tex::Tex t = ksim_tex_of(data, c);
  int addr[3] = {(int)c[7], (int)c[8], (int)c[9]};
  ksim_tex::finish(t, addr, c[10] ? cudaFilterModeLinear : cudaFilterModePoint, (int)c[11],
                   c[12] ? cudaReadModeNormalizedFloat : cudaReadModeElementType);
  ksim_tex::objects().push_back(t);
  return (unsigned long long)ksim_tex::objects().size();
}
"""
_TEX_BIND = r"""
KSIM_EXPORT void ksim_tex_bind_{n}(const void* data, const long long* c) {{
  {n}.addressMode[0] = (cudaTextureAddressMode)c[7]; {n}.addressMode[1] = (cudaTextureAddressMode)c[8];
  {n}.addressMode[2] = (cudaTextureAddressMode)c[9];
  {n}.filterMode = c[10] ? cudaFilterModeLinear : cudaFilterModePoint;
  {n}.normalized = (int)c[11];
  ksim_tex::bind({n}, ksim_tex_of(data, c));
}}
"""


# g++'s words for a name the file uses that no declaration gave: the host runtime API may declare it
_UNDECLARED = re.compile(r"was not declared|does not name a type|declared void|has not been declared|"
                         r"is not a (?:type|template)|expected [^\n]*before")


def library_headers(source: str) -> list[str]:
    """The library headers (cuBLAS, cuBLASLt, cuRAND, cuFFT, the driver API, NVTX) the file includes that the
    capture's stand-ins define (sim/host_headers.py): a kernel file whose header declares a `cublasHandle_t` at
    file scope compiles against the same stand-ins as its program, with the host runtime they call into."""
    from .host_headers import FILES, stand_in

    names = re.findall(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', source, re.M)
    return list(dict.fromkeys(n for n in names if n in FILES and stand_in(n)))


def _compile(body: str, info, targs: str, symbols, filename: str, what: str, host_api: bool | None, refs=(),
             libs=(), srefs=()):
    """The kernel's library. The kernel-only entry (ksim_cuda.h) first; where the file's own host code (a timer
    class in a header, an allocation helper) needs the CUDA runtime's host API, the entry that declares it
    (ksim_cuda_host.h: ksim_host.h's runtime, nothing of the capture at load). `host_api=True`: that one only."""
    def code(entry: str) -> str:
        lib_dir = None
        if libs and entry == _build.HOST_ENTRY:
            from .host_headers import include_dir
            lib_dir = include_dir()
        return "\n".join([
            f'#include "{entry}"', *(f'#include "{lib_dir / n}"' for n in libs if lib_dir is not None),
            f'#line 1 "{filename}"', body,
            '#line 1 "ksim-launch"',
            f"static void ksim_entry() {{ ksim::call_kernel(&{info.qualified}{targs}, ksim::g.args); }}",
            f'KSIM_EXPORT void ksim_param_info(unsigned long* ksim_sizes, int* ksim_kinds) '
            f'{{ ksim::param_info(&{info.qualified}{targs}, ksim_sizes, ksim_kinds); }}',
            *(f'KSIM_EXPORT void* ksim_sym_{n}() {{ return (void*)&{n}; }}\n'
              f'KSIM_EXPORT unsigned long ksim_symsize_{n}() {{ return sizeof({n}); }}' for n in symbols),
            *((_TEX_MAKE, *(_TEX_BIND.format(n=n) for n in refs), _SURF_MAKE,
               *(_SURF_BIND.format(n=n) for n in srefs)) if entry == _build.HOST_ENTRY else ()),
            "KSIM_EXPORT_RUN(ksim_entry)", ""])

    if not host_api:
        try:
            return _build.build(code("ksim_cuda.h"), what, user_files={filename})
        except SimError as e:
            if e.kind != "compile" or host_api is False:
                raise
            first = e
    try:
        return _build.build(code(_build.HOST_ENTRY), what, user_files={filename}, host=True)
    except SimError as e:
        if host_api or e.kind != "compile":
            raise
        # the host API did not help: the first error, unless that one was a name only the host API declares
        raise (e if _UNDECLARED.search(first.message.split("\n")[0]) else first) from None


def _launch(so, info, args, grid, block, shared_mem_bytes, what, timeout_s, check_races, strict_barriers,
            extra=(), heads=None):
    names = [p.name for p in info.params]
    symbols = {n: args[n] for n in args if n not in names and n not in {e[0] for e in extra}}
    _set_symbols(so, what, symbols)
    sizes, kinds = _param_info(so, len(info.params))
    buffers: list[tuple[str, rt.Buffer, np.ndarray]] = list(extra)   # (surfaces' arrays: results like buffers)
    starts: list[tuple[rt.Buffer, np.ndarray]] = [(b, a) for _, b, a in extra]   # what each run starts from
    scalars = rt.Scalars()
    pointers: list[int] = []
    try:
        for p in info.params:
            v = args[p.name]
            if p.is_pointer and v is None:   # a NULL pointer (a kernel that tests `p != NULL`): no buffer
                pointers.append(0)
                continue
            if p.is_pointer:
                if not isinstance(v, np.ndarray):
                    raise SimError(f"{what}: parameter '{p.name}' ({p.type}) needs a numpy array (or None: "
                                   "a NULL pointer)", kind="usage")
                base = _pointee(p.type)
                ok = _POINTEE.get(base or "")
                if ok is not None and v.dtype.type not in ok:
                    raise SimError(f"{what}: parameter '{p.name}' is {p.type} but the array is "
                                   f"{v.dtype}", kind="usage")
                arr = np.ascontiguousarray(v)
                head = (heads or {}).get(p.name)   # a pointer inside its allocation (`d_in + R`)
                b, whole = rt.filled_buffer(arr, None if head is None else
                                            np.asarray(head).astype(arr.dtype, copy=False))
                starts.append((b, whole))
                buffers.append((p.name, b, arr))
                pointers.append(b.pointer)
            elif kinds[len(pointers)] == 3:  # a struct by value: its bytes
                raw = _as_bytes(v)
                if raw is None or len(raw) != sizes[len(pointers)]:
                    raise SimError(f"{what}: parameter '{p.name}' ({p.type}) is passed by value: give its "
                                   f"{sizes[len(pointers)]} bytes (bytes or a numpy structured scalar/array)",
                                   kind="usage")
                keep = ctypes.create_string_buffer(raw, len(raw))
                scalars.slots.append(keep)
                pointers.append(ctypes.addressof(keep))
            else:
                if isinstance(v, np.ndarray):
                    if v.size != 1:
                        raise SimError(f"{what}: parameter '{p.name}' ({p.type}) is a scalar",
                                       kind="usage")
                    v = v.reshape(()).item()
                if not isinstance(v, (int, float, bool, np.number, np.bool_)):
                    raise SimError(f"{what}: parameter '{p.name}' ({p.type}) needs a number, not "
                                   f"{type(v).__name__}", kind="usage")
                pointers.append(scalars.add(v))
        runs = []

        def launch_once(reverse: bool, limit: float, clock_mode: int = 0):
            if runs:   # a later run starts from the same memory
                for b, a in starts:
                    b.write(a)
            info = None
            if all(grid) and all(block):
                total = tuple(g * b for g, b in zip(grid, block))
                info = rt.launch(so, what, pointers, grid, block, total, False, dyn_smem=shared_mem_bytes,
                                 timeout_s=limit, regions=[(n, b, False) for n, b, _ in buffers],
                                 reverse=reverse, strict_barriers=strict_barriers, clock_mode=clock_mode)
            runs.append([b.read_tail(a.dtype, a.shape) for _, b, a in buffers])
            return info

        infos = rt.run_both_orders(launch_once, check_races, timeout_s)
        result = Results((n, a) for (n, _, _), a in zip(buffers, runs[0]))
        if check_races:
            result.order_dependence = rt.judge_orders(what, [(n, "pointer argument", b, "") for n, b, _ in buffers],
                                                      runs, infos, lambda order: launch_once(
                                                          order, rt.reverse_timeout(timeout_s, 1.0), 0))
        return result
    finally:
        for _, b, _ in buffers:
            b.close()
