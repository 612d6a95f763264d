"""Whether a process is still running (used to tell live workers from ones that died mid-run)."""
from __future__ import annotations

import os


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
