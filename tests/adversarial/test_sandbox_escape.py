"""The sandbox holds against a candidate that tries to write where it could poison later runs: ksearch's own
package, the site-packages (.pth files run at every Python start), the evaluator's folder, the store, /var/lib
and the home. Each attempt is a fresh file name, removed afterwards. The audit hook is off (`audit`) so that
the OS sandbox alone is tested; the guard-off run (no sandbox, no uid drop) shows the same writes succeed.

The non-root case (how everyone runs it) is test_sandbox_nonroot.py."""
import json
import os
import secrets
import sys
from pathlib import Path

import numpy as np
import pytest

from attacks import assert_carries_on, make_evaluator, softmax_task
from ksearch_engine.evaluate import sandbox

HAS_BWRAP = bool(sandbox.bwrap_path())
needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap (`bwrap`) is not installed or not usable here")

WRITER = '''
import json, os, mlx.core as mx
TARGETS = json.loads($TARGETS)
def kernel(x):
    wrote = []
    targets = TARGETS + [os.path.join(os.path.dirname(os.getcwd()), "planted-$TOKEN")]
    for t in targets:
        try:
            with open(t, "a") as f:
                f.write("# ksearch sandbox test\\n")
            wrote.append(t)
        except OSError:
            pass
    if wrote:
        raise RuntimeError("WROTE " + json.dumps(wrote))
    return mx.softmax(x, axis=-1)
'''


def targets(token: str, store: Path) -> list[str]:
    import ksearch_engine
    site = Path(np.__file__).resolve().parents[1]
    pkg = Path(ksearch_engine.__file__).resolve().parent
    return [str(site / f"zz-ksearch-test-{token}.pth"), str(pkg / "evaluate" / f"zz_planted_{token}.py"),
            str(store / "ksearch.db"), f"/var/lib/ksearch-test-{token}", str(Path.home() / f".ksearch-test-{token}")]


@pytest.fixture
def attempt(tmp_path):
    token = secrets.token_hex(4)
    store = Path.cwd() / ".ksearch-test-store" / token / ".ksearch"   # a store outside every temp folder
    store.mkdir(parents=True)
    (store / "ksearch.db").write_text("")
    ts = targets(token, store)
    src = WRITER.replace("$TARGETS", repr(json.dumps(ts))).replace("$TOKEN", token)
    yield src, ts
    for t in ts:
        try:
            os.unlink(t) if not t.endswith("ksearch.db") else None
        except OSError:
            pass
    import shutil
    shutil.rmtree(store.parents[1], ignore_errors=True)


@needs_bwrap
def test_bubblewrap_candidate_writes_nowhere_outside_its_scratch(attempt, monkeypatch):
    src, ts = attempt
    monkeypatch.setenv("KSEARCH_SANDBOX", "bwrap")
    with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
        r = ev.evaluate(src, timing=False)
        assert r.sandbox_kind == "bubblewrap", r.sandbox
        assert r.status == "passed", f"a write got through: {r.message}"
        assert all(not os.path.exists(t) for t in ts if not t.endswith("ksearch.db"))
        assert not any(p.name.startswith("planted-") for p in ev.dir.iterdir())
        assert_carries_on(ev)
    assert Path(ts[2]).read_text() == "", "the store was written"


@pytest.mark.skipif(os.geteuid() != 0, reason="the guard-off run writes as root where only root may")
def test_without_a_sandbox_the_same_writes_succeed(attempt, monkeypatch):
    """Guard off: no sandbox and no uid drop (root): every target is written."""
    src, ts = attempt
    monkeypatch.setenv("KSEARCH_SANDBOX", "none")
    with make_evaluator(softmax_task(), disable_guards=["audit"], drop_privileges=False) as ev:
        r = ev.evaluate(src, timing=False)
    assert r.sandbox_kind == "rlimits + process group"
    assert r.status == "runtime_error" and "WROTE" in r.message, r.message
    wrote = json.loads(r.message.split("WROTE ", 1)[1].splitlines()[0])
    assert set(ts) <= set(wrote), set(ts) - set(wrote)


@needs_bwrap
def test_bubblewrap_view_has_no_home_store_network_or_other_processes(monkeypatch):
    monkeypatch.setenv("KSEARCH_SANDBOX", "bwrap")
    src = ("import os, socket, mlx.core as mx\n"
           "def kernel(x):\n"
           "    seen = {'home': os.path.exists(os.path.expanduser('~root/.bashrc')) or os.path.exists('/home'),\n"
           "            'var': os.path.exists('/var/lib'), 'procs': len([p for p in os.listdir('/proc') if p.isdigit()]),\n"
           "            'caps': open('/proc/self/status').read().split('CapEff:')[1].split()[0], 'uid': os.getuid(),\n"
           "            'ifaces': [n for _, n in socket.if_nameindex()], 'repo': os.path.exists(" + repr(str(Path(sandbox.__file__).resolve().parents[3] / "tests")) + ")}\n"
           "    raise RuntimeError('SEEN ' + repr(seen))\n")
    with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
        r = ev.evaluate(src, timing=False)
    seen = eval(r.message.split("SEEN ", 1)[1].splitlines()[0])  # noqa: S307 - our own repr
    assert seen["home"] is False and seen["var"] is False and seen["repo"] is False, seen
    assert seen["caps"] == "0000000000000000" and seen["ifaces"] == ["lo"], seen
    assert seen["procs"] <= 4, seen     # its own PID namespace: bubblewrap's init, the launcher chain, itself
    if os.geteuid() == 0:
        assert seen["uid"] >= 3_000_000, "root's candidate runs as a uid of its own"


def test_every_result_names_its_sandbox():
    with make_evaluator(softmax_task()) as ev:
        r = ev.evaluate("import mlx.core as mx\ndef kernel(x):\n    return mx.softmax(x, axis=-1)\n", timing=False)
    assert r.sandbox_kind in sandbox.KINDS.values(), r.sandbox
    assert json.loads(r.model_dump_json())["sandbox_kind"] == r.sandbox_kind
    assert r.sandbox["memory_limit"] and r.sandbox["process_limit"], r.sandbox
