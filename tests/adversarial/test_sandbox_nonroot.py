"""The sandbox as an ordinary user runs it (issue 17: "a CI test runs the sandbox as a non-root user").

As root (CI) the test makes a user of its own (`ksearch-ci`, `useradd`), gives it a copy of ksearch's engine
package, a folder on its PYTHONPATH (as good as a site-packages: a `.pth` or a module dropped there runs at
the next Python start) and a store, all owned by that user, and runs a real evaluation as that user
(`setpriv`): an honest candidate must pass, and a candidate that tries to write the package, the path folder,
the store, the home, /var/lib and the evaluator's folder must write none of them. The guard-off run is the same
candidate as the same user with no sandbox (KSEARCH_SANDBOX=none): every target the user may write is written,
so the targets are real and the sandbox is what stops the writes.

The interpreter lives under /root/.pyenv and /root is 0700: the run happens in a private mount namespace
(`unshare -m`) where /root is an empty 0755 tmpfs with only the interpreter's folder bound back, so nothing
on the machine changes mode. Not root: the test runs as the current user directly (it is not root either).
"""
from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ksearch_engine.evaluate import sandbox

USER = "ksearch-ci"
PKG = Path(sandbox.__file__).resolve().parents[1]   # .../ksearch_engine

RUNNER = r'''
import json, os, sys
from pathlib import Path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ksearch_engine.evaluate import Evaluator, Limits
from ksearch_engine.task import InputSpec, KernelTask, Workload

cfg = json.loads(sys.argv[1])
task = KernelTask(
    name="row-softmax", family="softmax", inputs=[InputSpec(name="x", shape=["R", "C"], init="normal", low=-3, high=3)],
    outputs=["y"], reference="import mlx.core as mx\n\ndef reference(x):\n    return mx.softmax(x, axis=-1)\n",
    workloads=[Workload(name="small", dims={"R": 8, "C": 64})],
    bench_workloads=[Workload(name="bench", dims={"R": 64, "C": 256})], seeds=[0, 1])
limits = dict(wall_s=120, memory_mb=2048, scratch_mb=16, scratch_files=50, file_mb=8, tmp_mb=8)
honest = "import mlx.core as mx\ndef kernel(x):\n    return mx.softmax(x, axis=-1)\n"
out = {"uid": os.getuid(), "writable": {t: os.access(os.path.dirname(t), os.W_OK) for t in cfg["targets"]}}
with Evaluator(task, "mlx-cpu", limits=Limits(**limits), repeats=4, warmup=1, timing_max_s=5) as ev:
    r = ev.evaluate(honest, timing=True)
    out["honest"] = {"status": r.status, "message": r.message, "kind": r.sandbox_kind,
                     "speedup": r.timing.speedup if r.timing else None, "user": r.sandbox.get("user")}
with Evaluator(task, "mlx-cpu", limits=Limits(**limits, disable_guards=["audit"]), repeats=4, warmup=1) as ev:
    r = ev.evaluate(cfg["escape"], timing=False)
    out["escape"] = {"status": r.status, "message": r.message, "kind": r.sandbox_kind}
# what the escape left on the machine (seen from outside any sandbox, before the guard-off run writes)
out["exist_after_escape"] = [t for t in cfg["targets"] if os.path.exists(t) and os.path.getsize(t) > 0]
if cfg.get("guard_off"):
    os.environ["KSEARCH_SANDBOX"] = "none"
    with Evaluator(task, "mlx-cpu", limits=Limits(**limits, disable_guards=["audit"]), repeats=4, warmup=1) as ev:
        r = ev.evaluate(cfg["escape"], timing=False)
        out["off"] = {"status": r.status, "message": r.message, "kind": r.sandbox_kind}
print("RESULT " + json.dumps(out))
'''

WRITER = '''
import json, os, mlx.core as mx
TARGETS = json.loads($TARGETS)
def kernel(x):
    wrote = []
    for t in TARGETS + [os.path.join(os.path.dirname(os.getcwd()), "planted-$TOKEN")]:
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


def _ensure_user() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pass
    if not shutil.which("useradd"):
        return None
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", "--user-group", USER],
                   capture_output=True, timeout=60)
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        return None


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    for root, dirs, files in os.walk(path):
        os.chown(root, uid, gid)
        for f in files:
            os.chown(os.path.join(root, f), uid, gid)


def _run_as(user: pwd.struct_passwd | None, home: Path, site: Path, cfg: dict) -> dict:
    """Run the runner as `user` (as root: setpriv in a private mount namespace with /root made passable),
    or as the current user when that is None; returns its RESULT."""
    runner = site / "runner_ksearch_ci.py"
    runner.write_text(RUNNER)
    py = os.path.realpath(sys.executable)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8", "PYTHONPATH": str(site)}
    cmd = [py, "-P", str(runner), json.dumps(cfg)]
    if user is None:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=str(home))
    else:
        _chown_tree(site, user.pw_uid, user.pw_gid)
        root_hidden = not os.access("/root", os.X_OK, effective_ids=False) or \
            (os.stat("/root").st_mode & 0o001) == 0
        script = ""
        holds = None
        if py.startswith("/root/") and root_hidden:
            top = "/root/" + Path(py).relative_to("/root").parts[0]     # /root/.pyenv
            holds = tempfile.mkdtemp(prefix="ksearch-ci-py-")
            script = (f"mount --bind {top} {holds} && mount -t tmpfs -o mode=0755,size=1m tmpfs /root && "
                      f"mkdir -p {top} && mount --bind {holds} {top} && ")
        envs = [f"{k}={v}" for k, v in env.items()]
        script += ("exec setpriv --reuid={u} --regid={g} --clear-groups env -i {env} {cmd}".format(
            u=user.pw_uid, g=user.pw_gid, env=" ".join(map(_q, envs)), cmd=" ".join(map(_q, cmd))))
        try:
            p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                               capture_output=True, text=True, timeout=900, cwd=str(home))
        finally:
            if holds:
                os.rmdir(holds)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, f"the run as {user.pw_name if user else 'this user'} gave no result (rc {p.returncode}):\n" \
                 f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return json.loads(line[len("RESULT "):])


def _q(s: str) -> str:
    import shlex
    return shlex.quote(s)


@pytest.fixture
def ci_user():
    """(the user to run as, or None for the current non-root user; its home)."""
    if os.geteuid() != 0:
        yield None, Path.home()
        return
    if not (shutil.which("unshare") and shutil.which("setpriv")):
        pytest.skip("root, but `unshare` or `setpriv` (util-linux) is missing: cannot switch to another user here")
    user = _ensure_user()
    if user is None:
        pytest.skip(f"root, but the user {USER!r} cannot be created here (no useradd) and none exists")
    yield user, Path(user.pw_dir)


def test_as_a_non_root_user_honest_passes_and_the_escape_writes_nothing(ci_user):
    user, home = ci_user
    token = secrets.token_hex(4)
    site = home / f"ksearch-ci-{token}"            # the user's own PYTHONPATH folder, with a copy of the engine
    shutil.copytree(PKG, site / "ksearch_engine", ignore=shutil.ignore_patterns("__pycache__"))
    store = site / "ws" / ".ksearch"
    store.mkdir(parents=True)
    (store / "ksearch.db").write_text("")
    targets = [str(site / f"zz-ksearch-ci-{token}.pth"), str(site / "ksearch_engine" / "evaluate" / f"zz_planted_{token}.py"),
               str(store / "ksearch.db"), str(home / f".ksearch-ci-{token}"), f"/var/lib/ksearch-ci-{token}"]
    escape = WRITER.replace("$TARGETS", repr(json.dumps(targets))).replace("$TOKEN", token)
    try:
        out = _run_as(user, home, site, {"targets": targets, "escape": escape, "guard_off": True})
        assert out["uid"] != 0, out
        user_writable = [t for t in targets if out["writable"][t]]
        assert len(user_writable) >= 4, f"the test's targets are not the user's to write: {out['writable']}"

        h = out["honest"]
        assert h["status"] == "passed" and h["speedup"], h
        assert h["kind"] in ("bubblewrap", "namespaces (unshare)"), f"no isolating sandbox for a user here: {h}"

        e = out["escape"]
        assert e["status"] == "passed", f"a write got through as {USER}: {e}"
        assert out["exist_after_escape"] == [], f"written on the machine: {out['exist_after_escape']}"

        # Guard off: the same user, no sandbox: everything the user may write is written
        off = out["off"]
        assert off["kind"] == "rlimits + process group" and "WROTE" in off["message"], off
        wrote = json.loads(off["message"].split("WROTE ", 1)[1].splitlines()[0])
        assert set(user_writable) <= set(wrote), set(user_writable) - set(wrote)
    finally:
        shutil.rmtree(site, ignore_errors=True)
        for t in targets:
            if not t.startswith(str(site)):
                try:
                    os.unlink(t)
                except OSError:
                    pass
