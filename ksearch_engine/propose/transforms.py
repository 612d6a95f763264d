"""Typed source transformations of the user's own kernel: the offline proposer's edits of the user's code.

A transformation takes a candidate module built on a port (the port module's kernel bodies
`LAUNCH_CUDA_SOURCE` / `LAUNCH_METAL_SOURCE`, plus the captured task's adapter knobs `KS_BLOCK`,
`KS_GRID_DIV`) and returns the module with one change that keeps the kernel's contract — same arguments,
same buffers written with the same contents (within the task's tolerance). Both dialects are edited
together, so the candidate runs on Apple GPUs, NVIDIA GPUs and the simulator alike. A transformation that
does not fit the code says why (`applies`) instead of guessing; the evaluator still verifies every result.

The transformations:
* `block_size`  threads per block (any kernel with the canonical 1-D index: the grid is resized to cover the
                same threads);
* `grid_stride` the canonical `i = blockIdx.x*blockDim.x+threadIdx.x; if (i < n) {...}` becomes a grid-stride
                loop and the grid shrinks by the items-per-thread factor;
* `vectorize`   float4 loads and stores for an elementwise body whose every buffer access is `p[i]` on float
                buffers (flat MLX buffers are 16-byte aligned), with a scalar tail;
* `unroll`      `#pragma unroll` on loops with a constant trip count;
* `fast_math`   `expf`→`__expf` (Metal `exp`→`fast::exp`) and friends, where the tolerance allows;
* `read_only`   `__restrict__` on the kernel's pointers (launch() gives each its own buffer: no aliasing), so
                read-only loads go through the read-only data path (`__ldg`).
* `grid_blocks` more blocks for a kernel whose block index and grid size appear only in grid-stride loop
                headers (`for (v = blockIdx.x; v < n; v += gridDim.x)`): the same items over more blocks;
* `warp_reduce` a shared-memory tree reduction (`for (s = blockDim.x/2; s > 0; s >>= 1) { if (tid < s)
                sdata[tid] OP= sdata[tid + s]; __syncthreads(); }`) finishes its last 32 partials with warp
                shuffles (`__shfl_down_sync` / `simd_shuffle_down`) instead of five more barrier rounds; blocks
                of fewer than 32 threads keep the tree.
Each has a predicted effect read from the analysis (bytes moved, arithmetic intensity, occupancy).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable

from ..worldmodel import Impact

BODIES = ("LAUNCH_CUDA_SOURCE", "LAUNCH_METAL_SOURCE")


class TransformError(ValueError):
    """The transformation does not fit this code; the message says why."""


# ---------------------------------------------------------------- module constants
def _assign(text: str, name: str) -> ast.Assign | None:
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
    return None


def get_const(text: str, name: str):
    node = _assign(text, name)
    if node is None:
        raise TransformError(f"the candidate has no {name}")
    return ast.literal_eval(node.value)


def set_const(text: str, name: str, value) -> str:
    """The module with `NAME = value` (the last assignment of NAME), written as a literal."""
    node = None
    for n in ast.parse(text).body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            node = n
    if node is None:
        raise TransformError(f"the candidate has no {name}")
    lines = text.splitlines(keepends=True)
    start = sum(len(l) for l in lines[: node.lineno - 1]) + node.col_offset
    end = sum(len(l) for l in lines[: node.end_lineno - 1]) + node.end_col_offset
    if isinstance(value, str) and '"""' not in value and not value.endswith("\\"):
        lit = 'r"""' + value + '"""'
    else:
        lit = repr(value)
    return text[:start] + f"{name} = {lit}" + text[end:]


def bodies(text: str) -> dict[str, str]:
    out = {}
    for b in BODIES:
        try:
            out[b] = get_const(text, b)
        except TransformError:
            pass
    if not out:
        raise TransformError("the candidate holds no kernel body (LAUNCH_CUDA_SOURCE / LAUNCH_METAL_SOURCE): "
                             "source transformations apply to ports of the user's kernel")
    return out


def _dialect(name: str) -> str:
    return "cuda" if "CUDA" in name else "metal"


# ---------------------------------------------------------------- the canonical 1-D index
_IDS = {
    "cuda": (r"blockIdx\.x", r"blockDim\.x", r"threadIdx\.x"),
    "metal": (r"threadgroup_position_in_grid\.x", r"threads_per_threadgroup\.x", r"thread_position_in_threadgroup\.x"),
}
_STRIDE = {"cuda": "(int)(gridDim.x * blockDim.x)", "metal": "int(threads_per_grid.x)"}


def _idx_pattern(dialect: str) -> str:
    b, d, t = _IDS[dialect]
    c = r"(?:\(\s*(?:int|uint|unsigned|size_t)\s*\)\s*|(?:int|uint)\s*\(\s*)?"  # an optional cast
    prod = rf"(?:{c}{b}\)?\s*\*\s*{c}{d}\)?|{c}{d}\)?\s*\*\s*{c}{b}\)?)"
    return rf"(?:{prod}\s*\+\s*{c}{t}\)?|{c}{t}\)?\s*\+\s*{prod})"


@dataclass
class Canonical:
    """`int i = IDX; if (i < N) BLOCK` found in a body."""
    start: int
    end: int
    var: str
    idx: str
    bound: str
    block: str            # the guarded statements, without the outer braces
    decl_type: str


def _match_brace(s: str, i: int) -> int:
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    raise TransformError("unbalanced braces in the kernel body")


def find_canonical(body: str, dialect: str) -> Canonical | None:
    m = re.search(rf"\b(?P<t>(?:const\s+)?(?:int|uint|unsigned|unsigned\s+int|size_t|long))\s+(?P<v>[A-Za-z_]\w*)\s*=\s*"
                  rf"(?P<idx>{_idx_pattern(dialect)})\s*;\s*if\s*\(\s*(?P=v)\s*<\s*", body)
    if not m:
        return None
    # the bound runs to the if's closing parenthesis
    depth, j = 1, m.end()
    while j < len(body) and depth:
        depth += {"(": 1, ")": -1}.get(body[j], 0)
        j += 1
    bound = body[m.end(): j - 1].strip()
    rest = body[j:]
    lead = len(rest) - len(rest.lstrip())
    k = j + lead
    if body[k: k + 1] == "{":
        close = _match_brace(body, k)
        block, end = body[k + 1: close], close + 1
    else:
        semi = body.find(";", k)
        if semi < 0:
            return None
        block, end = body[k: semi + 1], semi + 1
    if re.search(r"\belse\b", body[end: end + 20].lstrip()[:5]):
        return None
    return Canonical(start=m.start(), end=end, var=m.group("v"), idx=m.group("idx"), bound=bound, block=block,
                     decl_type=m.group("t").replace("const ", ""))


def _loop_safe(c: Canonical) -> str | None:
    if re.search(r"\breturn\b", c.block):
        return "the guarded block returns early"
    if re.search(r"__syncthreads|threadgroup_barrier|__syncwarp|simdgroup_barrier", c.block):
        return "the guarded block has a barrier"
    if re.search(rf"\b{re.escape(c.var)}\s*(=[^=]|\+=|-=|\+\+|--)", c.block):
        return f"the guarded block changes {c.var}"
    return None


# ---------------------------------------------------------------- the transformations
@dataclass
class Change:
    """One applied transformation: the new module and what it did."""
    source: str
    summary: str


@dataclass
class Transform:
    id: str
    decision: str
    knob: str
    values: list
    difficulty: int
    describe: Callable[[object], str]
    check: Callable[[str], str | None]               # None when it applies, else why not
    apply: Callable[[str, object], Change]
    predict: Callable[[dict, object], tuple[Impact, float]] = field(default=lambda a, v: (Impact(), 1.0))

    def applies(self, text: str) -> str | None:
        try:
            return self.check(text)
        except (TransformError, SyntaxError) as e:
            return str(e)

    def options(self, text: str) -> list:
        """The knob values worth trying on this module (those that change it)."""
        if self.id == "block_size":
            return _block_options(text, list(self.values))
        if self.id == "grid_stride":
            return list(self.values)
        return list(self.values)


def _both(text: str, fn: Callable[[str, str], str]) -> str:
    """Apply a body rewrite to every dialect's body; each must change."""
    out = text
    for name, body in bodies(text).items():
        new = fn(body, _dialect(name))
        if new == body:
            raise TransformError(f"nothing to change in the {_dialect(name)} body")
        out = set_const(out, name, new)
    return out


def _needs_adapter(text: str) -> str | None:
    if _assign(text, "KS_BLOCK") is None or _assign(text, "KS_GRID_DIV") is None:
        return "the candidate has no captured launch geometry (KS_BLOCK / KS_GRID_DIV)"
    return None


# -- block size
def _check_block(text: str) -> str | None:
    why = _needs_adapter(text)
    if why:
        return why
    for name, body in bodies(text).items():
        if not re.search(_idx_pattern(_dialect(name)), body):
            return "no canonical 1-D thread index (blockIdx.x * blockDim.x + threadIdx.x)"
    if any(g["block"][1] * g["block"][2] != 1 for g in get_const(text, "KS_GEOMETRY").values()):
        return "the kernel is launched with 2-D or 3-D blocks"
    return None


def _apply_block(text: str, v) -> Change:
    return Change(set_const(text, "KS_BLOCK", int(v)), f"{v} threads per block, grid resized to cover the same threads")


def captured_blocks(text: str) -> tuple[set[int], int]:
    """Threads per block the program launched with, and the most blocks of one captured launch."""
    geo = get_const(text, "KS_GEOMETRY") if _assign(text, "KS_GEOMETRY") else None
    sizes, most = set(), 0
    for g in (geo or {}).values():
        try:
            b, gr = g["block"], g["grid"]
            sizes.add(int(b[0]) * int(b[1]) * int(b[2]))
            most = max(most, int(gr[0]) * int(gr[1]) * int(gr[2]))
        except (KeyError, TypeError, ValueError, IndexError):
            continue
    return sizes, most


def _block_options(text: str, values: list[int]) -> list[int]:
    """Block sizes that change the launch (never the one the program used), smaller first when the captured
    grid has fewer blocks than a large GPU has compute units to fill twice (few blocks: each idle unit is lost),
    larger first otherwise."""
    cur = get_const(text, "KS_BLOCK") if _assign(text, "KS_BLOCK") else None
    used, blocks = captured_blocks(text)
    if cur:
        used = {int(cur)}
    opts = [v for v in sorted(set(values) | {32}) if v not in used]
    base = min(used) if used else 256
    if _too_few_blocks(blocks):
        return sorted(opts, key=lambda v: (v >= base, abs(v - base)))   # smaller than now first, nearest first
    return sorted(opts, key=lambda v: (v < 128, abs(v - 256)))


_UNITS: list[int] = []


def _too_few_blocks(blocks: int) -> bool:
    """A captured grid of fewer blocks than twice the largest GPU's compute units: each idle unit is lost."""
    return 0 < int(blocks or 0) < 2 * _largest_gpu_units()


def _largest_gpu_units() -> int:
    """Compute units (SMs, GPU cores) of the largest GPU the hardware specs list (specs/hardware/*.yaml)."""
    if not _UNITS:
        n = 0
        try:
            from ..specs import load_specs
            for hw in load_specs().hardware_files.values():
                for chip in getattr(hw, "chips", None) or []:
                    n = max(n, max(getattr(chip, "compute_units", None) or [0]))
        except Exception:  # noqa: BLE001 - an ordering prior only: without specs, sizes keep their default order
            n = 0
        _UNITS.append(n or 1)
    return _UNITS[0]


_RESIDENT: list[tuple[int, int]] = []


def _resident_limits() -> tuple[int, int]:
    """(resident threads, resident blocks) per compute unit, the smallest blocks limit any hardware spec lists
    (specs/hardware/*.yaml: NVIDIA's 2048 threads and 32 blocks per SM); (0, 0) where none says."""
    if not _RESIDENT:
        best = (0, 0)
        try:
            from ..specs import load_specs
            for hw in load_specs().hardware_files.values():
                lim = {x.name: x.value for x in getattr(hw, "limits", None) or []}
                t, b = lim.get("resident threads per SM"), lim.get("resident blocks per SM")
                if isinstance(t, int) and isinstance(b, int) and (best == (0, 0) or b < best[1]):
                    best = (t, b)
        except Exception:  # noqa: BLE001 - a prior only: without specs every block size is predicted alike
            pass
        _RESIDENT.append(best)
    return _RESIDENT[0]


def _occupancy(block: int) -> float:
    """The share of a compute unit's thread slots blocks of `block` threads can fill when the resident-blocks limit
    binds first (registers and shared memory aside): 32-thread blocks fill half an SM of 2048 threads and 32 blocks."""
    threads, blocks = _resident_limits()
    if not threads or not blocks or block <= 0:
        return 1.0
    return min(1.0, blocks * block / threads)


def _predict_block(a: dict, v) -> tuple[Impact, float]:
    cur = min(a.get("captured_blocks") or [256])
    gain = _occupancy(int(v)) / _occupancy(int(cur))
    if gain > 1.0:   # the program's blocks are too small to fill the GPU's thread slots: this size fills more
        factor = min(1.5, 1.0 + 0.6 * (gain - 1.0))
        return Impact(memory_traffic="low", occupancy="high", compute_fit="low",
                      notes=f"occupancy: {cur}-thread blocks fill {_occupancy(int(cur)):.0%} of a compute unit's "
                            f"thread slots (resident-block limit), {v} fill {_occupancy(int(v)):.0%}; bytes moved "
                            f"unchanged"), round(factor, 3)
    occ = "high" if v in (128, 256) else "medium"
    return Impact(memory_traffic="low", occupancy=occ, compute_fit="low",
                  notes=f"occupancy: {v} threads per block changes blocks per SM and tail effects; bytes moved unchanged"), 1.03


# -- grid-stride loop
def _check_stride(text: str) -> str | None:
    why = _needs_adapter(text)
    if why:
        return why
    for name, body in bodies(text).items():
        c = find_canonical(body, _dialect(name))
        if c is None:
            return "no canonical `i = blockIdx.x*blockDim.x + threadIdx.x; if (i < n) {...}` form"
        why = _loop_safe(c)
        if why:
            return why
    return None


def _stride_rewrite(body: str, dialect: str) -> str:
    c = find_canonical(body, dialect)
    if c is None:
        raise TransformError("no canonical 1-D form")
    t = "int" if c.decl_type.strip() in ("int", "long") else c.decl_type.strip()
    loop = (f"for ({t} {c.var} = {c.idx}; {c.var} < ({c.bound}); {c.var} += {_STRIDE[dialect]}) {{"
            f"{c.block if c.block.startswith(chr(10)) else ' ' + c.block}{'' if c.block.endswith(chr(10)) else ' '}}}")
    return body[: c.start] + "// ksearch: grid-stride loop\n    " + loop + body[c.end:]


def _apply_stride(text: str, v) -> Change:
    out = _both(text, _stride_rewrite)
    out = set_const(out, "KS_GRID_DIV", int(v) * int(get_const(text, "KS_GRID_DIV") or 1))
    return Change(out, f"grid-stride loop, {v} items per thread (grid {v}x smaller)")


def _predict_stride(a: dict, v) -> tuple[Impact, float]:
    return Impact(memory_traffic="low", occupancy="medium", compute_fit="medium",
                  notes=f"fewer blocks ({v} items per thread): less scheduling and index math per item; same bytes"), 1.04


# -- more blocks for a kernel that strides over the grid
# a loop header whose increment strides by the grid (`vec += gridDim.x`, `i += blockDim.x * gridDim.x`), per dialect
_GRID_LOOP = {"cuda": re.compile(r"for\s*\(([^;]*);([^;]*);([^)]*\bgridDim\.x\b[^)]*)\)"),
              "metal": re.compile(r"for\s*\(([^;]*);([^;]*);([^)]*\b(?:threadgroups_per_grid|threads_per_grid)\.x\b[^)]*)\)")}
_GRID_WORDS = {"cuda": re.compile(r"\b(?:blockIdx|gridDim)\.x\b"),
               "metal": re.compile(r"\b(?:threadgroup_position_in_grid|threadgroups_per_grid|threads_per_grid|"
                                   r"thread_position_in_grid)\.x\b")}


def _check_grid(text: str) -> str | None:
    """Applies where the grid only decides how a grid-stride loop spreads its items: every use of the block index
    and of the grid size is inside the header of a loop that strides by the grid, so any number of blocks computes
    the same result (a grid that sizes an output, `out[blockIdx.x] = partial`, is refused)."""
    why = _needs_adapter(text)
    if why:
        return why
    if _assign(text, "KS_GRID_MUL") is None:
        return "the candidate module has no KS_GRID_MUL knob (made before it existed: port the kernel again)"
    if any(int(n) != 1 for g in get_const(text, "KS_GEOMETRY").values() for n in list(g["grid"])[1:]):
        return "the kernel is launched on a 2-D or 3-D grid"
    for name, body in bodies(text).items():
        d = _dialect(name)
        if not _GRID_LOOP[d].search(body):
            return "no loop strides over the grid (`for (...; ...; i += gridDim.x)`)"
        if _GRID_WORDS[d].search(_GRID_LOOP[d].sub("", body)):
            return "the block index or the grid size is used outside grid-stride loop headers (it may size an output)"
    return None


def _apply_grid(text: str, v) -> Change:
    out = set_const(text, "KS_GRID_MUL", int(v) * int(get_const(text, "KS_GRID_MUL") or 1))
    return Change(out, f"{v}x the blocks: the grid-stride loops spread their items over more blocks")


def _predict_grid(a: dict, v) -> tuple[Impact, float]:
    units = _largest_gpu_units()
    few = _too_few_blocks(a.get("captured_most_blocks") or 0)
    factor = min(1.6, 1.0 + 0.3 * int(v) / 2) if few else 1.02
    return Impact(memory_traffic="low", occupancy="high" if few else "medium", compute_fit="low",
                  notes=(f"the program launched {a.get('captured_most_blocks')} blocks, fewer than twice the {units} "
                         f"compute units of the largest GPU: {v}x the blocks keep more of them busy; same bytes"
                         if few else f"{v}x the blocks: shorter grid-stride loops per block; same bytes")), round(factor, 3)


# -- float4 vectorization
def _pointer_params(text: str) -> list[dict]:
    return [p for p in get_const(text, "PARAMS") if p["pointer"]]


def _check_vector(text: str) -> str | None:
    why = _check_stride(text)
    if why:
        return why
    ptrs = _pointer_params(text)
    if any(p.get("dtype") != "float32" or p.get("elem_bytes") != 4 for p in ptrs):
        return "float4 needs every buffer to be plain float"
    for name, body in bodies(text).items():
        c = find_canonical(body, _dialect(name))
        if re.search(r"\bfor\b|\bwhile\b", c.block):
            return "the guarded block loops"
        names = [p["name"] for p in ptrs]
        for n in names:
            for m in re.finditer(rf"\b{re.escape(n)}\s*\[", c.block):
                close = c.block.find("]", m.end())
                if c.block[m.end(): close].strip() != c.var:
                    return f"'{n}' is indexed by something other than {c.var}"
        rest = re.sub(rf"\b(?:{'|'.join(map(re.escape, names))})\s*\[\s*{re.escape(c.var)}\s*\]", "", c.block)
        if re.search(rf"\b{re.escape(c.var)}\b", rest):
            return f"the block uses {c.var} outside p[{c.var}] accesses"
        if re.search(r"\batomic|ks_atomic", c.block):
            return "the block uses atomics"
    return None


def _vector_rewrite(text: str):
    ptrs = {p["name"]: p for p in _pointer_params(text)}

    def rewrite(body: str, dialect: str) -> str:
        c = find_canonical(body, dialect)
        used = [n for n in ptrs if re.search(rf"\b{re.escape(n)}\s*\[", c.block)]
        written = [n for n in used if re.search(rf"\b{re.escape(n)}\s*\[\s*{re.escape(c.var)}\s*\]\s*(=[^=]|[-+*/]=)", c.block)]
        space = "" if dialect == "cuda" else "device "
        pre, post, lanes = [], [], []
        for n in used:
            const = "" if n in written else "const "
            pre.append(f"float4 ks_{n} = (({const}{space}float4*){n})[ks_j];")
        for n in written:
            post.append(f"(({space}float4*){n})[ks_j] = ks_{n};")
        for lane in "xyzw":
            blk = c.block
            for n in used:
                blk = re.sub(rf"\b{re.escape(n)}\s*\[\s*{re.escape(c.var)}\s*\]", f"ks_{n}.{lane}", blk)
            lanes.append("{" + blk + "}")
        stride = _STRIDE[dialect]
        vec = (f"// ksearch: float4 loads and stores, then a scalar tail\n"
               f"    int ks_n = int({c.bound});\n"
               f"    for (int ks_j = {c.idx}; ks_j < ks_n / 4; ks_j += {stride}) {{\n        "
               + "\n        ".join(pre) + "\n        " + "\n        ".join(lanes) + "\n        "
               + "\n        ".join(post) + "\n    }\n"
               f"    for (int {c.var} = (ks_n / 4) * 4 + {c.idx}; {c.var} < ks_n; {c.var} += {stride}) {{{c.block}}}")
        return body[: c.start] + vec + body[c.end:]
    return rewrite


def _apply_vector(text: str, v) -> Change:
    out = _both(text, _vector_rewrite(text))
    out = set_const(out, "KS_GRID_DIV", 4 * int(get_const(text, "KS_GRID_DIV") or 1))
    return Change(out, "float4 loads and stores (4 items per thread), scalar tail")


def _predict_vector(a: dict, v) -> tuple[Impact, float]:
    mem = a.get("bottleneck") == "memory"
    return Impact(memory_traffic="medium", occupancy="medium", compute_fit="medium",
                  notes="128-bit accesses: a quarter of the load/store instructions for the same bytes"), 1.15 if mem else 1.05


# -- unrolling
_CONST_LOOP = re.compile(r"(?<!#pragma unroll\n)(?P<ind>[ \t]*)for\s*\(\s*(?:int|uint|unsigned)\s+\w+\s*=\s*[^;]*;\s*\w+\s*<=?\s*"
                         r"(?P<bound>\d+|[A-Z_][A-Z0-9_]*)\s*;")


def _check_unroll(text: str) -> str | None:
    for name, body in bodies(text).items():
        if not [m for m in _CONST_LOOP.finditer(body) if not _pragma_before(body, m.start())]:
            return "no loop with a constant trip count to unroll"
    return None


def _pragma_before(body: str, pos: int) -> bool:
    return body[:pos].rstrip().endswith("#pragma unroll")


def _unroll_rewrite(body: str, dialect: str) -> str:
    out, last = [], 0
    for m in _CONST_LOOP.finditer(body):
        if _pragma_before(body, m.start()):
            continue
        line_start = body.rfind("\n", 0, m.start()) + 1
        if body[line_start: m.start()].strip():
            continue     # the for is not at the start of its line
        out.append(body[last: line_start] + m.group("ind") + "#pragma unroll\n")
        last = line_start
    out.append(body[last:])
    return "".join(out)


def _apply_unroll(text: str, v) -> Change:
    return Change(_both(text, _unroll_rewrite), "#pragma unroll on constant-trip loops")


# -- fast math
_FAST = {"cuda": [(r"(?<![\w.])expf\s*\(", "__expf("), (r"(?<![\w.])logf\s*\(", "__logf("),
                  (r"(?<![\w.])sinf\s*\(", "__sinf("), (r"(?<![\w.])cosf\s*\(", "__cosf("),
                  (r"(?<![\w.])powf\s*\(", "__powf("), (r"(?<![\w.])tanhf\s*\(", "tanhf(")],
         "metal": [(r"(?:\bmetal::|(?<![\w:.]))exp\s*\(", "fast::exp("), (r"(?:\bmetal::|(?<![\w:.]))log\s*\(", "fast::log("),
                   (r"(?:\bmetal::|(?<![\w:.]))sin\s*\(", "fast::sin("), (r"(?:\bmetal::|(?<![\w:.]))cos\s*\(", "fast::cos("),
                   (r"(?:\bmetal::|(?<![\w:.]))pow\s*\(", "fast::pow(")]}


def _fast_rewrite(body: str, dialect: str) -> str:
    for pat, rep in _FAST[dialect]:
        body = re.sub(pat, rep, body)
    return body


def _check_fast(text: str) -> str | None:
    for name, body in bodies(text).items():
        if _fast_rewrite(body, _dialect(name)) == body:
            return "no exp/log/sin/cos/pow call to make fast"
    return None


def _apply_fast(text: str, v) -> Change:
    return Change(_both(text, _fast_rewrite), "fast-math intrinsics (__expf / fast::exp, ...)")


def _predict_fast(a: dict, v) -> tuple[Impact, float]:
    comp = a.get("bottleneck") == "compute"
    return Impact(memory_traffic="low", occupancy="low", compute_fit="high",
                  notes="special-function unit instead of the accurate library call; within fp32 tolerance 1e-4 "
                        "for arguments of moderate size"), 1.3 if comp else 1.02


# -- read-only data path
_DECL = re.compile(r"^(?P<ind>\s*)(?P<const>const\s+)?(?P<t>[\w:]+(?:\s*\*)+)\s*(?P<n>[A-Za-z_]\w*)\s*=\s*\((?P<cast>[^)]*)\)\s*(?P<src>\w+_(?:in|inout))\s*;",
                   re.M)


def _restrict_rewrite(body: str, dialect: str) -> str:
    if dialect != "cuda":
        return body      # Metal: `const device T*` is already the read-only path
    def rep(m: re.Match) -> str:
        if "__restrict__" in m.group(0):
            return m.group(0)
        return (f"{m.group('ind')}{m.group('const') or ''}{m.group('t')} __restrict__ {m.group('n')} = "
                f"({m.group('cast')}){m.group('src')};")
    return _DECL.sub(rep, body)


def _check_restrict(text: str) -> str | None:
    b = bodies(text)
    if "LAUNCH_CUDA_SOURCE" not in b:
        return "no CUDA body"
    if _restrict_rewrite(b["LAUNCH_CUDA_SOURCE"], "cuda") == b["LAUNCH_CUDA_SOURCE"]:
        return "the pointers are already __restrict__ (or none is declared from launch()'s buffers)"
    return None


def _apply_restrict(text: str, v) -> Change:
    b = get_const(text, "LAUNCH_CUDA_SOURCE")
    return Change(set_const(text, "LAUNCH_CUDA_SOURCE", _restrict_rewrite(b, "cuda")),
                  "__restrict__ pointers: read-only loads through the read-only data cache (__ldg)")


def _predict_restrict(a: dict, v) -> tuple[Impact, float]:
    return Impact(memory_traffic="low", occupancy="low", compute_fit="medium",
                  notes="no aliasing: the compiler may reorder and batch loads and use the read-only path; "
                        "no effect on Metal or in the simulator"), 1.02


# -- warp-level reduction instead of the last rounds of a shared-memory tree
_BARRIER = {"cuda": r"__syncthreads\(\)\s*;", "metal": r"threadgroup_barrier\(\s*mem_flags::mem_threadgroup\s*\)\s*;"}
_SHFL = {"cuda": "__shfl_down_sync(0xffffffffu, ks_v, ks_o)", "metal": "simd_shuffle_down(ks_v, (ushort)ks_o)"}
_TREE = re.compile(r"for\s*\(\s*(?:unsigned\s+int|unsigned|uint|int)\s+(?P<s>[A-Za-z_]\w*)\s*=\s*(?P<start>[^;]+?)\s*"
                   r"(?:/\s*2|>>\s*1)\s*;\s*(?P=s)\s*>\s*0\s*;\s*(?:(?P=s)\s*>>=\s*1|(?P=s)\s*/=\s*2|(?P=s)\s*=\s*(?P=s)\s*(?:>>\s*1|/\s*2))\s*\)\s*\{")


_KEPT = "/* ksearch warp_reduce: fewer than 32 threads */"


@dataclass
class _Tree:
    start: int            # the for statement's span in the body
    end: int
    s: str                # the stride variable
    extent: str           # what the stride starts from (halved): the threads taking part
    tid: str
    arr: str
    elem: str
    stmt: str             # the update statement, e.g. "sdata[tid] += sdata[tid + s];"


def _find_tree(body: str, dialect: str) -> _Tree | None:
    for m in _TREE.finditer(body):
        if body[:m.start()].rstrip().endswith(_KEPT):
            continue   # the small-block copy an earlier warp_reduce kept
        close = _match_brace(body, m.end() - 1)
        inner = body[m.end(): close]
        g = re.fullmatch(rf"\s*if\s*\(\s*(?P<tid>[A-Za-z_]\w*(?:\.x)?)\s*<\s*{m.group('s')}\s*\)\s*(?P<blk>\{{[^{{}}]*\}}|[^;{{}}]*;)"
                         rf"\s*{_BARRIER[dialect]}\s*", inner)
        if not g:
            continue
        stmt = g.group("blk").strip()
        if stmt.startswith("{"):
            stmt = stmt[1:-1].strip()
        tid, sv = re.escape(g.group("tid")), re.escape(m.group("s"))
        u = re.fullmatch(rf"(?P<arr>[A-Za-z_]\w*)\s*\[\s*{tid}\s*\]\s*(?P<op>[-+*&|^]?=)\s*(?P<rhs>[^;]+);", stmt)
        if not u or ";" in u.group("rhs") or not re.search(rf"\b{u.group('arr')}\s*\[\s*{tid}\s*\+\s*{sv}\s*\]", stmt):
            continue
        arr = u.group("arr")
        d = re.search(rf"(?:__shared__|threadgroup)\s+(?:volatile\s+)?(?P<t>[A-Za-z_][\w:]*)\s+{arr}\s*\[", body) or \
            re.search(rf"(?P<t>float|double|int|unsigned|uint|half|__half|long)\s*\*\s*{arr}\s*=", body)
        if not d:
            continue
        # the reducing threads must be one warp's lanes: tid is threadIdx.x itself, or a copy of it
        t_ids = _IDS[dialect][2]
        if not (re.fullmatch(t_ids, g.group("tid")) or re.search(
                rf"\b{tid}\s*=\s*(?:\(\s*\w+\s*\)\s*)?{t_ids}\s*;", body)):
            continue
        return _Tree(start=m.start(), end=close + 1, s=m.group("s"), extent=m.group("start").strip(),
                     tid=g.group("tid"), arr=arr, elem=d.group("t"), stmt=stmt)
    return None


def _check_warp_reduce(text: str) -> str | None:
    for name, body in bodies(text).items():
        if _find_tree(body, _dialect(name)) is None:
            return ("no shared-memory tree reduction of the form `for (s = blockDim.x/2; s > 0; s >>= 1) { if (tid < s) "
                    "sdata[tid] += sdata[tid + s]; __syncthreads(); }`")
    if _assign(text, "KS_GEOMETRY") is not None and any(
            g["block"][1] * g["block"][2] != 1 for g in get_const(text, "KS_GEOMETRY").values()):
        return "the kernel is launched with 2-D or 3-D blocks (the reducing threads are not one warp's lanes)"
    return None


def _warp_rewrite(body: str, dialect: str) -> str:
    t = _find_tree(body, dialect)
    if t is None:
        return body
    bar = "__syncthreads();" if dialect == "cuda" else "threadgroup_barrier(mem_flags::mem_threadgroup);"
    tid, arr = re.escape(t.tid), re.escape(t.arr)
    # the update with the partner element shuffled in and the own element in a register
    upd = re.sub(rf"\b{arr}\s*\[\s*{tid}\s*\+\s*{re.escape(t.s)}\s*\]", "ks_p", t.stmt)
    upd = re.sub(rf"\b{arr}\s*\[\s*{tid}\s*\]", "ks_v", upd)
    loop = body[t.start:t.end]
    head = loop[:loop.index("{")]
    cond = re.sub(rf"\b{re.escape(t.s)}\s*>\s*0\s*;", f"{t.s} > 16;", head, count=1)
    new = (f"if (({t.extent}) >= 32) {{  // ksearch warp_reduce: the tree down to 32 partials, then one warp's shuffles\n"
           f"  {cond}{loop[len(head):]}\n"
           f"  if ({t.tid} < 32) {{\n"
           f"    {t.elem} ks_v = {t.arr}[{t.tid}];\n"
           f"    for (int ks_o = 16; ks_o > 0; ks_o >>= 1) {{\n"
           f"      {t.elem} ks_p = {_SHFL[dialect]};\n"
           f"      {upd}\n"
           f"    }}\n"
           f"    if ({t.tid} == 0) {t.arr}[0] = ks_v;\n"
           f"  }}\n"
           f"  {bar}\n"
           f"}} else {{\n"
           f"  {_KEPT} {loop}\n"
           f"}}")
    return body[:t.start] + new + body[t.end:]


def _apply_warp_reduce(text: str, v) -> Change:
    return Change(_both(text, _warp_rewrite), "the last 32 partials of the block's tree reduction by warp shuffles")


def _predict_warp_reduce(a: dict, v) -> tuple[Impact, float]:
    return Impact(memory_traffic="low", occupancy="medium", compute_fit="medium",
                  notes="five fewer barrier rounds and shared-memory round trips per block; bytes moved to and "
                        "from device memory unchanged"), 1.05


TRANSFORMS: list[Transform] = [
    Transform("vectorize", "vectorised loads and stores", "width", [4], 2, lambda v: f"float{v} loads and stores",
              _check_vector, _apply_vector, _predict_vector),
    Transform("grid_stride", "items per thread", "items", [4, 2, 8], 2,
              lambda v: f"grid-stride loop, {v} items per thread", _check_stride, _apply_stride, _predict_stride),
    Transform("block_size", "threads per block", "block", [128, 512, 64, 1024, 256], 1,
              lambda v: f"{v} threads per block", _check_block, _apply_block, _predict_block),
    Transform("fast_math", "fast-math intrinsics", "on", [True], 1, lambda v: "fast-math intrinsics",
              _check_fast, _apply_fast, _predict_fast),
    Transform("unroll", "unrolling", "on", [True], 1, lambda v: "#pragma unroll on constant-trip loops",
              _check_unroll, _apply_unroll, lambda a, v: (Impact(memory_traffic="low", occupancy="medium",
                                                                 compute_fit="medium",
                                                                 notes="fewer branches and index updates"), 1.03)),
    Transform("read_only", "read-only data path", "on", [True], 1, lambda v: "__restrict__ pointers (__ldg loads)",
              _check_restrict, _apply_restrict, _predict_restrict),
    Transform("grid_blocks", "blocks per grid", "times", [2, 4], 1,
              lambda v: f"{v}x the blocks (grid-stride loops)", _check_grid, _apply_grid, _predict_grid),
    Transform("warp_reduce", "warp-level reduction", "on", [True], 2,
              lambda v: "warp shuffles for the last 32 partials of the tree reduction",
              _check_warp_reduce, _apply_warp_reduce, _predict_warp_reduce),
]
BY_ID = {t.id: t for t in TRANSFORMS}


def get(tid: str) -> Transform:
    if tid.startswith("xform:"):
        tid = tid[len("xform:"):]
    try:
        return BY_ID[tid]
    except KeyError:
        raise TransformError(f"no source transformation '{tid}' (known: {', '.join(BY_ID)})") from None


def applicable(text: str) -> list[tuple[Transform, list]]:
    """The transformations that fit this module, each with its knob values worth trying."""
    out = []
    for t in TRANSFORMS:
        if t.applies(text) is None:
            opts = t.options(text)
            if opts:
                out.append((t, opts))
    return out


def apply_chain(text: str, steps: list[tuple[str, object]]) -> str:
    """The module after the transformations `steps` ((id, knob value), in order); raises TransformError."""
    for tid, v in steps:
        t = get(tid)
        why = t.applies(text)
        if why:
            raise TransformError(f"{t.id} does not apply after the earlier steps: {why}")
        text = t.apply(text, v).source
    return text
