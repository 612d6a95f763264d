"""Whether a process is still running, and whether a PID still names the process it named when we wrote it
down (a PID from an earlier session can be reused after the worker exited or the machine rebooted)."""
from __future__ import annotations

import os
import subprocess
import sys


def pid_alive(pid: int | None) -> bool:
    """True while `pid` runs; False once it exited, including a zombie not yet reaped by its parent."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:  # no /proc (macOS): kill(0) said it exists
        return True


def start_time(pid: int | None) -> str | None:
    """An identity for the process `pid` now: its start time (clock ticks since boot) and this boot's id on
    Linux, its start time from `ps` elsewhere; None when there is no such process."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = f.read().rsplit(")", 1)[-1].split()[19]
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot = f.read().strip()
        except OSError:
            boot = ""
        return f"{boot}:{ticks}"
    except (OSError, IndexError):
        if sys.platform.startswith("linux"):
            return None
    try:
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(int(pid))], capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def same_process(pid: int | None, identity: str | None) -> bool:
    """True when `pid` runs and is the process whose `start_time` was `identity` (never for a missing
    identity: an unidentified PID is not signalled)."""
    return bool(identity) and pid_alive(pid) and start_time(pid) == identity
