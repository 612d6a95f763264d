"""Start an untrusted child process: own session, scratch directory, rlimits, no network, scrubbed env.

On Linux (where `unshare` is allowed) the child gets new network, PID and mount namespaces: no network, no
view of other processes (their /proc/PID/environ holds keys), and the user's secret folders (~/.ssh, cloud
credentials) hidden under empty tmpfs mounts. A cgroup caps its process count (root ignores RLIMIT_NPROC). On macOS only rlimits,
process groups and timeouts exist; what was applied is reported back in `applied`.
"""
from __future__ import annotations

import itertools
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
                ".git-credentials", ".azure", ".gemini")


def _unshare_prefix() -> list[str]:
    """`unshare` with new network, PID and mount namespaces, when this OS and user allow it (probed once)."""
    if not sys.platform.startswith("linux"):
        return []
    if "prefix" not in _PROBE:
        cmd = ["unshare", "--net", "--pid", "--fork", "--mount", "--mount-proc", "--kill-child"]
        try:
            ok = subprocess.run(cmd + ["true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        _PROBE["prefix"] = cmd if ok else []
    return _PROBE["prefix"]


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


def spawn(cmd: list[str], scratch: Path, limits: Limits, *, backend: str, env_extra: dict | None = None,
          stderr_path: Path | None = None) -> tuple[subprocess.Popen, dict, PidsCgroup]:
    """Start `cmd` sandboxed in `scratch`. Returns the process, what was applied, and its pids cgroup."""
    scratch.mkdir(parents=True, exist_ok=True)
    rl = [(resource.RLIMIT_CPU, limits.cpu_s, "cpu"), (resource.RLIMIT_FSIZE, limits.file_mb << 20, "fsize"),
          (resource.RLIMIT_NPROC, limits.nproc, "nproc")]
    if backend != "mlx-cuda":  # CUDA runtimes reserve large virtual ranges; RLIMIT_AS breaks them
        rl.append((resource.RLIMIT_AS, limits.memory_mb << 20, "as"))
    prefix = _unshare_prefix() if limits.isolate_network else []
    cg = PidsCgroup(f"ksearch-{os.getpid()}-{next(_SEQ)}", limits.nproc)
    procs = cg.procs_file()
    home = Path.home()
    hide = [str(home / p) for p in SECRET_PATHS if (home / p).exists()] if prefix else []
    applied = {"session": True, "scratch": str(scratch), "rlimits": [n for *_, n in rl],
               "network": "isolated (new network namespace)" if prefix else "not isolated (no namespaces here)",
               "pid_namespace": bool(prefix), "pids_cgroup": procs is not None,
               "hidden": hide, "env": "scrubbed"}

    def preexec() -> None:  # runs in the child between fork and exec
        os.setsid()
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
    if hide:
        extra["KSEARCH_HIDE"] = os.pathsep.join(hide)
    proc = subprocess.Popen(prefix + cmd, cwd=scratch, env=scrubbed_env(scratch, extra), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=err, preexec_fn=preexec, close_fds=True)
    if stderr_path:
        err.close()
    return proc, applied, cg


_SEQ = itertools.count()


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
