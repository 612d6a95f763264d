"""Limits that hold: memory over all of a candidate's processes, and the evaluator's own memory against a
candidate that floods its stderr or its reply channel; a candidate that closes its pipes is a candidate
failure, never an evaluator crash. Each has its guard-off check."""
import os
import tracemalloc
from pathlib import Path

import pytest

from attacks import assert_carries_on, make_evaluator, softmax_task
from ksearch_engine.evaluate import evaluator as evaluator_mod
from ksearch_engine.evaluate import sandbox

GOOD_BODY = "    return mx.softmax(x, axis=-1)\n"

FORK_HOG = '''
import subprocess, sys, mlx.core as mx
HOG = "b = bytearray($MB << 20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\nimport time; time.sleep(2)"
def kernel(x):
    kids = [subprocess.Popen([sys.executable, "-S", "-c", HOG]) for _ in range(3)]
    codes = [k.wait() for k in kids]
    if any(codes):
        raise MemoryError("a child was stopped: " + repr(codes))
    return mx.softmax(x, axis=-1)
'''


def _cgroup_memory() -> bool:
    cg = sandbox.PidsCgroup(f"ksearch-{os.getpid()}-probe", 16, 64)
    try:
        return cg.memory is not None
    finally:
        cg.remove()


@pytest.mark.skipif(not _cgroup_memory(), reason="no writable memory cgroup (v2 or v1) here: RLIMIT_AS applies, per process")
def test_memory_limit_counts_all_forked_children(monkeypatch):
    src = FORK_HOG.replace("$MB", "400")
    with make_evaluator(softmax_task(), memory_mb=900, wall_s=90, disable_guards=["audit"]) as ev:
        r = ev.evaluate(src, timing=False)
        # killed by the OOM killer, or held at the limit until the wall-clock limit (cgroup v1 without swap)
        assert r.status in ("resource_limit", "crashed", "runtime_error", "timeout"), r.message
        assert "cgroup" in r.sandbox["memory_limit"], r.sandbox
        assert_carries_on(ev)
    # Guard off: without cgroups only RLIMIT_AS holds, per process: three 400 MB children under 900 MB pass.
    monkeypatch.setattr(sandbox.PidsCgroup, "ROOT", Path("/nonexistent-ksearch-cgroup-root"))
    with make_evaluator(softmax_task(), memory_mb=900, wall_s=90, disable_guards=["audit"]) as ev:
        r = ev.evaluate(src, timing=False)
    assert r.status == "passed" and "RLIMIT_AS" in r.sandbox["memory_limit"], (r.status, r.message, r.sandbox)


STDERR_FLOOD = '''
import os, sys, mlx.core as mx
def kernel(x):
    chunk = ("\\x1b[2J\\x1b[H passed 9.87x " * 4000)[:1 << 20] + "\\n"
    for _ in range($MB):
        os.write(2, chunk.encode())
    raise RuntimeError("\\x1b[2J\\x1b[1;32mpassed 9.87x\\x1b[0m")
'''


def _peak_during(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_stderr_flood_is_read_as_a_bounded_tail_without_escapes(tmp_path):
    src = STDERR_FLOOD.replace("$MB", "250")
    with make_evaluator(softmax_task(), file_mb=300, wall_s=120) as ev:
        ev.evaluate("import mlx.core as mx\ndef kernel(x):\n" + GOOD_BODY, timing=False)   # reference done first
        r, peak = _peak_during(lambda: ev.evaluate(src, timing=False))
        assert r.status == "runtime_error" and "passed 9.87x" in r.message, r.message
        assert "\x1b" not in r.message and "\x1b" not in r.log_tail, "escape sequences reached the result"
        assert peak < 40 << 20, f"the evaluator's memory peaked at {peak >> 20} MB"
    # Guard off: the old tail read the whole stderr file; on a 250 MB file that is 250 MB and more
    big = tmp_path / "worker.stderr"
    with open(big, "wb") as f:
        for _ in range(250):
            f.write(b"\x1b[2J passed 9.87x " * 50000 + b"\n")
    tail, peak_on = _peak_during(lambda: sandbox.tail_text(big, 15))
    assert peak_on < 1 << 20 and "\x1b" not in tail
    _, peak_off = _peak_during(lambda: "\n".join(big.read_text(errors="replace").splitlines()[-15:]))
    assert peak_off > 200 << 20, f"guard off, the peak was only {peak_off >> 20} MB"


def test_terminal_escapes_in_messages_are_stripped_and_the_guard_is_what_strips_them(monkeypatch):
    src = "import mlx.core as mx\ndef kernel(x):\n    raise RuntimeError('\\x1b[2J\\x1b[Hpassed \\x9b31m9.87x \\u202e')\n"
    with make_evaluator(softmax_task()) as ev:
        r = ev.evaluate(src, timing=False)
        assert r.status == "runtime_error" and "passed" in r.message
        assert not any(c in r.message for c in "\x1b\x9b\u202e"), repr(r.message)
        monkeypatch.setattr(sandbox, "clean", lambda obj: obj)
        r = ev.evaluate(src, timing=False)
    assert "\x1b" in r.message, "guard off: the escape sequence gets through"


EVENT_FLOOD = '''
import os, sys, json, mlx.core as mx
def kernel(x):
    fd = sys.modules["__main__"]._PROTO
    line = (json.dumps({"event": "x", "detail": "A" * (1 << 20)}) + "\\n").encode()
    for _ in range($N):
        os.write(fd, line)
    return mx.softmax(x, axis=-1)
'''


def test_event_flood_keeps_the_evaluators_memory_bounded(monkeypatch):
    with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
        ev.evaluate("import mlx.core as mx\ndef kernel(x):\n" + GOOD_BODY, timing=False)
        r, peak = _peak_during(lambda: ev.evaluate(EVENT_FLOOD.replace("$N", "1500"), timing=False))
        assert r.status == "cheating", (r.status, r.message)   # forged events on the reply channel
        assert peak < 40 << 20, f"the evaluator's memory peaked at {peak >> 20} MB"
    # Guard off: events kept whole and without a cap (a new evaluator: its workers, started ahead, get the
    # unbounded channel)
    monkeypatch.setattr(sandbox.Channel, "__init__", _unbounded_init)
    with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
        ev.evaluate("import mlx.core as mx\ndef kernel(x):\n" + GOOD_BODY, timing=False)
        _, peak_off = _peak_during(lambda: ev.evaluate(EVENT_FLOOD.replace("$N", "150"), timing=False))
    assert peak_off > 100 << 20, f"guard off, the peak was only {peak_off >> 20} MB"


_orig_init = sandbox.Channel.__init__


def _unbounded_init(self, proc, error, **kw):
    _orig_init(self, proc, error, max_events=10**9)
    self.max_event_chars = 10**9


def test_closing_the_request_or_reply_pipe_is_a_candidate_failure(monkeypatch):
    closes_stdin = "import os, mlx.core as mx\ndef kernel(x):\n    os.close(0)\n    return mx.softmax(x, axis=-1)\n"
    closes_reply = ("import os, sys, time, mlx.core as mx\ndef kernel(x):\n"
                    "    os.close(sys.modules['__main__']._PROTO)\n    time.sleep(30)\n")
    for mode in ("none", None):
        if mode:
            monkeypatch.setenv("KSEARCH_SANDBOX", mode)
        else:
            monkeypatch.delenv("KSEARCH_SANDBOX", raising=False)
        with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
            for src in (closes_stdin, closes_reply):
                r = ev.evaluate(src, timing=False)
                assert r.status != "passed" and r.message, (mode, r.status, r.message)
            assert_carries_on(ev)
