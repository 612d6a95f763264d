"""translate: CUDA kernel → MLX module (Metal port via mx.fast.metal_kernel, CUDA-backend port via
mx.fast.cuda_kernel, a `kernel(*inputs)` wrapper, and a `reference` in MLX ops for known families).

    from ksearch_engine.source import find_kernels
    from ksearch_engine.translate import translate_kernel
    result = find_kernels(text, "softmax.cu")
    tr = translate_kernel(result, "softmax_kernel", "softmax.cu")
    tr.module_text, tr.metal_source, tr.cuda_source, tr.header, tr.report, tr.rules_applied, tr.task_hint

The CUDA → Metal rules are data: specs/translation.yaml (see rules.py).
"""
from __future__ import annotations

from .rewrite import Issue, RewriteContext, Rewriter
from .rules import Rule, RuleTable, load_rules
from .translator import TranslateError, Translation, module_path_for, translate_kernel

__all__ = ["translate_kernel", "translate_file", "load_cuda_kernel", "translate_snippet", "Translation", "TranslateError", "Issue", "Rule", "RuleTable",
           "load_rules", "module_path_for"]


def translate_snippet(cuda: str, rules: RuleTable | None = None) -> tuple[str, list[Issue], list[str]]:
    """Metal text for a few CUDA statements (as in a kernel body), with issues and the rule ids applied."""
    rw = Rewriter(rules or load_rules())
    text = rw.rewrite_snippet(cuda)
    return text, rw.issues, rw.applied


def translate_helper(cuda: str, rules: RuleTable | None = None) -> str:
    """Metal text for one `__device__` helper function."""
    rw = Rewriter(rules or load_rules())
    whole, _ = rw.rewrite_function(cuda, helper=True)
    return whole


def load_cuda_kernel(path, kernel: str | None = None):
    """Reads a .cu file and picks one CUDA kernel (the first when `kernel` is None).
    Returns (parse result, kernel info); a clear TranslateError naming the file otherwise."""
    from pathlib import Path

    from ..source import find_kernels

    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as e:
        raise TranslateError(f"{p}: cannot read the file ({e.strerror})") from None
    parsed = find_kernels(text, str(p))
    cuda = [k for k in parsed.kernels if k.language == "cuda"]
    if not cuda:
        if parsed.kernels:      # Metal (or MLX) kernels: nothing to translate, but they can be optimized
            kinds = ", ".join(f"{k.name} ({k.language})" for k in parsed.kernels[:4])
            raise TranslateError(f"{p}: nothing to port: its kernels are not CUDA ({kinds}). Port to MLX translates "
                                 f"CUDA kernels (.cu/.cuh); a Metal or MLX kernel can be optimized as it is "
                                 f"(`ksearch optimize {p.name}` with a task file)")
        why = "; ".join(d.message for d in parsed.diagnostics[:3]) or "no __global__ function found"
        raise TranslateError(f"{p}: nothing to port: no CUDA kernel ({why})")
    k = next((k for k in cuda if k.name == kernel), None) if kernel else cuda[0]
    if k is None:
        raise TranslateError(f"{p}: no CUDA kernel named '{kernel}' (found: {', '.join(x.name for x in cuda)})")
    return parsed, k


def translate_file(path, kernel: str | None = None, rules: RuleTable | None = None) -> Translation:
    """Reads a .cu file and ports one kernel (the first when `kernel` is None)."""
    parsed, k = load_cuda_kernel(path, kernel)
    return translate_kernel(parsed, k.name, str(path), rules=rules)
