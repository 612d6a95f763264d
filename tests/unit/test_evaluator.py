"""The evaluator verifies candidates against a reference run in another process, times the ones that pass,
and reports every misbehaving candidate by name while the calling process carries on."""
import pytest

from ksearch_engine.evaluate import Evaluator, Limits

GOOD = """
import mlx.core as mx

def kernel(x):
    m = mx.max(x, axis=-1, keepdims=True)
    e = mx.exp(x - m)
    return e / mx.sum(e, axis=-1, keepdims=True)
"""
WRONG = """
import mlx.core as mx

def kernel(x):
    e = mx.exp(x)
    return e / (mx.sum(e, axis=-1, keepdims=True) + 1.0)   # wrong normalisation
"""
MUTATES = """
import mlx.core as mx

def kernel(x):
    y = mx.softmax(x, axis=-1)
    x[0] = 0.0            # writes into the caller's input
    return y
"""
CACHES = """
import mlx.core as mx
_cache = {}

def kernel(x):
    if "y" not in _cache:
        _cache["y"] = mx.softmax(x, axis=-1)
    return _cache["y"]     # the same buffer every call: not a fresh output
"""
RETURNS_INPUT = """
def kernel(x):
    return x
"""
HANGS = """
def kernel(x):
    while True:
        pass
"""
ALLOCATES = """
def kernel(x):
    blocks = []
    while True:
        blocks.append(bytearray(256 << 20))
"""
SEGFAULTS = """
import ctypes

def kernel(x):
    ctypes.memset(8, 0, 64)   # writes to an unmapped address
"""
SOCKET = """
import socket
import mlx.core as mx

def kernel(x):
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=1).sendall(b"leak")
    except OSError:
        pass
    return mx.softmax(x, axis=-1)
"""
SYNTAX = "def kernel(x):\n    return x +\n"


@pytest.fixture
def ev(softmax_task):
    with Evaluator(softmax_task, "mlx-cpu", limits=Limits(wall_s=20, memory_mb=2048), repeats=5, warmup=1) as e:
        yield e


def test_correct_candidate_passes_and_is_timed(ev):
    r = ev.evaluate(GOOD)
    assert r.status == "passed", r.message
    assert r.trials == 6 and r.verified_by == "mlx-cpu"   # 2 workloads x (2 task seeds + 1 fresh)
    assert r.timing and r.timing.median_ms > 0 and r.timing.baseline_ms > 0
    assert r.timing.workload == "bench-cpu" and r.backend == "mlx-cpu" and r.mlx_version
    assert "one call per mx.eval + mx.synchronize" in r.timing.method


def test_wrong_candidate_fails_with_worst_mismatch(ev):
    r = ev.evaluate(WRONG)
    assert r.status == "failed"
    w = r.worst
    assert w is not None and w.output == "y" and w.abs_err > 1e-3
    assert abs(w.got - w.expected) == pytest.approx(w.abs_err, rel=1e-6)
    assert "expected" in r.message


def test_syntax_error_is_a_compile_error_with_its_line(ev):
    r = ev.evaluate(SYNTAX)
    assert r.status == "compile_error" and "line 2" in r.message


@pytest.mark.parametrize("source, status, words", [
    (MUTATES, "cheating", "mutated its input"),
    (CACHES, "cheating", "cached or replayed result"),
    (RETURNS_INPUT, "cheating", "input array"),
    (SOCKET, "cheating", "network"),
])
def test_cheats_are_caught_and_named(ev, source, status, words):
    r = ev.evaluate(source)
    assert r.status == status, r.message
    assert words in r.message
    # the evaluator carries on: a good candidate still passes afterwards
    assert ev.evaluate(GOOD).status == "passed"


def test_hang_is_killed_after_the_wall_limit(softmax_task):
    with Evaluator(softmax_task, "mlx-cpu", limits=Limits(wall_s=3)) as e:
        r = e.evaluate(HANGS, timing=False)
        assert r.status == "timeout" and "killed" in r.message
        assert e.evaluate(GOOD, timing=False).status == "passed"


def test_unbounded_allocation_hits_the_memory_limit(ev):
    r = ev.evaluate(ALLOCATES, timing=False)
    assert r.status == "resource_limit", (r.status, r.message)


def test_segfault_is_reported_as_a_crash(ev):
    r = ev.evaluate(SEGFAULTS, timing=False)
    assert r.status == "crashed" and "segmentation fault" in r.message


def test_metal_candidate_is_not_runnable_on_the_cpu(ev):
    src = "import mlx.core as mx\nk = mx.fast.metal_kernel(name='k', input_names=['x'], output_names=['y'], source='')\ndef kernel(x):\n    return x\n"
    r = ev.evaluate(src)
    assert r.status == "not_runnable" and "Apple GPU" in r.message


def test_sandbox_isolates_network_and_scrubs_keys(softmax_task, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "sk-very-secret")
    leak = """
import os, mlx.core as mx
def kernel(x):
    if any("sk-very-secret" in v for v in os.environ.values()):
        return x * 0
    return mx.softmax(x, axis=-1)
"""
    with Evaluator(softmax_task, "mlx-cpu", limits=Limits(wall_s=20)) as e:
        r = e.evaluate(leak, timing=False)
    assert r.status == "passed", "the API key reached the candidate's environment"
    assert r.sandbox["env"] == "scrubbed"


def test_a_suspect_speedup_is_confirmed_by_the_candidates_own_time_not_a_swinging_baseline():
    from ksearch_engine.evaluate.evaluator import remeasure_agrees
    from ksearch_engine.evaluate.models import Timing

    def t(ms, base_ms):
        return Timing(workload="w", median_ms=ms, iqr_ms=0.01, baseline_ms=base_ms, baseline_iqr_ms=1.0,
                      speedup=base_ms / ms, repeats=10, method="m", suspect=True)
    first = t(1.10, 530.0)                                  # as on the H200: 482x vs a per-token loop
    assert remeasure_agrees(first, t(1.15, 366.0))          # the loop swung 1.45x, the candidate did not
    assert remeasure_agrees(first, t(1.40, 680.0))          # the candidate moved 27%, the speed-up agrees
    assert not remeasure_agrees(first, t(2.5, 530.0))       # a warm-state artefact: 2.3x slower when fresh
    assert not remeasure_agrees(first, t(1.1, 0.9))         # not faster than the baseline at all
