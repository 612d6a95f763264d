"""Fuzzing the kernel finder and the CUDA -> MLX translator with random and mutated sources.

Inputs: random text and bytes, and mutations of the example kernels (`examples/**/*.cu`): deleted and
duplicated spans, random bytes, truncation, unbalanced braces and parentheses, huge identifiers, NUL bytes,
broken launch syntax. Properties: no exception escapes `find_kernels` (it reports diagnostics instead);
`translate_kernel` either returns a translation or raises its documented `TranslateError`; each call
finishes within a time bound. A failing example is printed by hypothesis with the mutation that made it.
"""
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ksearch_engine.source import ParseResult, find_kernels
from ksearch_engine.translate import TranslateError, translate_kernel

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(ROOT.glob("examples/**/*.cu"))
TEXTS = {p.name: p.read_text() for p in EXAMPLES}
PARSE_S = 5.0        # generous: a normal example parses in ~10 ms on CI
TRANSLATE_S = 10.0

SNIPPETS = ["{", "}", "(", ")", "<<<", ">>>", "/*", "*/", "//", "\"", "'", "#define X(", "#if 0\n", "#endif\n",
            "\\\n", "__global__", "__shared__", "template <typename T", "\0", "\x00\x01\xff", "\ufeff",
            "__syncthreads();", "<<<1, 1>>>(", ";;;;", "extern \"C\" {", "\r\n", "\t" * 50]

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=False)


@st.composite
def mutated_example(draw):
    """One example kernel with 1-4 mutations applied, and a description of them (for failure reports)."""
    name = draw(st.sampled_from(sorted(TEXTS)))
    text = TEXTS[name]
    done = []
    for _ in range(draw(st.integers(1, 4))):
        n = len(text)
        i = draw(st.integers(0, max(n - 1, 0)))
        j = draw(st.integers(i, min(n, i + 400)))
        op = draw(st.sampled_from(["delete", "duplicate", "random", "truncate", "snippet", "huge_ident", "nul",
                                   "swap_braces"]))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] * draw(st.integers(1, 20)) + text[j:]
        elif op == "random":
            text = text[:i] + draw(st.text(max_size=64)) + text[i:]
        elif op == "truncate":
            text = text[:i]
        elif op == "snippet":
            text = text[:i] + draw(st.sampled_from(SNIPPETS)) * draw(st.integers(1, 30)) + text[i:]
        elif op == "huge_ident":
            text = text[:i] + "k" * draw(st.integers(1000, 100000)) + text[i:]
        elif op == "nul":
            text = text[:i] + "\0" * draw(st.integers(1, 16)) + text[i:]
        else:
            text = text.replace("{", "}", 1) if draw(st.booleans()) else text.replace(")", "(", 2)
        done.append(f"{op}@{i}:{j}")
    return name, " ".join(done), text


def _parse(text, path: str) -> ParseResult:
    t0 = time.perf_counter()
    result = find_kernels(text, path)
    took = time.perf_counter() - t0
    assert took < PARSE_S, f"find_kernels took {took:.1f} s"
    assert isinstance(result, ParseResult)
    for d in result.diagnostics:   # diagnostics are readable, with a line
        assert isinstance(d.message, str) and d.message and d.line >= 0
    return result


def _translate_all(result: ParseResult, path: str) -> None:
    for k in result.kernels:
        t0 = time.perf_counter()
        try:
            tr = translate_kernel(result, k.name, path)
        except TranslateError as e:
            assert str(e), "a TranslateError must say why"
        else:
            assert isinstance(tr.module_text, str)
        took = time.perf_counter() - t0
        assert took < TRANSLATE_S, f"translate_kernel({k.name!r}) took {took:.1f} s"


@FUZZ
@given(mutated_example())
def test_mutated_examples_never_crash_the_finder_or_translator(case):
    name, how, text = case
    result = _parse(text, name)
    _translate_all(result, name)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=2000), st.sampled_from(["x.cu", "x.cuh", "x.metal", "x.py", "x.txt", "cuda", "metal"]))
def test_random_text_never_crashes_the_finder(text, path):
    result = _parse(text, path)
    if path.endswith((".cu", ".cuh")) or path == "cuda":
        _translate_all(result, path if "." in path else "x.cu")


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=2000), st.sampled_from(["x.cu", "x.metal", "x.py"]))
def test_random_bytes_never_crash_the_finder(data, path):
    _parse(data, path)


@pytest.mark.parametrize("text", [
    "",
    "\0" * 10000,
    "__global__ void " + "k" * 300000 + "(float* x) { x[0] = 1.f; }",
    "{" * 20000,
    "}" * 20000,
    "(" * 20000 + "__global__ void k(float* x) {}",
    "__global__ void k(float* x) {" + "if (x) {" * 150 + "}" * 150 + "}",
    "__global__ void k(float* x) {" + "if (x) {" * 3000 + "}" * 3000 + "}",
    "__global__ void k(float* x) {" + "x[0] = (" * 5000 + "1" + ")" * 5000 + "; }",
    "#define A(x) A(x)\n__global__ void k(float* x) { A(1); }",
    "template <" * 5000,
    "k<<<" * 5000,
], ids=["empty", "nuls", "huge-identifier", "open-braces", "close-braces", "open-parens", "nesting-150",
        "nesting-3000", "parens-5000",
        "recursive-macro", "template-flood", "launch-flood"])
def test_pathological_sources(text):
    result = _parse(text, "x.cu")
    _translate_all(result, "x.cu")
