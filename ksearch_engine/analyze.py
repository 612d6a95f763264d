"""The analysis stage: what a kernel computes, how it touches memory, and what should bound its speed.

Before any plan is made, K-Search-style search looks at the task: it classifies the kernel's family
(elementwise, reduction, norm, softmax, attention, scan, matmul, gather/scatter/routing), writes the canonical
form of the reference computation, describes the data access, and computes the arithmetic intensity
(flops / bytes, from the task's largest timed workload) against the backend's ceilings (bandwidth and peak
flops from `specs/hardware` when a chip matches, otherwise a few conservative constants). The result is an
`Analysis` (pydantic) that proposers read and the tree keeps.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from typing import Literal

from pydantic import BaseModel, Field

from .task import KernelTask, Workload

Category = Literal["elementwise", "reduction", "scan", "attention/softmax", "matmul", "gather/scatter/routing"]
Bottleneck = Literal["memory", "compute", "latency"]

_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4, "int64": 8, "bool": 1}

# family id (specs/families.yaml) -> the coarse category the analysis reports
_CATEGORY = {
    "elementwise": "elementwise", "reduction": "reduction", "norm": "reduction", "softmax": "attention/softmax",
    "attention": "attention/softmax", "decode_attention": "attention/softmax", "scan": "scan",
    "matmul": "matmul", "moe": "gather/scatter/routing",
}

_CANONICAL = {
    "elementwise": "y[i] = f(x1[i], x2[i], ...) for every element i; no element depends on another",
    "reduction": "y[r] = ⊕_j x[r, j] over the reduced axis (⊕ associative: +, max, ...)",
    "norm": "y[r, j] = x[r, j] · w[j] / sqrt(mean_j x[r, j]² + eps)  (a row reduction, then an elementwise rescale)",
    "softmax": "y[r, j] = exp(x[r, j] − m_r) / Σ_k exp(x[r, k] − m_r),  m_r = max_k x[r, k]",
    "attention": "O = softmax(Q Kᵀ · scale + mask) V, per batch and head; the softmax runs over the key axis",
    "decode_attention": "o = softmax(q Kᵀ · scale) V for one query per sequence against a long KV cache",
    "scan": "h_t = a_t ⊙ h_{t−1} + b_t,  y_t = c_t · h_t  (a linear recurrence; (a2,b2)∘(a1,b1) = (a2·a1, a2·b1 + b2))",
    "matmul": "C[m, n] = Σ_k A[m, k] · B[k, n]  (batched over leading dims)",
    "moe": "scores = x W_r; top-k experts per token; y = Σ_k g_k · E_k(x)  (gather by expert, grouped matmul, scatter-add)",
}

_ACCESS = {
    "elementwise": "each input element read once and each output written once, contiguous; no reuse: bytes, not flops, set the time",
    "reduction": "each row read once along the reduced axis; rows independent; partial results combine in registers / SIMD groups",
    "norm": "each row read once (twice if the rescale re-reads), weights broadcast across rows; one write per element",
    "softmax": "each row read for the max, the sum and the write (three sweeps naive, one or two fused); rows independent",
    "attention": "Q tiles stay resident while K and V stream past; the score matrix need never reach memory (online softmax)",
    "decode_attention": "the whole KV cache streams once per query; bandwidth-bound; split-K over the sequence for parallelism",
    "scan": "sequential along time, parallel across channels/state; chunked or associative scans expose parallelism in time",
    "matmul": "each A and B tile reused across a tile of C; reuse grows with tile size until registers/threadgroup memory run out",
    "moe": "tokens gathered by expert (indirect, irregular), expert weights streamed, results scattered back and weighted",
}

# (bandwidth GB/s, fp32 TFLOP/s, fp16 TFLOP/s) when no chip in specs/hardware matches
_FALLBACK = {
    "mlx-cpu": (20.0, 0.05, 0.05, "fallback constants for a CPU running MLX's reference kernels"),
    "sim": (20.0, 0.05, 0.05, "fallback constants (the simulator is not timed)"),
    "mlx-metal": (400.0, 10.0, 10.0, "fallback constants for an M-series Max GPU"),
    "mlx-cuda": (4800.0, 60.0, 990.0, "fallback constants for an H200"),
}


class Ceilings(BaseModel):
    bandwidth_gbs: float
    tflops: float
    source: str


class Analysis(BaseModel):
    family: str = Field(description="kernel family id (specs/families.yaml), e.g. softmax")
    category: Category
    canonical_form: str
    data_access: str
    bottleneck: Bottleneck
    flops: float = 0.0
    bytes: float = 0.0
    arithmetic_intensity: float = Field(0.0, description="flops per byte at the largest timed workload")
    ridge_point: float = Field(0.0, description="flops per byte where the backend turns compute-bound")
    ceilings: Ceilings | None = None
    workload: str = ""
    roofline_ms: float | None = Field(None, description="the faster of the bandwidth and compute floors")
    notes: list[str] = []

    def text(self) -> str:
        lines = [f"family: {self.family} ({self.category})", f"computes: {self.canonical_form}",
                 f"data access: {self.data_access}"]
        if self.bytes:
            lines.append(f"at {self.workload}: {self.flops:.3g} flops, {self.bytes:.3g} bytes, "
                         f"intensity {self.arithmetic_intensity:.3g} flop/B vs ridge {self.ridge_point:.3g} → {self.bottleneck}-bound"
                         + (f"; roofline floor {self.roofline_ms:.3g} ms" if self.roofline_ms else ""))
        else:
            lines.append(f"likely bottleneck: {self.bottleneck}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------- classification
_RULES: list[tuple[str, str]] = [
    ("attention", r"scaled_dot_product_attention|\bflash|attention|(softmax[\s\S]*(@|matmul))|((@|matmul)[\s\S]*softmax)"),
    ("moe", r"argpartition|\btopk|top_k|gather_mm|\bexperts?\b|routing|scatter|atomicAdd|atomic_fetch_add"),
    ("scan", r"cumsum|cumprod|associative_scan|selective_scan|\bh\s*=\s*.*\*\s*h\b|for\s+t\s+in\s+range"),
    ("softmax", r"softmax|logsumexp|\bexp\b[\s\S]*\bsum\b|__expf|fast::exp"),
    ("matmul", r"\bmatmul\b|\s@\s|\beinsum\b|\bgemm\b|simdgroup_matrix|mma\.sync|wmma"),
    ("norm", r"rms_norm|layer_norm|rsqrt|\bnorm\b"),
    ("reduction", r"\b(sum|max|min|mean|argmax|prod)\s*\(|simd_sum|__shfl|warp_reduce|simd_max"),
]


def classify(text: str, declared: str | None = None) -> str:
    """The family id for a task/kernel: the declared one when it is a known family, else read from the source."""
    if declared and declared != "custom":
        fid = _known_family(declared)
        if fid:
            return fid
    for fam, pattern in _RULES:
        if re.search(pattern, text):
            return fam
    return "elementwise"


def _known_family(name: str) -> str | None:
    try:
        from .specs import load_specs
        fid = load_specs().family(name)
        if fid:
            return fid
    except Exception:  # noqa: BLE001 - specs are optional here; fall back to our own names
        pass
    n = re.sub(r"[^a-z0-9]", "", name.lower())
    aliases = {"rmsnorm": "norm", "layernorm": "norm", "gemm": "matmul", "sdpa": "attention", "mamba": "scan",
               "ssm": "scan", "selectivescan": "scan", "routing": "moe", "topk": "moe", "logsoftmax": "softmax",
               "pagedattention": "decode_attention", "decode": "decode_attention", "gelu": "elementwise"}
    if n in _CATEGORY:
        return n
    return aliases.get(n)


# ---------------------------------------------------------------- numbers
def output_shapes(task: KernelTask, workload: Workload, timeout: float = 20.0) -> list[tuple[list[int], str]] | None:
    """Shapes and dtypes of the reference's outputs, from a lazy MLX graph in a child process (nothing is computed)."""
    spec = {"reference": task.reference,
            "inputs": [[list(i.resolve_shape(workload.dims)), i.dtype] for i in task.inputs]}
    code = ("import json,sys\nimport mlx.core as mx\nd=json.loads(sys.stdin.read())\nns={}\n"
            "exec(compile(d['reference'],'<reference>','exec'),ns)\n"
            "xs=[mx.zeros(s,dtype=getattr(mx,t)) for s,t in d['inputs']]\n"
            "o=ns['reference'](*xs)\no=o if isinstance(o,(tuple,list)) else (o,)\n"
            "print(json.dumps([[list(a.shape),str(a.dtype).split('.')[-1]] for a in o]))\n")
    try:
        p = subprocess.run([sys.executable, "-c", code], input=json.dumps(spec), capture_output=True, text=True,
                           timeout=timeout)
        if p.returncode != 0:
            return None
        return [(list(s), t) for s, t in json.loads(p.stdout.strip().splitlines()[-1])]
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError):
        return None


def _flops(family: str, ins: list[tuple[list[int], str]], outs: list[tuple[list[int], str]], reference: str) -> float:
    n_in = max((math.prod(s) for s, _ in ins), default=0)
    n_out = sum(math.prod(s) for s, _ in outs) or n_in
    if family == "matmul" and ins and len(ins[0][0]) >= 2:
        return 2.0 * n_out * ins[0][0][-1]
    if family in ("attention", "decode_attention") and len(ins) >= 2 and len(ins[1][0]) >= 2:
        return 4.0 * n_out * ins[1][0][-2]
    per = {"reduction": 1, "norm": 4, "softmax": 5, "scan": 3, "moe": 2}.get(family)
    if per is None:  # elementwise: count the operations the reference spells out
        body = reference.split("def reference", 1)[-1]
        per = max(1, len(re.findall(r"mx\.\w+\(|[+\-*/](?!=)", body)))
        return float(per * n_out)
    return float(per * n_in)


def ceilings(backend: str, device: str = "", dtype: str = "float32") -> Ceilings:
    """Bandwidth and peak flops for the chip (specs/hardware), else the backend's fallback constants."""
    try:
        from .specs import load_specs
        view = load_specs().hardware(device or backend)
        chip = view.chip
        if chip is not None and backend != "mlx-cpu":
            bw = _mid(chip.memory_bandwidth_gbs)
            tf = _mid(chip.fp16_tflops if dtype in ("float16", "bfloat16") and chip.fp16_tflops else chip.fp32_tflops)
            if bw and tf:
                return Ceilings(bandwidth_gbs=bw, tflops=tf, source=f"specs/hardware/{view.spec.id}.yaml: {chip.name}")
    except Exception:  # noqa: BLE001 - specs missing or no chip matched: use the constants below
        pass
    bw, f32, f16, why = _FALLBACK.get(backend, _FALLBACK["mlx-cpu"])
    return Ceilings(bandwidth_gbs=bw, tflops=f16 if dtype in ("float16", "bfloat16") else f32, source=why)


def _mid(v) -> float | None:
    if v is None:
        return None
    return float(sum(v) / 2) if isinstance(v, tuple) else float(v)


def analyze(task: KernelTask, backend: str = "mlx-cpu", *, device: str = "", kernel_source: str = "",
            probe_outputs: bool = True) -> Analysis:
    """Classify the task, describe it, and place it on the backend's roofline at its largest timed workload."""
    if task.origin == "captured":
        return _analyze_captured(task, backend, device)
    family = classify(task.reference + "\n" + (task.initial or "") + "\n" + kernel_source, task.family)
    category = _CATEGORY.get(family, "elementwise")
    notes: list[str] = []
    wl = max(task.timing_workloads(), key=lambda w: sum(math.prod(i.resolve_shape(w.dims)) for i in task.inputs))
    ins = [(list(i.resolve_shape(wl.dims)), i.dtype) for i in task.inputs]
    outs = output_shapes(task, wl) if probe_outputs else None
    if outs is None:
        outs = [ins[0]] if ins else []
        notes.append("output shapes not probed; assumed the first input's shape")
    flops = _flops(family, ins, outs, task.reference)
    nbytes = float(sum(math.prod(s) * _BYTES.get(t, 4) for s, t in ins + outs))
    dtype = ins[0][1] if ins else "float32"
    ceil = ceilings(backend, device, dtype)
    ai = flops / nbytes if nbytes else 0.0
    ridge = ceil.tflops * 1e12 / (ceil.bandwidth_gbs * 1e9)
    t_mem = nbytes / (ceil.bandwidth_gbs * 1e9) * 1e3
    t_cmp = flops / (ceil.tflops * 1e12) * 1e3
    bottleneck: str = "compute" if ai > ridge else "memory"
    if backend not in ("mlx-cpu", "sim") and nbytes < 1 << 20 and flops < 1e8:
        bottleneck = "latency"
        notes.append("under 1 MB moved: launch and synchronization latency dominate on a GPU")
    src = (task.initial or "") + kernel_source
    if re.search(r"for\s+\w+\s+in\s+range\(", src) and "mx." in src:
        notes.append("the starting candidate loops in Python over MLX ops: one small op per iteration, launch-bound")
        if family != "scan":
            bottleneck = "latency"
    return Analysis(family=family, category=category, canonical_form=_CANONICAL.get(family, _CANONICAL["elementwise"]),
                    data_access=_ACCESS.get(family, _ACCESS["elementwise"]), bottleneck=bottleneck, flops=flops,
                    bytes=nbytes, arithmetic_intensity=ai, ridge_point=ridge, ceilings=ceil, workload=wl.name,
                    roofline_ms=max(t_mem, t_cmp), notes=notes)


def _analyze_captured(task: KernelTask, backend: str, device: str) -> Analysis:
    """The user's own kernel (a captured task): classified from its kernel body alone, bytes from its buffers
    (every buffer read once, every written buffer written once), flops from the body's arithmetic per thread,
    occupancy facts from the captured launch."""
    body, geometry = "", {}
    try:
        from .propose.transforms import get_const
        body = get_const(task.initial or "", "LAUNCH_CUDA_SOURCE")
        geometry = get_const(task.initial or "", "KS_GEOMETRY")
    except Exception:  # noqa: BLE001 - a task without a port body: classify what there is
        body = task.initial or ""
    code = re.sub(r"//[^\n]*", "", body)
    family = classify(code, None)
    if not re.search(r"__shared__|threadgroup|atomic|__shfl|simd_", code) and family in ("reduction", "moe", "norm"):
        family = "elementwise"
    wl = max(task.timing_workloads(), key=lambda w: sum(w.dims.values()))
    sizes = {i.name: math.prod(i.resolve_shape(wl.dims)) * _BYTES.get(i.dtype, 4) for i in task.inputs}
    nbytes = float(sum(sizes.values()) + sum(sizes.get(o, 0) for o in task.outputs))
    g = geometry.get(next(iter(geometry), ""), {}) if geometry else {}
    for key, val in geometry.items():           # the timed workload's own launch
        if all(str(wl.dims.get(f"{i.name}_len", "")) in key for i in task.inputs if i.shape != [1]):
            g = val
    threads = math.prod(g.get("grid", [1])) * math.prod(g.get("block", [1])) if g else 0
    per_thread = max(1, len(re.findall(r"[+\-*/](?![=+\-])|\b(?:exp|log|sqrt|rsqrt|sin|cos|pow)\w*\s*\(", code)) - 1)
    flops = float(per_thread * max(threads, 1))
    dtype = next((i.dtype for i in task.inputs if i.shape != [1]), "float32")
    ceil = ceilings(backend, device, dtype)
    ai = flops / nbytes if nbytes else 0.0
    ridge = ceil.tflops * 1e12 / (ceil.bandwidth_gbs * 1e9)
    t_mem = nbytes / (ceil.bandwidth_gbs * 1e9) * 1e3
    t_cmp = flops / (ceil.tflops * 1e12) * 1e3
    bottleneck = "compute" if ai > ridge else "memory"
    notes = []
    if g:
        notes.append(f"captured launch: grid {tuple(g['grid'])} blocks of {tuple(g['block'])} threads, "
                     f"{g.get('shared_mem', 0)} B dynamic shared memory ({threads} threads)")
    if backend not in ("mlx-cpu", "sim") and nbytes < 1 << 20 and flops < 1e8:
        bottleneck = "latency"
        notes.append("under 1 MB moved: launch and synchronization latency dominate on a GPU")
    if re.search(r"__shared__|threadgroup\s", code):
        notes.append("stages data in shared (threadgroup) memory")
    if re.search(r"atomic", code):
        notes.append("uses atomics: contention on the same addresses serializes threads")
    category = _CATEGORY.get(family, "elementwise")
    return Analysis(family=family, category=category, canonical_form=f"the user's kernel {task.kernel_name or task.name}: "
                    f"writes {', '.join(task.outputs)} from its arguments ({_CANONICAL.get(family, _CANONICAL['elementwise'])})",
                    data_access=_ACCESS.get(family, _ACCESS["elementwise"]), bottleneck=bottleneck, flops=flops,
                    bytes=nbytes, arithmetic_intensity=ai, ridge_point=ridge, ceilings=ceil, workload=wl.name,
                    roofline_ms=max(t_mem, t_cmp), notes=notes)
