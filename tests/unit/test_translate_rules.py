"""Every rule of specs/translation.yaml translates its own example exactly as the table says.

The test is parametrized over the YAML, so changing a rule's replacement without changing its example (or
the translator) fails here."""
from __future__ import annotations

import pytest

from ksearch_engine.translate import load_rules, translate_helper, translate_snippet
from ksearch_engine.translate.rules import Rule

TABLE = load_rules()
WITH_EXAMPLES = [r for r in TABLE.rules if r.example is not None]


@pytest.mark.parametrize("rule", WITH_EXAMPLES, ids=[r.id for r in WITH_EXAMPLES])
def test_rule_example_translates_as_listed(rule: Rule):
    if rule.id == "fn.helper_thread_attributes":   # needs a kernel that calls the helper
        from ksearch_engine.source import find_kernels
        from ksearch_engine.translate import translate_kernel
        src = rule.example.cuda + "\n__global__ void k(int* y) { y[0] = lane(); }\n"
        tr = translate_kernel(find_kernels(src, "t.cu"), "k", "t.cu")
        assert rule.example.metal in tr.header and "lane(thread_position_in_threadgroup)" in tr.metal_source
        return
    if rule.id == "mem.helper_shared":   # needs a kernel that calls the helper
        from ksearch_engine.source import find_kernels
        from ksearch_engine.translate import translate_kernel
        src = rule.example.cuda + "\n__global__ void k(float* y) { y[0] = total(1.0f); }\n"
        tr = translate_kernel(find_kernels(src, "t.cu"), "k", "t.cu")
        assert rule.example.metal in tr.launch_metal_header and "threadgroup float part[32];" in tr.launch_metal_source
        assert rule.id in tr.rules_applied or "total(1.0f, thread_position_in_threadgroup, part)" in tr.metal_source
        return
    if rule.id == "mem.device_symbols":   # a file-scope declaration and a kernel
        from ksearch_engine.source import find_kernels
        from ksearch_engine.translate import translate_kernel
        tr = translate_kernel(find_kernels(rule.example.cuda, "t.cu"), "k", "t.cu")
        assert rule.example.metal in tr.launch_metal_source and tr.symbols[0]["name"] == "coef"
        return
    if rule.id == "cg.coalesced_group":   # a helper making the group, called in a divergent branch
        from ksearch_engine.source import find_kernels
        from ksearch_engine.translate import translate_kernel
        tr = translate_kernel(find_kernels(rule.example.cuda, "t.cu"), "k", "t.cu")
        assert rule.example.metal in tr.header and "inline coalesced_group coalesced_threads()" in tr.header
        assert not [i for i in tr.report if i.severity == "error" and i.scope == "kernel"], tr.report
        return
    if rule.id == "param.nullable_pointer":   # launch()'s prologue of a pointer the kernel tests for NULL
        from ksearch_engine.source import find_kernels
        from ksearch_engine.translate import translate_kernel
        tr = translate_kernel(find_kernels(rule.example.cuda, "t.cu"), "k", "t.cu")
        assert rule.example.metal in tr.launch_metal_source
        assert [p for p in tr.params if p["name"] == "b"][0].get("nullable")
        return
    if rule.id == "class.member_rules":   # a class template used by a kernel: carried with Metal's member rules
        from ksearch_engine.source import find_kernels
        from ksearch_engine.translate import translate_kernel
        tr = translate_kernel(find_kernels(rule.example.cuda, "t.cu"), "k", "t.cu")
        assert rule.example.metal in tr.header and rule.example.metal in tr.launch_metal_header
        assert "__device__ T& operator[]" in tr.launch_cuda_header
        return
    if rule.id == "pre.header_conditionals":   # a file whose helper is defined once per branch
        from ksearch_engine.source import find_kernels
        from ksearch_engine.translate import translate_kernel
        tr = translate_kernel(find_kernels(rule.example.cuda, "t.cu"), "k", "t.cu")
        assert rule.example.metal in tr.header and "double twice" not in tr.header
        assert tr.header.count("twice(") == 1
        return
    if rule.id == "fn.device_helper":
        got = translate_helper(rule.example.cuda)
        assert got == rule.example.metal
        return
    got, issues, applied = translate_snippet(rule.example.cuda)
    assert got == rule.example.metal
    assert rule.id in applied, f"{rule.id} did not fire on its own example (applied: {applied})"
    errors = [i for i in issues if i.severity == "error"]
    if rule.kind == "unsupported" and rule.metal is not None:   # dropped with a note (printf, assert)
        assert errors == [] and any(i.severity == "warning" for i in issues)
    elif rule.id.startswith("unsupported."):   # a special rule that translates what it can and reports the rest
        assert len(errors) == 1 and errors[0].line == rule.example.cuda.count("\n")
    else:
        assert errors == []


def test_every_rule_is_documented():
    ids = [r.id for r in TABLE.rules]
    assert len(ids) == len(set(ids)), "rule ids must be unique"
    for r in TABLE.rules:
        if r.kind == "unsupported":
            assert r.reason, f"{r.id}: unsupported rules say why"
        else:
            assert r.example is not None, f"{r.id}: every translating rule carries an example"


def test_the_brief_constructs_are_in_the_table():
    cuda = {r.cuda.split("(")[0] for r in TABLE.rules}
    for construct in ("threadIdx", "blockIdx", "blockDim", "gridDim", "__shared__", "__syncthreads",
                      "__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync", "__shfl_sync", "atomicAdd", "__expf",
                      "expf", "rsqrtf", "fmaxf", "make_float4", "__half", "__nv_bfloat16", "__restrict__", "__ldg",
                      "cudaMallocAsync", "asm"):
        assert construct in cuda, construct


def test_a_changed_rule_changes_the_output():
    rule = TABLE.get("sync.syncthreads")
    wrong = TABLE.replacing(rule.model_copy(update={"metal": "simdgroup_barrier(mem_flags::mem_none)"}))
    got, _, _ = translate_snippet(rule.example.cuda, wrong)
    assert got != rule.example.metal


def test_removing_a_rule_leaves_the_cuda_text():
    got, _, applied = translate_snippet("float e = __expf(x);", TABLE.without("math.__expf"))
    assert got == "float e = __expf(x);" and "math.__expf" not in applied


def test_shuffle_width_other_than_32_keeps_cuda_lane_rules():
    got, issues, applied = translate_snippet("float a = 1;\nv += __shfl_xor_sync(0xffffffff, v, 4, 16);")
    assert got.endswith("v += ks_shfl_xor_w(v, 4, 16, thread_index_in_simdgroup);")
    assert issues == [] and "warp.shfl_width" in applied
    _, ok, _ = translate_snippet("v += __shfl_xor_sync(0xffffffff, v, 4, 32);")
    assert ok == []


def test_nested_calls_are_rewritten_inside_out():
    got, _, _ = translate_snippet("m = fmaxf(m, __shfl_xor_sync(0xffffffff, __expf(v), 1));")
    assert got == "m = metal::max(m, simd_shuffle_xor(fast::exp(float(v)), 1));"


def test_identifiers_named_like_builtins_in_declarations_are_kept():
    got, _, _ = translate_snippet("int warpSize = 4;\nint t = threadIdx.x;")
    assert got == "int warpSize = 4;\nint t = thread_position_in_threadgroup.x;"


def test_local_pointer_into_shared_memory_is_threadgroup():
    got, _, _ = translate_snippet("__shared__ float tile[64];\nfloat* p = tile + 8;")
    assert got == "threadgroup float tile[64];\nthreadgroup float* p = tile + 8;"


def test_pointer_casts_get_an_address_space():
    got, _, _ = translate_snippet("float4 v = ((const float4*)x)[i];")
    assert got == "float4 v = ((const device float4*)x)[i];"


@pytest.mark.parametrize("name", ["erfcinvf", "erfinvf"])
def test_unsupported_calls_are_reported(name):
    _, issues, _ = translate_snippet(f"int a = 0;\n{name}(a);")
    assert [(i.line, i.severity) for i in issues] == [(1, "error")]
    assert issues[0].construct == f"{name}(...)"


@pytest.mark.parametrize("name", ["assert", "printf"])
def test_assert_and_printf_are_dropped_from_metal_with_a_note(name):
    got, issues, _ = translate_snippet(f"int a = 0;\n{name}(a);")
    assert got == "int a = 0;\n((void)0);"
    assert [(i.line, i.severity, i.construct) for i in issues] == [(1, "warning", f"{name}(...)")]
