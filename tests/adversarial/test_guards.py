"""Each guard is what stops its attack: with the guard on the attack is caught; with that one guard
switched off (a test-only switch, or the OS feature withheld) the attack gets further or goes unnoticed.

These tests create real processes, sockets and files; everything they create is unique to the test and
removed afterwards."""
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from attacks import assert_carries_on, attack, make_evaluator, softmax_task
from ksearch_engine.evaluate import sandbox

LINUX_NS = bool(sandbox._unshare_prefix())
HAS_BWRAP = bool(sandbox.bwrap_path())
needs_ns = pytest.mark.skipif(not LINUX_NS, reason="needs Linux namespaces (unshare) for the child")
needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap (`bwrap`) is not installed or not usable here")


@pytest.fixture
def unshare_sandbox(monkeypatch):
    """The fallback where bubblewrap is missing: namespaces with covers over the hidden folders (its own
    guards, the covers and the way they are held, are what these tests check)."""
    monkeypatch.setenv("KSEARCH_SANDBOX", "unshare")


@pytest.fixture
def bwrap_sandbox(monkeypatch):
    monkeypatch.setenv("KSEARCH_SANDBOX", "bwrap")
    return monkeypatch
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to a uid of its own needs root")


# -- timer, comparison and timing-loop guards -------------------------------------------------------------
def test_timer_patch_is_caught_by_the_tamper_check_alone():
    with make_evaluator(softmax_task()) as ev:
        assert ev.evaluate(attack("patch_perf_counter")).status == "cheating"
    with make_evaluator(softmax_task(), disable_guards=["tamper"]) as ev:
        r = ev.evaluate(attack("patch_perf_counter"))
    # Without the tamper check nobody reports it (its timing is still honest: the worker took its timer
    # before any candidate ran, so the patch changed nothing it measured).
    assert r.status == "passed", r.message
    assert r.timing and r.timing.median_ms > 0


def test_garbage_while_timed_is_caught_by_the_recheck_alone():
    with make_evaluator(softmax_task()) as ev:
        assert ev.evaluate(attack("garbage_when_timed")).status == "cheating"
    with make_evaluator(softmax_task(), disable_guards=["recheck"]) as ev:
        r = ev.evaluate(attack("garbage_when_timed"))
    assert r.status == "passed" and r.timing is not None, "without the re-check it passes with a time"


def test_without_the_audit_hook_reading_the_reference_through_frames_finds_nothing():
    """The reference never runs in the candidate's process: the frame walk finds no reference output and
    its fallback (zeros) fails."""
    with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
        r = ev.evaluate(attack("reference_buffer_via_frames"))
    assert r.status in ("failed", "cheating") and r.timing is None, r.message


# -- network ----------------------------------------------------------------------------------------------
class Listener:
    """A TCP listener on 127.0.0.1 that records what it receives."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.got = b""
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.got += conn.recv(100)
                except OSError:
                    pass

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def test_tcp_exfiltration_is_stopped_by_audit_hook_and_by_namespace_each_alone(listener):
    src = attack("socket_tcp", PORT=listener.port)
    with make_evaluator(softmax_task()) as ev:
        r = ev.evaluate(src)
        assert r.status == "cheating" and "network" in r.message
        assert_carries_on(ev)
    if LINUX_NS:  # the namespace alone: connect fails (its 127.0.0.1 is not ours), nothing arrives
        with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
            assert ev.evaluate(src).status == "passed"
    with make_evaluator(softmax_task(), isolate_network=False) as ev:  # the audit hook alone
        r = ev.evaluate(src)
        assert r.status == "cheating" and "network" in r.message
    assert listener.got == b""


def test_with_both_network_guards_off_the_data_gets_out(listener):
    """Shows the two guards above are what stop it: remove both and the listener receives the data."""
    with make_evaluator(softmax_task(), disable_guards=["audit"], isolate_network=False) as ev:
        ev.evaluate(attack("socket_tcp", PORT=listener.port))
    for _ in range(20):
        if listener.got:
            break
        threading.Event().wait(0.1)
    assert listener.got.startswith(b"leak")


# -- secrets: files and environments ------------------------------------------------------------------------
@pytest.fixture
def fake_home():
    """A home with ~/.ssh/id_test, outside every temp folder the child gets privately (so only the hide
    list can hide it)."""
    base = Path("/run") if os.access("/run", os.W_OK) else Path.home()
    home = Path(tempfile.mkdtemp(prefix="ksearch-fakehome-", dir=base))
    (home / ".ssh").mkdir()
    key = home / ".ssh" / "id_test"
    key.write_text("-----BEGIN FAKE KEY----- ksearch-test-secret")
    os.chmod(home, 0o755)
    os.chmod(home / ".ssh", 0o755)
    key.chmod(0o644)  # readable by anyone: only the sandbox's hiding can keep it from the candidate
    yield home, key
    shutil.rmtree(home, ignore_errors=True)


@needs_ns
def test_ssh_key_is_hidden_and_the_attempt_reported(fake_home):
    home, key = fake_home
    src = attack("reads_ssh_key", KEY=key)
    with make_evaluator(softmax_task(), hide=[str(home)]) as ev:
        r = ev.evaluate(src)
        assert r.status == "cheating" and f"tried to read {key}" in r.message, r.message
        assert_carries_on(ev)
    with make_evaluator(softmax_task(), hide=[str(home)], disable_guards=["audit"]) as ev:
        r = ev.evaluate(src)  # unreported now, but still hidden: the candidate finds no file
        assert r.status == "passed" and "secret" not in r.message


@needs_ns
def test_with_nothing_hidden_the_key_leaks_under_the_namespace_fallback(fake_home, unshare_sandbox):
    """Shows the hide list is what protects it where the child sees the host's files (unshare fallback)."""
    home, key = fake_home
    with make_evaluator(softmax_task(), hide=[], disable_guards=["audit"]) as ev:
        r = ev.evaluate(attack("reads_ssh_key", KEY=key))
    assert r.sandbox_kind == "namespaces (unshare)", r.sandbox
    assert r.status == "runtime_error" and "ksearch-test-secret" in r.message


@needs_bwrap
def test_bubblewrap_shows_no_key_even_with_nothing_hidden_and_the_view_is_what_keeps_it_out(fake_home, bwrap_sandbox,
                                                                                             monkeypatch):
    """Under bubblewrap the hide list does not matter: the view holds only what the run needs. Guard off: put
    the key's folder into the view (a PYTHONPATH entry is part of it) and the same candidate reads the key."""
    home, key = fake_home
    src = attack("reads_ssh_key", KEY=key)
    with make_evaluator(softmax_task(), hide=[], disable_guards=["audit"]) as ev:
        r = ev.evaluate(src)
        assert r.sandbox_kind == "bubblewrap", r.sandbox
        assert r.status == "passed", f"the key was visible: {r.message}"
        assert str(home) not in r.sandbox["view"]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(home), os.environ.get("PYTHONPATH")])))
    with make_evaluator(softmax_task(), hide=[], disable_guards=["audit"]) as ev:
        r = ev.evaluate(src)
    assert r.status == "runtime_error" and "ksearch-test-secret" in r.message, (r.status, r.message)


@needs_bwrap
def test_bubblewrap_mounts_no_secret_folder_of_the_home(bwrap_sandbox):
    """The real home's secret folders (.ssh, .config, ...) and the home itself are not in the view at all, and
    nothing of the view can be unmounted or written (no capabilities, read-only binds)."""
    import secrets as _secrets

    home = Path.home().resolve()
    planted = f"/usr/zz-ksearch-probe-{_secrets.token_hex(4)}"
    probe = ("import ctypes, json, os, mlx.core as mx\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "def kernel(x):\n"
             f"    home = {str(home)!r}\n"
             f"    secrets = [os.path.join(home, p) for p in {list(sandbox.SECRET_PATHS)!r}]\n"
             "    mounts = open('/proc/self/mounts').read()\n"
             "    seen = {'secrets': [p for p in secrets if os.path.lexists(p)],\n"
             "            'mounted': [p for p in secrets if (' ' + p + ' ') in mounts],\n"
             "            'umount': libc.umount2(b'/usr', 2), 'umount_errno': ctypes.get_errno()}\n"
             "    try:\n"
             f"        open({planted!r}, 'w')\n"
             "        seen['wrote'] = True\n"
             "    except OSError:\n"
             "        seen['wrote'] = False\n"
             "    raise RuntimeError('SEEN ' + json.dumps(seen))\n")
    import json

    def run() -> dict:
        with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
            r = ev.evaluate(probe, timing=False)
        assert "SEEN " in r.message, r.message
        return r.sandbox_kind, json.loads(r.message.split("SEEN ", 1)[1].splitlines()[0])

    kind, seen = run()
    assert kind == "bubblewrap"
    assert seen["secrets"] == [] and seen["mounted"] == [], seen
    assert seen["umount"] == -1 and seen["wrote"] is False, seen
    assert not os.path.exists(planted)
    # Guard off: without a sandbox the same probe sees the home's secret folders this machine has
    on_host = [str(home / p) for p in sandbox.SECRET_PATHS if (home / p).exists()]
    if on_host:
        bwrap_sandbox.setenv("KSEARCH_SANDBOX", "none")
        try:
            kind, seen = run()
        finally:
            if os.path.exists(planted):
                os.unlink(planted)
        assert kind == "rlimits + process group" and set(on_host) <= set(seen["secrets"]), (on_host, seen)


def _unmount_attempt(home: Path, key: Path, **limits) -> str:
    # the home stays hidden too (as by default): the interpreter under it is bound back, so the uid drop works
    hide = [str(Path.home().resolve()), str(home)]
    with make_evaluator(softmax_task(), hide=hide, disable_guards=["audit"] + limits.pop("off", []),
                        **limits) as ev:
        r = ev.evaluate(attack("unmounts_hidden_folder", DIR=home, KEY=key), timing=False)
    assert r.status == "runtime_error" and "UMOUNT" in r.message, r.message
    return r.message


@needs_ns
@needs_root
def test_root_worker_cannot_unmount_the_cover_after_dropping_to_its_own_uid(fake_home, unshare_sandbox):
    home, key = fake_home
    msg = _unmount_attempt(home, key)
    assert "rc=-1" in msg and "ksearch-test-secret" not in msg
    # Shows the uid drop is what stops it: a worker left root unmounts the cover and reads the key.
    assert "ksearch-test-secret" in _unmount_attempt(home, key, drop_privileges=False)


@needs_ns
def test_user_namespace_worker_locks_its_covers(fake_home, monkeypatch, unshare_sandbox):
    """How a non-root user's worker runs (unshare --user --map-root-user): it cannot drop to another uid, so
    it locks its mounts in a nested user namespace. Forced here with the same unshare flags."""
    home, key = fake_home
    monkeypatch.setattr(sandbox, "_unshare_prefix", lambda: ["unshare", *sandbox.USERNS, "--net", "--pid",
                                                             "--fork", "--mount", "--mount-proc", "--kill-child"])
    with make_evaluator(softmax_task(), hide=[str(Path.home().resolve()), str(home)]) as ev:
        r = ev.evaluate(attack("good"))
        assert r.status == "passed" and "nested user namespace" in r.sandbox["user"], (r.message, r.sandbox)
        assert r.sandbox["network"].startswith("isolated")
    msg = _unmount_attempt(home, key)
    assert "rc=-1" in msg and "ksearch-test-secret" not in msg
    # Shows the lock is what stops it: without it, root-in-the-namespace unmounts the cover.
    assert "ksearch-test-secret" in _unmount_attempt(home, key, off=["mountlock"])


@needs_ns
def test_the_default_hides_the_whole_home_but_keeps_what_the_run_needs():
    home = str(Path.home().resolve())
    src = ("import os, mlx.core as mx\n"
           f"def kernel(x):\n    raise RuntimeError('LISTING ' + repr(sorted(os.listdir({home!r}))))\n")
    with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
        r = ev.evaluate(src)
    assert "LISTING" in r.message
    visible = eval(r.message.split("LISTING ", 1)[1].strip().splitlines()[0])  # noqa: S307 - our own repr
    needed = {Path(p).relative_to(home).parts[0] for p in sandbox.needed_paths(Path("/tmp/x/y"))
              if p.startswith(home + "/")}
    assert set(visible) <= needed, f"home entries visible beyond what the run needs: {set(visible) - needed}"
    assert ".ssh" not in visible


@pytest.fixture
def keyed_process():
    """A process started with an API key in its environment, as the server or CLI would be."""
    import subprocess

    p = subprocess.Popen(["sleep", "60"], env={**os.environ, "GEMINI_API_KEY": "ksearch-test-api-key"})
    yield p.pid
    p.kill()
    p.wait()


@needs_ns
def test_api_key_is_in_no_environment_the_candidate_can_read(keyed_process, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "ksearch-test-api-key")
    src = attack("reads_parent_environ", PARENT=keyed_process, KEY="ksearch-test-api-key")
    with make_evaluator(softmax_task()) as ev:
        r = ev.evaluate(attack("reads_env_key", KEY="ksearch-test-api-key"))
        assert r.status == "passed", f"the key reached the candidate's environment: {r.message}"
        r = ev.evaluate(src)
        assert r.status == "cheating" and "environment" in r.message, r.message
        assert_carries_on(ev)
    with make_evaluator(softmax_task(), disable_guards=["audit"]) as ev:
        r = ev.evaluate(src)  # PID namespace + scrubbed env: there is nothing to find
        assert r.status == "passed", r.message


@needs_root
def test_without_the_pid_namespace_another_processs_environ_leaks(keyed_process):
    """Shows the PID namespace (with the uid drop that comes with it) is what protects other processes'
    environments: without namespaces the child reads /proc/PID/environ of the keyed process."""
    src = attack("reads_parent_environ", PARENT=keyed_process, KEY="ksearch-test-api-key")
    with make_evaluator(softmax_task(), isolate_network=False, disable_guards=["audit"]) as ev:
        r = ev.evaluate(src)
    assert r.status == "runtime_error" and "LEAK" in r.message and str(keyed_process) in r.message, r.message


# -- evaluator's files on disk ------------------------------------------------------------------------------
@needs_ns
def test_no_expected_output_is_findable_on_disk():
    """A decoy expected output of 'another evaluator' sits in /tmp, and a second evaluator is open with its
    reference done: the candidate's search of every temp folder finds neither, and no .ref file at all."""
    decoy = Path(tempfile.mkdtemp(prefix="ksearch-eval-decoy-")) / "reference"
    decoy.mkdir()
    np.save(decoy / "small.s0.ref0.npy", np.zeros(3))
    try:
        with make_evaluator(softmax_task()) as other, make_evaluator(softmax_task()) as ev:
            assert other.evaluate(attack("good"), timing=False).status == "passed"
            r = ev.evaluate(attack("search_disk_for_expected"), timing=False)
    finally:
        shutil.rmtree(decoy.parent)
    assert r.status == "runtime_error" and "FOUND" in r.message, r.message
    found = r.message.split("FOUND ", 1)[1]
    assert "decoy" not in found and ".ref" not in found and str(other.dir) not in found, found


# -- processes ------------------------------------------------------------------------------------------------
def _count_forked(**limits) -> int:
    with make_evaluator(softmax_task(), **limits) as ev:
        r = ev.evaluate(attack("forks_counted", N=100), timing=False)
        assert r.status == "runtime_error" and "FORKED" in r.message, r.message
        n = int(r.message.split("FORKED ", 1)[1].split()[0])
        assert_carries_on(ev)
    return n


@needs_ns
def test_pids_cgroup_stops_forking_and_root_without_it_does_not(monkeypatch):
    with_cgroup = _count_forked(nproc=48)
    assert with_cgroup < 48
    monkeypatch.setattr(sandbox.PidsCgroup, "ROOT", Path("/nonexistent-ksearch-cgroup-root"))
    as_uid = _count_forked(nproc=48)   # no cgroup: RLIMIT_NPROC of the child's own uid still stops it
    assert as_uid < 48
    if os.geteuid() == 0:
        as_root = _count_forked(nproc=48, drop_privileges=False)  # root ignores RLIMIT_NPROC
        assert as_root == 100, "without the cgroup and the uid drop nothing limits forking"


def _our_sandboxed_processes() -> list[int]:
    """Processes still in a pids cgroup of this test process's evaluators (named ksearch-OURPID-N)."""
    mark = f"/ksearch-{os.getpid()}-"
    out = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and mark in Path(f"/proc/{p}/cgroup").read_text():
                out.append(int(p))
        except OSError:
            pass
    return out


def test_fork_bomb_through_libc_is_contained_and_cleaned_up():
    with make_evaluator(softmax_task(), wall_s=4, nproc=64) as ev:
        r = ev.evaluate(attack("fork_bomb_ctypes"), timing=False)
        assert r.status in ("timeout", "resource_limit", "crashed"), r.message
        assert_carries_on(ev)
    for _ in range(50):
        if not _our_sandboxed_processes():
            break
        threading.Event().wait(0.1)
    assert not _our_sandboxed_processes(), "fork bomb processes survived the evaluator"


@needs_ns
def test_detached_process_goes_unnoticed_without_the_cgroup(monkeypatch):
    """Shows the cgroup is what sees (and kills) a process that left the worker's session."""
    monkeypatch.setattr(sandbox.PidsCgroup, "ROOT", Path("/nonexistent-ksearch-cgroup-root"))
    with make_evaluator(softmax_task()) as ev:
        r = ev.evaluate(attack("setsid_escape"), timing=False)
    assert r.status == "passed"   # the PID namespace still ends it when the worker goes (evaluator closed)


# -- disk -------------------------------------------------------------------------------------------------------
@needs_ns
def test_filling_tmp_stops_at_the_private_tmpfs():
    with make_evaluator(softmax_task(), tmp_mb=8) as ev:
        r = ev.evaluate(attack("fills_tmp"), timing=False)
    assert r.status in ("runtime_error", "resource_limit") and "WROTE" in r.message, r.message
    assert int(r.message.split("WROTE ", 1)[1].split()[0]) <= 8
    assert not os.path.exists("/tmp/ksearch-fill.bin"), "the host's /tmp was written"
