"""Issue 17's integrity attacks: false speedups, patches an in-process check never sees, wrong answers,
warm-worker sabotage. Each is a candidate in `candidates/`; each test shows it fails with its reason, then
switches off the one guard that stops it (a test-only switch) and shows the attack getting through. Where the
guard is the process boundary itself (nothing to switch off), the attack is run in this process, next to a
reference, to show it would work there.

The guards live in the evaluator's process: fresh inputs from an OS seed per call, every output checked as
bytes (exact type, dtype, shape, NaN/inf exact, no replay of any earlier output), time read by its own clock,
untimed steps charged, the worker idle while the baseline runs, a fresh worker per candidate."""
import warnings

import numpy as np
import pytest

from attacks import GOOD, assert_carries_on, attack, make_evaluator, softmax_task
from ksearch_engine.evaluate.compare import compare
from ksearch_engine.task import InputSpec, KernelTask, Workload


def _run(name, *, off=(), task=None, repeats=6, **subs):
    with make_evaluator(task or softmax_task(), disable_guards=list(off)) as ev:
        ev.repeats = repeats
        return ev.evaluate(attack(name, **subs))


# -- false speedups ------------------------------------------------------------------------------------------
def test_memoising_per_input_is_caught_because_timed_inputs_are_fresh():
    r = _run("memoises_per_input")
    assert r.status == "cheating" and "cached or replayed" in r.message, r.message
    assert r.timing is None
    off = _run("memoises_per_input", off=["fresh_inputs"])   # one fixed seed for every timed call, as before
    assert off.status == "passed" and off.timing, off.message


def test_lookup_table_of_the_timed_inputs_is_wrong_on_fresh_ones():
    r = _run("lookup_table_of_inputs")
    assert r.status == "cheating" and "wrong result while being timed" in r.message, r.message
    off = _run("lookup_table_of_inputs", off=["fresh_inputs"])
    assert off.status == "passed" and off.timing, off.message


def test_lazy_non_array_output_is_refused_and_its_deferred_work_charged():
    r = _run("lazy_output_when_timed")
    assert r.status == "cheating" and "not mlx.core.array" in r.message and "Lazy" in r.message, r.message
    charged = _run("lazy_output_when_timed", off=["exact_type"])
    free = _run("lazy_output_when_timed", off=["exact_type", "charge_untimed"])
    assert charged.status == free.status == "passed", (charged.message, free.message)
    # the work it does when read is charged to it (and not without the charge)
    assert "charged for work outside the timed call" in charged.timing.method, charged.timing.method
    assert "charged" not in free.timing.method


def test_stealing_the_reference_through_a_patched_eval_finds_nothing_to_steal():
    r = _run("steals_reference_via_eval")
    assert r.status == "cheating" and "mx.eval" in r.message, r.message      # named by the tamper snapshot
    r = _run("steals_reference_via_eval", off=["tamper"])
    assert r.status in ("failed", "cheating") and r.timing is None, r.message
    assert "mismatch" in r.message or "replayed" in r.message, r.message
    # Shows what the process boundary prevents: next to a reference in the same process, it passes.
    import mlx.core as mx

    mod = {}
    try:
        exec(compile(attack("steals_reference_via_eval"), "<attack>", "exec"), mod)
        x = mx.random.normal((8, 64))
        mx.eval(x)
        want = mx.softmax(x, axis=-1)
        mx.eval(want)                       # what a worker that also ran the reference did
        got = mod["kernel"](x)
        assert np.allclose(np.array(got), np.array(want)), "the attack took the reference's answer"
    finally:
        mx.eval = mod["_real_eval"]


# -- patches an in-process check never sees ---------------------------------------------------------------------
def test_patched_random_cannot_steer_which_timed_outputs_are_checked():
    r = _run("patches_random_garbage_when_timed", VERIFY_CALLS=12)
    assert r.status == "cheating" and "wrong result while being timed" in r.message, r.message
    off = _run("patches_random_garbage_when_timed", off=["check_timed", "tamper"], VERIFY_CALLS=12)
    assert off.status == "passed" and off.timing, off.message


def _large_task():
    """Outputs over the 'check every call' size: timed outputs are checked on a sample drawn afterwards."""
    return KernelTask(
        name="big-softmax", family="softmax", inputs=[InputSpec(name="x", shape=["R", "C"], init="normal", low=-3, high=3)],
        outputs=["y"], reference="import mlx.core as mx\n\ndef reference(x):\n    return mx.softmax(x, axis=-1)\n",
        workloads=[Workload(name="small", dims={"R": 8, "C": 64})],
        bench_workloads=[Workload(name="bench", dims={"R": 1100, "C": 1024})], seeds=[0])


def test_on_large_outputs_the_sample_is_drawn_by_the_evaluator_after_the_calls():
    r = _run("patches_random_garbage_when_timed", task=_large_task(), off=["tamper"], repeats=4, VERIFY_CALLS=4)
    assert r.status == "cheating" and "wrong result while being timed" in r.message, r.message
    assert "drawn" not in r.message
    off = _run("patches_random_garbage_when_timed", task=_large_task(), off=["check_timed", "tamper"], repeats=4,
               VERIFY_CALLS=4)
    assert off.status == "passed", off.message


def test_hidden_helper_thread_is_seen_by_the_cpu_time_of_its_worker():
    r = _run("hidden_thread_spins", repeats=40)
    assert r.status == "cheating" and "while the baseline was timed" in r.message, r.message
    off = _run("hidden_thread_spins", off=["idle"], repeats=40)
    assert off.status == "passed", off.message   # the patched thread count does not see it


def test_the_time_that_counts_is_read_by_the_evaluators_clock():
    r = _run("slows_its_own_clock")
    assert r.status == "cheating" and "_perf" in r.message, r.message
    honest = _run("slows_its_own_clock", off=["tamper"])
    fooled = _run("slows_its_own_clock", off=["tamper", "parent_clock"])
    assert honest.status == fooled.status == "passed", (honest.message, fooled.message)
    assert honest.timing.speedup < 3, honest.timing            # mx.softmax against mx.softmax
    assert fooled.timing.speedup > 5, fooled.timing            # its own clock ran 100x slow


# -- wrong answers accepted ----------------------------------------------------------------------------------
def test_comparison_is_exact_on_nan_and_inf():
    e = np.array([1.0, np.inf, -np.inf, np.nan, 2.0])
    assert compare(e.copy(), e, 1e-4, 1e-4).excess <= 0                      # the same specials match
    for bad in ([1.0, 0.0, -np.inf, np.nan, 2.0],        # inf expected, finite given
                [1.0, -np.inf, -np.inf, np.nan, 2.0],    # wrong sign
                [1.0, np.inf, -np.inf, 0.0, 2.0],        # NaN expected, number given
                [1.0, np.inf, -np.inf, np.nan, np.nan],  # NaN where a number is expected
                [1.0, np.inf, -np.inf, np.nan, np.inf]):  # inf where a number is expected
        w = compare(np.array(bad), e, 1e-4, 1e-4)
        assert w.excess > 0 and not np.isnan(w.excess), (bad, w)
    # the old arithmetic: inf - inf is NaN, never 'worse', and garbage passes
    assert not compare(np.zeros(5), e, 1e-4, 1e-4, exact_specials=False).excess > 0
    assert compare(np.zeros(5), e, 1e-4, 1e-4).excess > 0


def _log_task():
    return KernelTask(
        name="log-relu", family="custom", inputs=[InputSpec(name="x", shape=["N"], init="uniform", low=-1, high=1)],
        outputs=["y"], reference="import mlx.core as mx\n\ndef reference(x):\n    return mx.log(mx.maximum(x, 0.0))\n",
        workloads=[Workload(name="w", dims={"N": 256})], seeds=[0, 1])


def test_garbage_against_an_expected_output_holding_inf_fails():
    """-inf wherever x <= 0: the expected output holds infinities; zeros are garbage and must fail."""
    src = "import mlx.core as mx\n\ndef kernel(x):\n    return mx.zeros_like(x) * x\n"
    with make_evaluator(_log_task()) as ev:
        r = ev.evaluate(src, timing=False)
        assert r.status == "failed" and "expected -inf" in r.message, r.message
        assert ev.evaluate(attack("good").replace("m = mx.max", "return mx.log(mx.maximum(x, 0.0))\n    m = mx.max"),
                           timing=False).status == "passed"
    with make_evaluator(_log_task(), disable_guards=["nan_inf", "replay"]) as ev:
        assert ev.evaluate(src, timing=False).status == "passed", "the old comparison let it through"


def test_outputs_must_have_the_tasks_dtype_and_shape():
    f16 = "import mlx.core as mx\n\ndef kernel(x):\n    return mx.softmax(x, axis=-1).astype(mx.float16)\n"
    r = _run_src(f16)
    assert r.status == "failed" and "dtype float16, the task's is dtype float32" in r.message, r.message
    flat = "import mlx.core as mx\n\ndef kernel(x):\n    return mx.softmax(x, axis=-1).reshape(-1)\n"
    r = _run_src(flat)
    assert r.status == "failed" and "shape" in r.message, r.message


def _run_src(src, **kw):
    with make_evaluator(softmax_task(), **kw) as ev:
        return ev.evaluate(src, timing=False)


# -- the ghost replay control ----------------------------------------------------------------------------------
GHOSTS = {
    "zeros": "import mlx.core as mx\n\ndef kernel(x):\n    return mx.zeros_like(x)\n",
    "its input": "def kernel(x):\n    return x\n",
    "a copy of its input": "import mlx.core as mx\n\ndef kernel(x):\n    return mx.array(x)\n",
    "cached arrays": ("import mlx.core as mx\n_c = []\n\ndef kernel(x):\n    if len(_c) < 2:\n"
                      "        _c.append(mx.softmax(x, axis=-1))\n    return _c[len(_c) % 2 - 1]\n"),
}


@pytest.mark.parametrize("what", GHOSTS)
def test_ghost_replay_control_a_no_op_candidate_fails_in_the_same_harness(shared_eval, what):
    r = shared_eval.evaluate(GHOSTS[what])
    assert r.status in ("failed", "cheating") and r.timing is None, f"{what}: {r.status}: {r.message}"
    assert_carries_on(shared_eval)


# -- warm-worker sabotage ----------------------------------------------------------------------------------------
def test_fd_hoarding_cannot_reach_the_next_candidate():
    with make_evaluator(softmax_task()) as ev:
        ev.evaluate(attack("hoards_fds"), timing=False)
        r = ev.evaluate(attack("imports_a_module"), timing=False)
        assert r.status == "passed", r.message
    with make_evaluator(softmax_task(), disable_guards=["fresh_worker"]) as ev:   # one warm worker for both
        first = ev.evaluate(attack("hoards_fds"), timing=False)
        assert first.status == "passed", first.message
        r = ev.evaluate(attack("imports_a_module"), timing=False)
        assert r.status != "passed" and "Too many open files" in r.message, r.message


def test_a_thread_left_behind_cannot_reach_the_next_candidate():
    with make_evaluator(softmax_task()) as ev:
        ev.repeats = 40
        ev.evaluate(attack("leaves_spinning_thread"), timing=False)
        r = ev.evaluate(GOOD)
        assert r.status == "passed", r.message
    # with one warm worker for both, the honest candidate's worker is busy with the thread it inherited. The idle
    # guard sees it only where the OS gives that thread CPU time while the baseline is timed: it always has here
    # (also beside six CPU burners), and once in CI it did not; up to three tries, each miss kept as a warning
    misses = []
    for _try in range(3):
        with make_evaluator(softmax_task(), disable_guards=["fresh_worker"]) as ev:
            ev.repeats = 40
            assert ev.evaluate(attack("leaves_spinning_thread"), timing=False).status == "passed"
            r = ev.evaluate(GOOD)
        if r.status == "cheating" and "while the baseline was timed" in r.message:
            break
        misses.append(f"{r.status}: {r.message}")
        warnings.warn(f"the thread left behind was not seen on try {_try + 1}: {misses[-1]}")
    assert len(misses) < 3, misses
