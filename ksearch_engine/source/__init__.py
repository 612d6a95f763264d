"""source: finds kernels in CUDA, Metal and MLX-Python text.

    from ksearch_engine.source import find_kernels
    result = find_kernels(text, "softmax.cu")     # or a language: "cuda", "metal", "python"
    result.kernels, result.helpers, result.diagnostics

Never raises on bad input: a damaged file gives the kernels that can still be found and diagnostics
with line numbers; a file that is not source at all gives no kernels and one clear diagnostic.
"""
from __future__ import annotations

from pathlib import PurePath

from .cfamily import language, parse_bytes, scan_c_family
from .mlx_python import scan_python
from .models import (Diagnostic, KernelInfo, LaunchSite, Param, ParseResult, Position, Range, SharedDecl,
                     TemplateParam)

__all__ = ["find_kernels", "language_of", "parse_bytes", "language", "Diagnostic", "KernelInfo",
           "LaunchSite", "Param", "ParseResult", "Position", "Range", "SharedDecl", "TemplateParam"]

_SUFFIX = {".cu": "cuda", ".cuh": "cuda", ".metal": "metal", ".py": "python"}
# C/C++ headers hold CUDA kernels too (`device_reduce_atomic.h` beside its main.cu): read as CUDA when their
# text has CUDA's function qualifiers
HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".hxx", ".inl")


def language_of(path_or_language: str) -> str | None:
    """'cuda', 'metal' or 'python' from a path's suffix or a language name, else None."""
    if path_or_language in ("cuda", "metal", "python"):
        return path_or_language
    return _SUFFIX.get(PurePath(path_or_language).suffix.lower())


def find_kernels(text: str | bytes, path_or_language: str) -> ParseResult:
    """Kernels, device helpers, launch sites and diagnostics of one file's text."""
    lang = language_of(path_or_language)
    path = None if path_or_language in ("cuda", "metal", "python") else str(path_or_language)
    data = text.encode("utf-8", errors="replace") if isinstance(text, str) else text
    if lang is None and PurePath(path_or_language).suffix.lower() in HEADER_SUFFIXES:
        if b"__global__" not in data and b"__device__" not in data:
            return ParseResult(language="unknown", path=path, diagnostics=[Diagnostic(
                message="this header has no CUDA code (no __global__ or __device__ function): no kernels to find",
                line=0)])
        lang = "cuda"
    if lang is None:
        return ParseResult(language="unknown", path=path, diagnostics=[Diagnostic(
            message=f"unsupported file type '{path_or_language}': expected .cu, .cuh, .metal or .py (or a C/C++ "
                    "header holding CUDA kernels)", line=0)])
    if b"\x00" in data[:65536] or _mostly_binary(data):
        return ParseResult(language="unknown", path=path, diagnostics=[Diagnostic(
            message="this file is binary, not source text: no kernels to find", line=0)])
    if lang == "python":
        return scan_python(data, path)
    return scan_c_family(data, lang, "cuda" if lang == "cuda" else "metal", path)


def _mostly_binary(data: bytes) -> bool:
    head = data[:8192]
    if not head:
        return False
    bad = sum(1 for b in head if b < 9 or 13 < b < 32)
    try:
        head.decode("utf-8")
        invalid = False
    except UnicodeDecodeError as e:
        invalid = e.start < len(head) - 4
    return bad > len(head) * 0.05 or (invalid and bad > 0)
