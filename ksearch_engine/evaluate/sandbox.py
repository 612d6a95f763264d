"""Start an untrusted child process: own session, scratch directory, rlimits, no network, scrubbed env.

On Linux (where `unshare` is allowed) the child gets new network, PID and mount namespaces: no network, no
view of other processes (their /proc/PID/environ holds keys). In its mount namespace the child (child.py,
before it runs anything else) covers the user's home and every world-writable temp folder with empty,
size-limited tmpfs mounts, binds back only what the run needs (the interpreter, the packages, its own
evaluator directory), and then drops root for a uid of its own, so a candidate can neither undo those mounts
nor write outside its scratch directory. A cgroup caps its process count (root ignores RLIMIT_NPROC) and
kills whatever it started. On macOS only rlimits, process groups and timeouts exist; what was applied is
reported back in `applied`.
"""
from __future__ import annotations

import functools
import importlib.metadata
import itertools
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from .models import Limits

_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
_KEEP = {"PATH", "LANG", "LC_ALL", "PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
         "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "SYSTEMROOT"}


def scrubbed_env(scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a candidate sees: no API keys or tokens, HOME and TMPDIR in its scratch dir."""
    env = {k: v for k, v in os.environ.items()
           if (k in _KEEP or k.startswith(("MLX_", "CUDA_", "NVIDIA_", "KSEARCH_SIM"))) and not _SECRET.search(k)}
    env.update({"HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1"})
    env.update(extra or {})
    return env


SECRET_PATHS = (".ssh", ".aws", ".gnupg", ".config", ".docker", ".kube", ".netrc", ".npmrc", ".pypirc",
                ".git-credentials", ".azure", ".gemini")   # all inside the home, which is hidden as a whole
TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")   # world-writable: each child gets private ones


def hidden_paths(limits: Limits) -> list[str]:
    """What the child must not see: `limits.hide`, or else the user's whole home directory."""
    if limits.hide is not None:
        return [str(Path(p)) for p in limits.hide]
    home = Path.home().resolve()
    return [str(home)] if home != Path("/") else [str(home / p) for p in SECRET_PATHS]


def needed_paths(scratch: Path) -> list[str]:
    """What the child needs to see even when it lies under a hidden folder: Python, packages, CUDA, its dirs."""
    keep = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
            str(Path(__file__).resolve().parents[2]), str(scratch.parent)]
    keep += [p for p in sys.path if p]
    for var in ("PYTHONPATH", "LD_LIBRARY_PATH"):
        keep += [p for p in os.environ.get(var, "").split(os.pathsep) if p]
    keep += [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    out: list[str] = []
    for p in keep:
        for q in {os.path.abspath(p), os.path.realpath(p)}:
            if os.path.exists(q) and q not in out:
                out.append(q)
    return out


def _child_uid() -> int:
    """A uid no other process uses, so one child cannot read another's scratch or share its RLIMIT_NPROC."""
    return 3_000_000 + (os.getpid() * 1024 + next(_UIDS)) % 1_000_000


_UIDS = itertools.count()


def _unshare_prefix() -> list[str]:
    """`unshare` with new network, PID and mount namespaces, when this OS and user allow it (probed once)."""
    if not sys.platform.startswith("linux"):
        return []
    if "prefix" not in _PROBE:
        cmd = ["unshare", "--net", "--pid", "--fork", "--mount", "--mount-proc", "--kill-child"]
        _PROBE["prefix"] = []
        # root: plain namespaces; a user: the same inside a user namespace of its own, where the distro allows
        for c in ([cmd] if os.geteuid() == 0 else [cmd[:1] + USERNS + cmd[1:]]):
            try:
                if subprocess.run(c + ["true"], capture_output=True, timeout=10).returncode == 0:
                    _PROBE["prefix"] = c
                    break
            except (OSError, subprocess.TimeoutExpired):
                pass
    return _PROBE["prefix"]


USERNS = ["--user", "--map-root-user"]


_PROBE: dict[str, object] = {}


class PidsCgroup:
    """A cgroup-v1 `pids` group capping how many processes and threads a child may have (fork bombs), and
    through which every process it started can be killed, even ones that left its session."""

    ROOT = Path("/sys/fs/cgroup/pids")

    def __init__(self, name: str, max_pids: int):
        self.path: Path | None = None
        try:
            p = self.ROOT / name
            p.mkdir()
            (p / "pids.max").write_text(str(max_pids))
            self.path = p
        except OSError:
            self.path = None

    def procs_file(self) -> str | None:
        return str(self.path / "cgroup.procs") if self.path else None

    def pids(self) -> list[int]:
        if not self.path:
            return []
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self) -> None:
        if not self.path:
            return
        for _ in range(20):
            try:
                pids = [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                return
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        if self.path:
            self.kill_all()
            try:
                self.path.rmdir()
            except OSError:
                pass
            self.path = None


@functools.lru_cache(maxsize=1)
def mlx_has_cuda() -> bool:
    """Whether MLX's CUDA backend is installed (an mlx-cuda-* distribution), found without importing mlx."""
    try:
        names = {(d.metadata["Name"] or "").lower().replace("_", "-") for d in importlib.metadata.distributions()}
    except Exception:  # noqa: BLE001 - a broken dist-info must not stop an evaluation
        return False
    return any(n.startswith("mlx-cuda") for n in names)


def spawn(cmd: list[str], scratch: Path, limits: Limits, *, backend: str, env_extra: dict | None = None,
          stderr_path: Path | None = None) -> tuple[subprocess.Popen, dict, PidsCgroup]:
    """Start `cmd` sandboxed in `scratch`. Returns the process, what was applied, and its pids cgroup."""
    scratch.mkdir(parents=True, exist_ok=True)
    rl = [(resource.RLIMIT_CPU, limits.cpu_s, "cpu"), (resource.RLIMIT_FSIZE, limits.file_mb << 20, "fsize"),
          (resource.RLIMIT_NOFILE, limits.nofile, "nofile")]
    own_uid = limits.drop_privileges and os.geteuid() == 0
    if own_uid:
        rl.append((resource.RLIMIT_NPROC, limits.nproc, "nproc"))
    elif os.geteuid() != 0:
        # RLIMIT_NPROC counts every thread of the user, not of the child: allow what the user already runs
        busy = _user_threads(os.geteuid())
        if busy is not None:
            rl.append((resource.RLIMIT_NPROC, busy + limits.nproc, "nproc"))
    if backend != "mlx-cuda" and not mlx_has_cuda():
        # CUDA runtimes reserve large virtual ranges; RLIMIT_AS breaks them. An MLX built with its CUDA backend
        # initialises CUDA on import even for a CPU evaluation, so the limit is off wherever that MLX is installed.
        rl.append((resource.RLIMIT_AS, limits.memory_mb << 20, "as"))
    prefix = _unshare_prefix() if limits.isolate_network else []
    cg = PidsCgroup(f"ksearch-{os.getpid()}-{next(_SEQ)}", limits.nproc)
    procs = cg.procs_file()
    confine: dict = {}
    if prefix:
        userns = "--user" in prefix
        uid = _child_uid() if (limits.drop_privileges and os.geteuid() == 0 and not userns) else None
        if uid is not None:
            os.chown(scratch, uid, uid)
            os.chmod(scratch, 0o700)
            os.chmod(scratch.parent, 0o711)  # others may pass through the evaluator's folder, not list it
        confine = {"hide": hidden_paths(limits), "tmp": [d for d in TMP_DIRS if os.path.isdir(d)],
                   "tmp_mb": limits.tmp_mb, "keep": needed_paths(scratch), "uid": uid, "userns": userns}
    applied = {"session": True, "scratch": str(scratch), "rlimits": [n for *_, n in rl],
               "network": "isolated (new network namespace)" if prefix else "not isolated (no namespaces here)",
               "pid_namespace": bool(prefix), "pids_cgroup": procs is not None,
               "hidden": confine.get("hide", []), "private_tmp": confine.get("tmp", []), "env": "scrubbed",
               "scratch_quota": f"{limits.scratch_mb} MB, {limits.scratch_files} files"}

    pdeathsig = _libc_prctl()

    def preexec() -> None:  # runs in the child between fork and exec
        os.setsid()
        if pdeathsig is not None:  # dies with the evaluator's process (a SIGKILLed worker leaves no child)
            pdeathsig(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if procs:
            try:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                pass
        for what, value, _ in rl:
            try:
                resource.setrlimit(what, (value, value))
            except (ValueError, OSError):
                pass

    err = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
    extra = dict(env_extra or {})
    if confine:
        extra["KSEARCH_CONFINE"] = json.dumps(confine)
    if limits.disable_guards:
        extra["KSEARCH_GUARDS_OFF"] = ",".join(limits.disable_guards)
    proc = subprocess.Popen(prefix + cmd, cwd=scratch, env=scrubbed_env(scratch, extra), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=err, preexec_fn=preexec, close_fds=True)
    if stderr_path:
        err.close()
    return proc, applied, cg


def _user_threads(uid: int) -> int | None:
    """How many threads `uid` runs now (Linux /proc), or None where that cannot be read."""
    if not os.path.isdir("/proc/self/task"):
        return None
    n = 0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{p}")
            if st.st_uid == uid:
                n += len(os.listdir(f"/proc/{p}/task"))
        except OSError:
            pass
    return n


def _libc_prctl():
    """libc's prctl on Linux (for PR_SET_PDEATHSIG), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def scratch_usage(scratch: Path, max_files: int) -> tuple[int, int]:
    """Bytes and files under `scratch` (stops counting past `max_files`; never follows links)."""
    total, files, stack = 0, 0, [str(scratch)]
    while stack and files <= max_files:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    files += 1
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        else:
                            total += e.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        pass
        except OSError:
            pass
    return total, files


_SEQ = itertools.count()
_STALE = re.compile(r"^ksearch-(?:eval-)?(\d+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(tmp: Path | None = None) -> dict:
    """Remove what evaluators that were killed (SIGKILL: no cleanup ran) left behind: their pids cgroups,
    killing any process still in them, and their `ksearch-eval-PID-*` folders. Returns the counts."""
    import shutil
    import tempfile

    out = {"cgroups": 0, "dirs": 0}
    for root, kind in ((PidsCgroup.ROOT, "cgroups"), (Path(tmp or tempfile.gettempdir()), "dirs")):
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            m = _STALE.match(name)
            if not m or (kind == "dirs" and not name.startswith("ksearch-eval-")) or _alive(int(m.group(1))):
                continue
            if kind == "cgroups":
                cg = PidsCgroup.__new__(PidsCgroup)
                cg.path = root / name
                cg.remove()
                out[kind] += not cg.path and not (root / name).exists()
            else:
                shutil.rmtree(root / name, ignore_errors=True)
                out[kind] += not (root / name).exists()
    return out


def kill_group(proc: subprocess.Popen, cgroup: PidsCgroup | None = None) -> None:
    """Kill the child and everything it started (its whole process group/session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    if cgroup is not None:
        cgroup.kill_all()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
