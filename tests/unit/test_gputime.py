"""GPU time per call (ksearch_engine/gputime.py): CUPTI's kernel records where present, wall time named as such
elsewhere. The CUPTI path runs here against a stand-in of `cupti.cupti` that delivers kernel records the way
CUPTI does (buffers handed to the completed-callback on flush); the wall path runs on real MLX (CPU)."""
from __future__ import annotations

import enum
import types

import mlx.core as mx
import pytest

from ksearch_engine.gputime import CUPTI_METHOD, WALL_METHOD, GpuTimeError, GpuTimer


def fake_cupti(kernel_ns_per_call):
    """A stand-in for cupti.cupti: each call of the timed function 'launches' kernels of the given durations."""
    m = types.SimpleNamespace()

    class ActivityKind(enum.IntEnum):
        CONCURRENT_KERNEL = 10
        MEMCPY = 1

    m.ActivityKind = ActivityKind
    m.pending, m.enabled, m.clock = [], set(), 1000
    m.activity_register_callbacks = lambda req, done: setattr(m, "cbs", (req, done))
    m.activity_enable = lambda kind: m.enabled.add(int(kind))

    def flush(_force):
        size, _ = m.cbs[0]()
        assert size > 0
        recs, m.pending = m.pending, []
        m.cbs[1](recs)

    m.activity_flush_all = flush

    def launch():
        for ns in kernel_ns_per_call:
            m.pending.append(types.SimpleNamespace(kind=ActivityKind.CONCURRENT_KERNEL, start=m.clock,
                                                   end=m.clock + ns, name="k"))
            m.clock += ns + 5000          # host gaps between kernels are not GPU time
        m.pending.append(types.SimpleNamespace(kind=ActivityKind.MEMCPY, start=0, end=10**9, name="copy"))
    m.launch = launch
    return m


def test_cupti_time_is_the_sum_of_the_calls_kernel_durations_not_the_wall_clock():
    cupti = fake_cupti([20_000, 30_000])          # two kernels: 20 us + 30 us per call
    x = mx.ones((64,))

    def fn(a):
        cupti.launch()
        return a * 2

    timer = GpuTimer("cupti", cupti_module=cupti, warmup=2)
    med, iqr, method = timer.time(fn, repeats=7, rotate_inputs=[(x,), (x + 1,)])
    assert method == CUPTI_METHOD
    assert med == pytest.approx(0.05) and iqr == pytest.approx(0.0)
    assert int(cupti.ActivityKind.CONCURRENT_KERNEL) in cupti.enabled


def test_a_callable_that_runs_no_kernel_is_timed_on_the_wall_clock_and_says_so():
    cupti = fake_cupti([])
    med, iqr, method = GpuTimer("cupti", cupti_module=cupti, warmup=1).time(lambda: mx.ones((8,)) + 1, repeats=5)
    assert method.startswith(WALL_METHOD) and "no kernel" in method
    assert med > 0


def test_without_cupti_the_timer_falls_back_to_wall_time_named_as_such():
    # this machine has no NVIDIA GPU: auto picks the wall clock, and asking for CUPTI says why not
    assert not GpuTimer.available()
    t = GpuTimer()
    assert t.kind == "wall" and t.method == WALL_METHOD
    a = mx.random.normal((256, 256))
    med, iqr, method = t.time(lambda x: x @ x, repeats=5, rotate_inputs=[(a,), (a * 2,)])
    assert method == WALL_METHOD and med > 0 and iqr >= 0
    with pytest.raises(GpuTimeError, match="not available"):
        GpuTimer("cupti")
    with pytest.raises(ValueError):
        t.time(lambda: None, repeats=0)


def test_one_call_at_a_time_for_the_evaluators_per_call_step():
    cupti = fake_cupti([40_000])
    ms, method = GpuTimer("cupti", cupti_module=cupti).call_ms(cupti.launch)
    assert ms == pytest.approx(0.04) and method == CUPTI_METHOD
    ms, method = GpuTimer("wall").call_ms(lambda: mx.eval(mx.ones((4,)) + 1))
    assert ms > 0 and method == WALL_METHOD
