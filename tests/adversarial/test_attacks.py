"""Candidates that cheat or do harm are caught, reported with their reason, and the evaluator carries on.

Each attack is a candidate module in `candidates/` whose docstring says what it tries and what catches it.
"""
import pytest

from attacks import assert_carries_on, attack

# (attack module, status, words the reason must contain)
CAUGHT = [
    ("reference_buffer_via_frames", "cheating", "inspect the evaluator's stack"),
    ("reference_buffer_via_traceback", "cheating", "inspect the evaluator's stack"),
    ("expected_via_gc", "cheating", "walk the interpreter's objects"),
    ("worker_internals", "cheating", "replaced evaluator's Worker.call"),
    ("worker_globals", "cheating", "evaluator's _reply"),
    ("disarms_guards", "cheating", "replaced evaluator's _GUARDS_OFF"),
    ("mutates_input_through_numpy", "cheating", "mutated its input #0 (x)"),
    ("patch_perf_counter", "cheating", "time.perf_counter"),
    ("patch_mx_eval", "cheating", "mx.eval"),
    ("patch_allclose", "cheating", "np.allclose"),
    ("slows_the_baseline", "cheating", "mx.softmax"),
    ("garbage_when_timed", "cheating", "wrong result while being timed"),
    ("detects_timer_by_frame", "cheating", "inspect the evaluator's stack"),
    ("cached_output_when_timed", "cheating", "a cached or replayed result"),
    ("fork_bomb", "cheating", "may not start processes (os.fork)"),
    ("socket_udp", "cheating", "network access is not allowed (socket.sendto"),
    ("dns_lookup", "cheating", "network access is not allowed (socket.getaddrinfo"),
    ("kills_parent", "cheating", "may not send signals (os.kill"),
    ("leaves_thread", "cheating", "left a thread running"),
    ("forges_reply", "cheating", "reply channel"),
    ("setsid_escape", "cheating", "process(es) running after it returned"),
    ("fills_scratch", "resource_limit", "filled its scratch directory"),
    ("fills_one_file", "resource_limit", "file-size limit"),
]


@pytest.mark.parametrize("name, status, words", CAUGHT, ids=[c[0] for c in CAUGHT])
def test_attack_is_caught_with_its_reason(shared_eval, name, status, words):
    r = shared_eval.evaluate(attack(name))
    assert r.status == status, f"{name}: {r.status}: {r.message}"
    assert words in r.message, f"{name}: the reason does not say what it did: {r.message}"
    assert r.timing is None, "a caught candidate must never carry a time"
    assert_carries_on(shared_eval)


def test_constants_that_pass_one_input_fail_on_the_other_seeds(shared_eval):
    """A candidate that returns the expected output of one fixed input (seed 0, 'small') as a constant."""
    import numpy as np

    task = shared_eval.task
    x = task.make_inputs(task.workloads[0], seed=0)[0]
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    y = (e / e.sum(axis=-1, keepdims=True)).tolist()
    src = f"import mlx.core as mx\nY = {y!r}\n\ndef kernel(x):\n    return mx.array(Y)\n"
    r = shared_eval.evaluate(src)
    # the same bytes for other inputs: named as a replay (the values are wrong for every other seed too)
    assert r.status == "cheating" and "a cached or replayed result" in r.message, r.message
    assert "(seed 0" in r.message.split(" is byte for byte", 1)[1], "the one input it was written for passes"
    assert_carries_on(shared_eval)


def test_sleeping_candidate_is_killed_at_the_wall_limit():
    from attacks import make_evaluator, softmax_task

    with make_evaluator(softmax_task(), wall_s=3) as ev:
        r = ev.evaluate(attack("sleeps_forever"), timing=False)
        assert r.status == "timeout" and "killed" in r.message
        assert_carries_on(ev)


def test_killing_everything_in_sight_only_reaches_its_own_namespace(shared_eval):
    """kill(-1) and kill(0) through libc (past the audit hook): the PID namespace holds only the worker,
    which is that namespace's init and so cannot be killed from inside. Nothing outside is touched."""
    import os

    before = os.getppid()
    r = shared_eval.evaluate(attack("kills_everything_ctypes"))
    # inside its namespace it can at most kill its own worker (under bubblewrap, which is not PID 1 there)
    assert r.status != "passed" and ("returned NoneType" in r.message or "SIGKILL" in r.message), r.message
    assert os.getppid() == before  # this test process and its parent are alive
    assert_carries_on(shared_eval)


def test_second_stream_work_counts_as_the_candidates_own_time():
    """The pipelined candidate runs its work on a private stream during the baseline's timed calls, and
    each call only hands back what an earlier one started. Fresh inputs every call make that answer wrong
    (it is caught as a replay of an earlier output); where it does compute this call's answer, the timer
    waits for every stream, so its time stays of the order of the same work done plainly."""
    from attacks import make_evaluator, softmax_task

    with make_evaluator(softmax_task()) as ev:
        ev.repeats = 15
        plain = ev.evaluate(attack("heavy_plain"))
        piped = ev.evaluate(attack("pipelined_second_stream"))
    assert plain.status == "passed", plain.message
    if piped.status == "passed":
        assert piped.timing.median_ms > 0.25 * plain.timing.median_ms, (piped.timing, plain.timing)
    else:
        assert piped.status == "cheating" and "replayed" in piped.message, piped.message
