"""The parts of a port module's CUDA-convention entry point `launch(*args, grid, block, shared_mem, template)`.

`launch()` takes the kernel's arguments in CUDA's parameter order (an array per pointer, a number per scalar)
and returns the new contents of every pointer the kernel may write. Its kernel bodies differ from the family
path's (`kernel(*inputs)`) only in a prologue:

* every pointer parameter arrives as a flat MLX input named `<name>_in` (never written) or `<name>_inout`
  (may be written), and the prologue declares the kernel's own parameter from it with a cast:
  `device float4* y = (device float4*)y_inout;` — so vector-typed pointers, structs and template types keep
  their CUDA type, and in-out buffers can be written (see emit.py for why that is safe on a GPU);
* scalars arrive as 1-element arrays `<name>_arg`, as in the family path;
* atomics are casts to `atomic<T>` of the address (`ks_atomic_add(&x[i], v)`), on device and threadgroup
  memory alike, so no output needs `atomic_outputs` and in-out buffers keep their contents.
"""
from __future__ import annotations

import re

from ..source.models import KernelInfo

# pointee C type -> (numpy/MLX dtype name of one scalar element, sizeof(pointee))
POINTEE = {
    "float": ("float32", 4), "double": ("float64", 8), "half": ("float16", 2), "__half": ("float16", 2),
    "__nv_bfloat16": ("bfloat16", 2), "nv_bfloat16": ("bfloat16", 2),
    "char": ("int8", 1), "signed char": ("int8", 1), "unsigned char": ("uint8", 1), "int8_t": ("int8", 1),
    "uint8_t": ("uint8", 1), "uchar": ("uint8", 1), "bool": ("bool", 1),
    "short": ("int16", 2), "int16_t": ("int16", 2), "unsigned short": ("uint16", 2), "uint16_t": ("uint16", 2),
    "int": ("int32", 4), "int32_t": ("int32", 4), "unsigned": ("uint32", 4), "unsigned int": ("uint32", 4),
    "uint": ("uint32", 4), "uint32_t": ("uint32", 4),
    "long": ("int64", 8), "long long": ("int64", 8), "long int": ("int64", 8), "int64_t": ("int64", 8),
    "unsigned long": ("uint64", 8), "unsigned long long": ("uint64", 8), "uint64_t": ("uint64", 8),
    "size_t": ("uint64", 8),
    "short int": ("int16", 2), "unsigned short int": ("uint16", 2), "unsigned long int": ("uint64", 8),
    "long long int": ("int64", 8), "unsigned long long int": ("uint64", 8),
    "float2": ("float32", 8), "float3": ("float32", 12), "float4": ("float32", 16),
    "int2": ("int32", 8), "int3": ("int32", 12), "int4": ("int32", 16),
    "uint2": ("uint32", 8), "uint3": ("uint32", 12), "uint4": ("uint32", 16),
    "char2": ("int8", 2), "char4": ("int8", 4), "uchar2": ("uint8", 2), "uchar3": ("uint8", 3), "uchar4": ("uint8", 4),
    "half2": ("float16", 4), "__half2": ("float16", 4), "__nv_bfloat162": ("bfloat16", 4),
    "double2": ("float64", 16), "short2": ("int16", 4), "ushort2": ("uint16", 4),
}
# scalar parameter C type -> MLX dtype of its 1-element array (Metal has no double: floats travel as float32)
SCALAR = {k: v[0] for k, v in POINTEE.items() if not re.search(r"\d$", k) or k.endswith(("_t", "16"))}
SCALAR.update({"double": "float32", "long double": "float32"})
MX_TEMPLATE = {"float": "float32", "double": "float32", "half": "float16", "__half": "float16",
               "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", **{k: v for k, v in SCALAR.items()
                                                                          if k not in ("double",)}}


def _no_comments(text: str | None) -> str:
    """A parameter's text without its comments (`float *out /* inverted */`: one pointer level)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text or "", flags=re.S).strip()


def norm_type(t: str) -> str:
    words = [w for w in t.replace("*", " ").split()
             if w not in ("const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "signed")
             or (w == "signed" and False)]
    return " ".join(words)


def struct_dtype(name: str, preamble: list[str]) -> tuple[str, int] | None:
    """(dtype, sizeof) of a file-scope struct whose fields all have one scalar type, else None (layout.py)."""
    from .layout import struct_dtype_of
    return struct_dtype_of(name, preamble)


TEXTURE_TYPES = {"cudaTextureObject_t", "cudaSurfaceObject_t", "CUtexObject", "CUsurfObject"}


def struct_body(name: str, preamble: list[str]) -> str | None:
    """The field list of a file-scope struct `name` (`struct name {...};` or `typedef struct {...} name;`),
    else None."""
    for entry in preamble:
        for m in re.finditer(r"\b(?:struct|class)\s+(?:__align__\s*\(\s*\d+\s*\)\s*|alignas\s*\(\s*\d+\s*\)\s*)?"
                             r"(\w+)?\s*(?::[^{;]*)?\{", entry):
            depth, i = 1, m.end()
            while i < len(entry) and depth:
                depth += {"{": 1, "}": -1}.get(entry[i], 0)
                i += 1
            if depth:
                continue
            body = entry[m.end():i - 1]
            tail = re.match(r"\s*(\w+)?", entry[i:])
            if name in (m.group(1), tail.group(1) if tail else None):
                return body
    from .curand import LIBRARY_STRUCTS   # a library's state type the ports define themselves (curand_kernel.h)
    return LIBRARY_STRUCTS.get(name)


def struct_prologue(name: str, ctype: str, dialect: str) -> str:
    """The kernel's by-value struct parameter from its bytes (`<name>_arg`, a uint8 input)."""
    space = "device " if dialect == "metal" else ""
    base = norm_type(ctype)
    if dialect == "metal" and base in POINTEE and re.fullmatch(r"[a-z]+3", base):
        # CUDA's T3 is 12 bytes (no padding); Metal's T3 is 16: the bytes are read as Metal's packed_T3
        return f"    {ctype} {name} = {base}(*(const device packed_{base}*){name}_arg);\n"
    return f"    {ctype} {name} = *(const {space}{ctype}*){name}_arg;\n"


def default_value(p, preamble: list[str]):
    """The number a scalar parameter's default argument gives (`float v = 1.5f`), else None."""
    if p.pointer or "=" not in _no_comments(p.text or ""):
        return None
    from ..launchsites import EvalError, Unknown, build_scope, evaluate
    try:
        v, unk = evaluate(_no_comments(p.text).split("=", 1)[1].strip(), build_scope(["\n".join(preamble)]), {})
    except (EvalError, Unknown):
        return None
    return v if not unk and isinstance(v, (int, float)) else None


def param_table(k: KernelInfo, written: set[str], template_types: set[str], preamble: list[str],
                issues: list, texts: list[str] = (), sources=None) -> list[dict]:
    """PARAMS of the port module: one entry per CUDA parameter, in order. `texts`: the helpers' code, which may
    follow a struct's pointer field as the kernel may; `sources` ([(file name, text)]) place a field in messages."""
    from .rewrite import Issue
    out = []
    line0 = k.range.start.line
    for p in k.params:
        base = norm_type(p.type)
        ctype = re.sub(r"\b" + re.escape(p.name) + r"\b(?!.*\b" + re.escape(p.name) + r"\b)", "",
                       _no_comments(p.text) or p.type)
        entry = {"name": p.name, "ctype": " ".join(ctype.split()),
                 "pointer": p.pointer, "written": False, "dtype": None, "elem_bytes": None}
        default = default_value(p, preamble)
        if default is not None:   # `int n = 48`: launch() passes it where the call leaves it out, as C++ does
            entry["default"] = default
        if base in template_types:
            entry["template_type"] = base
        if p.pointer:
            entry["written"] = p.name in written or not p.is_const
            entry["stored"] = p.name in written     # a store the translator sees (else only: not const)
            if tests_for_null(k.body, p.name):
                entry["nullable"] = True   # launch() takes None for it: the kernel sees a null pointer
            if base in POINTEE:
                entry["dtype"], entry["elem_bytes"] = POINTEE[base]
            elif base not in template_types:
                st = struct_dtype(base, preamble)
                repack = None
                if st is None:
                    from .layout import double_repack
                    repack = double_repack(base, preamble)
                if st is not None:
                    entry["dtype"], entry["elem_bytes"] = st
                elif repack is not None:   # structs holding doubles: launch() converts each to the ports' layout
                    from .layout import struct_layout
                    entry["dtype"], entry["struct_array"] = "uint8", True
                    entry["repack"], entry["port_bytes"] = [list(x) for x in repack[0]], repack[1]
                    entry["c_bytes"] = struct_layout(base, preamble, keep_doubles=True).dtype.itemsize
                    issues.append(Issue(construct=p.text or p.name, line=line0, severity="warning",
                                        message=f"'{p.name}' points to {base}, which holds doubles: launch() takes "
                                                "the structs' bytes and hands both ports each struct with its doubles "
                                                "as float (and back): compared within float tolerance"))
                else:
                    entry["dtype"] = "uint8"
                    from .layout import followed_pointer
                    followed = followed_pointer(base, preamble, [k.text] + list(texts), sources)
                    if followed is not None:   # e->name[0]: an address of the program's memory, not the ports'
                        issues.append(Issue(
                            construct=p.text or p.name, line=line0, severity="error",
                            message=f"{followed}: the kernel follows that pointer ('{p.name}' points to {base}), and "
                                    "an address the program stored in its memory means nothing to the ports (MLX hands "
                                    "them buffers of their own, never the program's addresses); port by hand with "
                                    f"what '{followed.field_name}' points to passed as a pointer parameter of its own"))
                    else:
                        issues.append(Issue(construct=p.text or p.name, line=line0, severity="info",
                                            message=f"'{p.name}' points to {base}: launch() takes its bytes as a uint8 "
                                                    "array"))
        elif _is_tag(p, preamble):   # an empty tag (std::bool_constant<B>): its value is its type, a template
            entry["tag"] = True      # argument: launch() takes anything at its place and passes nothing
        else:
            entry["dtype"] = SCALAR.get(base) if base not in template_types else None
            entry["elem_bytes"] = POINTEE[base][1] if base in POINTEE else None
            if entry["dtype"] is None and base not in template_types:
                from .layout import by_value_problem, double_repack
                problem = by_value_problem(base, preamble)
                repack = double_repack(base, preamble) if problem is not None and problem.kind == "double" else None
                if problem is None:
                    entry["dtype"], entry["struct"] = "uint8", True   # its bytes; the kernel reinterprets them
                elif repack is not None:   # doubles: launch() turns the C bytes into the ports' (doubles as float)
                    entry["dtype"], entry["struct"] = "uint8", True
                    entry["repack"], entry["port_bytes"] = [list(x) for x in repack[0]], repack[1]
                else:
                    why = (f"texture object '{p.name}' ({base}): Metal textures are another API that MLX kernels do "
                           "not take; port by hand") if base in TEXTURE_TYPES else \
                        (f"parameter '{p.name}' is passed {passing(p)} and {problem}: its pointers mean nothing in "
                         "another address space; pass the buffers as parameters") if problem.kind == "pointer" \
                        else (f"parameter '{p.name}' is passed {passing(p)} and {problem}: Metal has no double, so its "
                              "layout differs there; pass its fields separately") if problem.kind == "double" \
                        else (f"parameter '{p.name}' is passed {passing(p)} and {problem}: Metal textures are another "
                              "API that MLX kernels do not take") if problem.kind == "texture" else \
                        (f"parameter '{p.name}' of type {base} is passed {passing(p)} and its definition is not in the "
                         "file: launch() passes scalars, pointers and file-scope structs; pass its fields separately")
                    issues.append(Issue(construct=p.text or p.name, line=line0, severity="error", message=why))
                    entry["dtype"] = "int32"
        out.append(entry)
    return out


def passing(p) -> str:
    """How a by-value-or-reference parameter is passed, as a message says it."""
    return "by reference" if p.reference else "by value"


def null_flag(name: str) -> str:
    return f"KS_NULL_{name}"


def tests_for_null(body: str, name: str) -> bool:
    """The kernel compares pointer parameter `name` with NULL (`if (bias != NULL)`, `bias ? ... : ...`, `if (!p)`)."""
    n = re.escape(name)
    null = r"(?:NULL|nullptr|0)"
    return bool(re.search(rf"\b{n}\s*[!=]=\s*{null}\b|\b{null}\s*[!=]=\s*{n}\b|\(\s*!?\s*{n}\s*\)|"
                          rf"(?<![\w\]\)])\b{n}\s*\?|!\s*{n}\b\s*(?:&&|\|\||\))", body))


def pointer_prologue(k: KernelInfo, params: list[dict], dialect: str, metal_type) -> str:
    """Declarations of the kernel's pointer parameters from the launch path's flat inputs."""
    lines = []
    for p, e in zip(k.params, params):
        if not p.pointer:
            continue
        src = p.name + ("_inout" if e["written"] else "_in")
        const = "const " if (p.is_const and not e["written"]) else ""
        vol = "volatile " if "volatile" in p.qualifiers else ""
        t = p.type if dialect == "cuda" else metal_type(p.type)
        stars = "*" * max(1, _no_comments(p.text or "*").count("*"))
        if dialect == "metal" and stars == "*":
            # CUDA's T3 vectors are 12 bytes apart in a buffer, Metal's T3 16: the buffer is read as packed_T3
            t = re.sub(r"\b((?:u?char|u?short|u?int|uint|float|half))3\b", r"packed_\g<1>3", t)
        space = "" if dialect == "cuda" else "device "
        ptype = f"{const}{vol}{space}{t}{stars}"
        if e.get("nullable"):   # a template flag says the caller passed no buffer (NULL in CUDA)
            lines.append(f"    {ptype} {p.name} = {null_flag(p.name)} ? ({ptype})nullptr : ({ptype}){src};\n")
        else:
            lines.append(f"    {ptype} {p.name} = ({ptype}){src};\n")
    return "".join(lines)


def launch_input_names(k: KernelInfo, params: list[dict]) -> list[str]:
    return [p.name + ("_inout" if e["written"] else "_in") if p.pointer else p.name + "_arg"
            for p, e in zip(k.params, params) if not e.get("tag")]


def _is_tag(p, preamble: list[str]) -> bool:
    from .layout import empty_tag
    return not p.pointer and not p.reference and empty_tag(p.type, preamble)


def tag_params(k: KernelInfo, preamble: list[str]) -> list[int]:
    """Indexes of the kernel's empty tag parameters (`std::bool_constant<Atomic>`, an empty struct): no MLX input
    stands for them."""
    return [i for i, p in enumerate(k.params) if _is_tag(p, preamble)]


# the CUDA-backend port's std-free integral constant (MLX compiles it with NVRTC, which has no <type_traits>)
KS_CONSTANT = ("template <typename T, T V> struct ks_constant { static constexpr T value = V; typedef T value_type; "
               "constexpr operator T() const { return V; } constexpr T operator()() const { return V; } };")


def _std_constant(t: str) -> tuple[str, str] | None:
    """(value type, value) of std::bool_constant<X> / integral_constant<T, V> / true_type / false_type, else None."""
    t = re.sub(r"^(?:::)?(?:cuda\s*::\s*)?std\s*::\s*", "", t)
    m = re.fullmatch(r"bool_constant\s*<(.*)>", t)
    if m:
        return "bool", m.group(1).strip()
    m = re.fullmatch(r"integral_constant\s*<([^,]*),(.*)>", t)
    if m:
        return m.group(1).strip(), m.group(2).strip()
    if t in ("true_type", "false_type"):
        return "bool", t.split("_")[0]
    return None


def _used_tags(k: KernelInfo, preamble: list[str]) -> list[tuple[str, str]]:
    """(name, type) of the tag parameters the kernel's body names."""
    out = []
    for i in tag_params(k, preamble):
        p = k.params[i]
        if p.name and re.search(rf"\b{re.escape(p.name)}\b", k.body or ""):
            out.append((p.name, " ".join(re.sub(r"\b(?:const|volatile)\b", " ", p.type).split())))
    return out


def tag_declarations(k: KernelInfo, preamble: list[str], dialect: str) -> str:
    """The tag parameters the body names, as local objects of their type (`tag.value`, `decltype(tag)::value`,
    `if (tag)`): std's integral constants as Metal's type traits spell them, and as ks_constant (KS_CONSTANT) in the
    CUDA-backend port; a file's empty struct as itself."""
    out = []
    for name, t in _used_tags(k, preamble):
        c = _std_constant(t)
        if c is not None:
            t = f"metal::integral_constant<{c[0]}, ({c[1]})>" if dialect == "metal" else f"ks_constant<{c[0]}, ({c[1]})>"
        out.append(f"    {t} {name} = {{}};   // a tag: its value is its type\n")
    return "".join(out)


def tag_support(k: KernelInfo, preamble: list[str]) -> str | None:
    """KS_CONSTANT where the CUDA-backend port declares a std integral constant tag (tag_declarations)."""
    return KS_CONSTANT if any(_std_constant(t) for _, t in _used_tags(k, preamble)) else None


METAL_ATOMIC_OPS = {   # helper suffix -> Metal call on an atomic<T>* `a`
    "add": "atomic_fetch_add_explicit(a, T(v), memory_order_relaxed)",
    "sub": "atomic_fetch_sub_explicit(a, T(v), memory_order_relaxed)",
    "max": "atomic_fetch_max_explicit(a, T(v), memory_order_relaxed)",
    "min": "atomic_fetch_min_explicit(a, T(v), memory_order_relaxed)",
    "exch": "atomic_exchange_explicit(a, T(v), memory_order_relaxed)",
    "and": "atomic_fetch_and_explicit(a, T(v), memory_order_relaxed)",
    "or": "atomic_fetch_or_explicit(a, T(v), memory_order_relaxed)",
    "xor": "atomic_fetch_xor_explicit(a, T(v), memory_order_relaxed)",
}
CUDA_ATOMICS = {"atomicAdd": "add", "atomicSub": "sub", "atomicMax": "max", "atomicMin": "min", "atomicExch": "exch",
                "atomicAnd": "and", "atomicOr": "or", "atomicXor": "xor", "atomicAdd_block": "add",
                "atomicAdd_system": "add", "atomicCAS": "cas", "atomicInc": "inc", "atomicDec": "dec"}
CUDA_ATOMICS.update({f"{n}{scope}": op for n, op in list(CUDA_ATOMICS.items()) if "_" not in n
                     for scope in ("_block", "_system")})   # one device, one scope: the same operation


def metal_atomic_helpers() -> str:
    """Metal helpers behind CUDA's atomicXxx(address, value) on plain device/threadgroup memory."""
    out = ["// ksearch: CUDA atomics on plain memory, as casts of the address to atomic<T> (relaxed order)"]
    for space, suf in (("device", ""), ("threadgroup", "_tg")):
        for op, call in METAL_ATOMIC_OPS.items():
            out.append(f"template <typename T, typename U> inline T ks_atomic_{op}{suf}({space} T* p, U v) "
                       f"{{ {space} atomic<T>* a = ({space} atomic<T>*)p; return {call}; }}")
        out.append(f"template <typename T, typename U, typename V> inline T ks_atomic_cas{suf}({space} T* p, U cmp, "
                   f"V v) {{ {space} atomic<T>* a = ({space} atomic<T>*)p; T expected = T(cmp); "
                   f"while (!atomic_compare_exchange_weak_explicit(a, &expected, T(v), memory_order_relaxed, "
                   f"memory_order_relaxed)) {{ if (expected != T(cmp)) break; }} return expected; }}")
        out.append(f"inline uint ks_atomic_inc{suf}({space} uint* p, uint lim) {{ {space} atomic<uint>* a = "
                   f"({space} atomic<uint>*)p; uint old = atomic_load_explicit(a, memory_order_relaxed); "
                   f"while (!atomic_compare_exchange_weak_explicit(a, &old, old >= lim ? 0u : old + 1u, "
                   f"memory_order_relaxed, memory_order_relaxed)) {{}} return old; }}")
        out.append(f"inline uint ks_atomic_dec{suf}({space} uint* p, uint lim) {{ {space} atomic<uint>* a = "
                   f"({space} atomic<uint>*)p; uint old = atomic_load_explicit(a, memory_order_relaxed); "
                   f"while (!atomic_compare_exchange_weak_explicit(a, &old, (old == 0u || old > lim) ? lim : "
                   f"old - 1u, memory_order_relaxed, memory_order_relaxed)) {{}} return old; }}")
    return "\n".join(out) + "\n"
