"""Start an untrusted child process: its own view of the file system, limits, no network, scrubbed env.

Three sandboxes, the strongest this machine allows (`sandbox_kind`; KSEARCH_SANDBOX=bwrap|unshare|none forces
one), and every result names the one it ran in:
- **bubblewrap** (Linux, `bwrap`): the child sees a read-only view of exactly what it needs (/usr, the Python
  install, the site-packages and ksearch's own engine folder, a few files of /etc), a private writable scratch
  folder, private size-limited /tmp, /var/tmp and /dev/shm, the task's input files read-only, and nothing else:
  no home, no store (.ksearch/), no workspace, no /var. New network, PID, IPC and UTS namespaces, a new session,
  every capability dropped, killed with its parent. Started by root it also runs as a uid of its own (dropped
  inside the sandbox before any candidate code runs); started by an ordinary user it keeps that user's uid in
  a user namespace of its own, where every mount is locked and read-only.
- **namespaces** (`unshare`, where bubblewrap is missing): new network, PID and mount namespaces; child.py
  covers the home and temp folders with empty tmpfs mounts and binds back what the run needs (see child.py).
- **rlimits + process group** (macOS, or Linux without namespaces): rlimits, its own session, timeouts. This
  sandbox does not isolate files or network: the in-process guards and the evaluator's checks are all there is.

Limits: memory and process count per candidate through a cgroup (v2 `memory.max`/`pids.max`, else v1
`memory.limit_in_bytes`/`pids.max`), which counts every process the candidate starts; where no cgroup is
writable, RLIMIT_AS (per process) and RLIMIT_NPROC (per uid). `applied` says which limits held.

No `preexec_fn` (unsafe from threads): a tiny launcher (`python -I -S -c _LAUNCH`) joins the cgroups, sets
the rlimits and the parent-death signal, drops the uid where asked, and `exec`s the next step.
"""
from __future__ import annotations

import functools
import importlib.metadata
import itertools
import json
import os
import re
import shutil
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
    keep += cupti_paths()
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
    """The cgroup(s) of one child: memory and process count for all of its processes together (a fork bomb,
    three forked 3 GB children), and through which every process it started can be killed, even ones that
    left its session. cgroup v2 where this process's own cgroup delegates `memory` and `pids`, else v1
    hierarchies (`memory`, `pids`); `version` is None where neither could be created (then rlimits apply).
    Set `ROOT` to a folder that does not exist to withhold cgroups (tests)."""

    ROOT = Path("/sys/fs/cgroup")

    def __init__(self, name: str, max_pids: int, memory_mb: int | None = None):
        self.path: Path | None = None          # the group that holds the processes (pids)
        self.dirs: list[Path] = []             # every folder created (removed at the end)
        self.version: str | None = None
        self.memory: str | None = None         # which memory limit holds, in words
        self.processes: str | None = None      # which process limit holds, in words
        if not (self.ROOT / "cgroup.controllers").exists() or not self._v2(name, max_pids, memory_mb):
            self._v1(name, max_pids, memory_mb)

    @staticmethod
    def _own(controller: str) -> str | None:
        """This process's cgroup path for `controller` ('' = the v2 unified hierarchy)."""
        try:
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, ctrls, path = line.split(":", 2)
                if (controller == "" and ctrls == "") or controller in ctrls.split(","):
                    return path
        except (OSError, ValueError):
            pass
        return None

    def _v2(self, name: str, max_pids: int, memory_mb: int | None) -> bool:
        own = self._own("")
        if own is None:
            return False
        base = self.ROOT / own.lstrip("/")
        try:
            enabled = (base / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                (base / "cgroup.subtree_control").write_text("+memory +pids")   # EBUSY if we live in `base`
            d = base / name
            d.mkdir()
        except OSError:
            return False
        self.dirs.append(d)
        try:
            (d / "pids.max").write_text(str(max_pids))
            self.processes = f"cgroup v2 pids.max={max_pids}"
            if memory_mb:
                (d / "memory.max").write_text(str(memory_mb << 20))
                self.memory = f"cgroup v2 memory.max={memory_mb} MB"
                try:
                    (d / "memory.swap.max").write_text("0")
                except OSError:
                    pass
        except OSError:
            self.remove()
            return False
        self.path, self.version = d, "v2"
        return True

    def _v1(self, name: str, max_pids: int, memory_mb: int | None) -> None:
        for ctrl in ("pids", "memory"):
            if ctrl == "memory" and not memory_mb:
                continue
            own = self._own(ctrl)
            root = self.ROOT / ctrl
            d = root / (own or "/").lstrip("/") / name
            try:
                d.mkdir()
            except OSError:
                try:  # our own group may not allow children; the hierarchy's root may
                    d = root / name
                    d.mkdir()
                except OSError:
                    continue
            self.dirs.append(d)
            try:
                if ctrl == "pids":
                    (d / "pids.max").write_text(str(max_pids))
                    self.path, self.processes = d, f"cgroup v1 pids.max={max_pids}"
                else:
                    (d / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
                    try:
                        (d / "memory.memsw.limit_in_bytes").write_text(str(memory_mb << 20))
                    except OSError:
                        pass
                    self.memory = f"cgroup v1 memory.limit_in_bytes={memory_mb} MB"
            except OSError:
                self.dirs.remove(d)
                try:
                    d.rmdir()
                except OSError:
                    pass
        if self.dirs:
            self.version = "v1"

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def procs_file(self) -> str | None:
        return str(self.path / "cgroup.procs") if self.path else None

    def pids(self) -> list[int]:
        d = self.path or (self.dirs[0] if self.dirs else None)
        if not d:
            return []
        try:
            return [int(x) for x in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_killed(self) -> bool:
        """Whether the memory limit killed a process of this group."""
        for d in self.dirs:
            for f, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
                try:
                    for line in (d / f).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == key and int(v) > 0:
                            return True
                except (OSError, ValueError):
                    pass
        return False

    def kill_all(self) -> None:
        if not self.dirs:
            return
        if self.version == "v2":
            try:
                (self.dirs[0] / "cgroup.kill").write_text("1")
            except OSError:
                pass
        for _ in range(50):
            pids = set()
            for d in self.dirs:
                try:
                    pids |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
                except OSError:
                    pass
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        for d in reversed(self.dirs):
            try:
                d.rmdir()
            except OSError:
                pass
        self.dirs, self.path = [], None


@functools.lru_cache(maxsize=1)
def mlx_has_cuda() -> bool:
    """Whether MLX's CUDA backend is installed (an mlx-cuda-* distribution), found without importing mlx."""
    try:
        names = {(d.metadata["Name"] or "").lower().replace("_", "-") for d in importlib.metadata.distributions()}
    except Exception:  # noqa: BLE001 - a broken dist-info must not stop an evaluation
        return False
    return any(n.startswith("mlx-cuda") for n in names)


# The launcher between the evaluator and the sandbox (and, for root under bubblewrap, between bubblewrap and
# the child): argv[1] is what to do, argv[2:] what to exec. `-I -S`: no site, no environment, no cwd on path.
_LAUNCH = """
import json, os, resource, sys
s = json.loads(sys.argv[1])
for f in s.get("join", []):
    try:
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))
    except OSError as e:
        if s.get("strict"):
            sys.exit("ksearch sandbox: cannot join %s: %s" % (f, e))
for name, v in s.get("rlimits", []):
    try:
        resource.setrlimit(getattr(resource, name), (v, v))
    except (ValueError, OSError):
        pass
u = s.get("uid")
if u is not None:
    os.setgroups([])
    os.setresgid(u, u, u)
    os.setresuid(u, u, u)
if s.get("chdir"):
    os.chdir(s["chdir"])
if s.get("pdeathsig"):
    import ctypes
    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)
    if os.getppid() != s["parent"]:
        os._exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""

KINDS = {"bwrap": "bubblewrap", "unshare": "namespaces (unshare)", "none": "rlimits + process group"}


def _launcher(spec: dict) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", _LAUNCH, json.dumps(spec)]


def bwrap_path() -> str | None:
    """bubblewrap, when installed and it works here for this user (probed once)."""
    if "bwrap" not in _PROBE:
        exe = shutil.which("bwrap") if sys.platform.startswith("linux") else None
        ok = None
        if exe:
            try:
                r = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--new-session",
                                    "--die-with-parent", "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev",
                                    "true"], capture_output=True, timeout=20)
                ok = exe if r.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired):
                ok = None
        _PROBE["bwrap"] = ok
    return _PROBE["bwrap"]  # type: ignore[return-value]


def sandbox_kind(limits: Limits) -> str:
    """'bwrap', 'unshare' or 'none': the strongest sandbox available (KSEARCH_SANDBOX forces one)."""
    if not limits.isolate_network or not sys.platform.startswith("linux"):
        return "none"
    forced = os.environ.get("KSEARCH_SANDBOX", "")
    if forced == "none":
        return "none"
    if forced != "unshare" and bwrap_path():
        return "bwrap"
    if forced == "bwrap":
        raise RuntimeError("KSEARCH_SANDBOX=bwrap, but bubblewrap is not installed or does not work here "
                           "(install the `bubblewrap` package)")
    return "unshare" if _unshare_prefix() else "none"


_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
        "localtime", "os-release", "gcc")   # /etc the runtime and the simulator's compiler read


def _under_any(p: str, roots) -> bool:
    return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)


def cupti_paths() -> list[str]:
    """Where GPU timing's CUPTI lives, when present: the `cupti` package (cupti-python) and every folder
    holding a libcupti (the nvidia-cuda-cupti wheel's, the CUDA toolkit's extras/CUPTI, a folder on
    LD_LIBRARY_PATH), each also as the real folder a link points to. Found without importing anything."""
    import glob
    import importlib.util

    out: list[str] = []
    try:
        spec = importlib.util.find_spec("cupti")
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        out.append(str(loc))
    roots = [p for p in sys.path if p and os.path.isdir(p)]
    pats = [os.path.join(r, "nvidia", "*", "lib", "libcupti.so*") for r in roots]
    pats += [os.path.join(r, "nvidia", "*", "*", "lib", "libcupti.so*") for r in roots]
    for v in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(v):
            pats += [os.path.join(os.environ[v], d, "libcupti.so*") for d in ("extras/CUPTI/lib64", "lib64", "lib")]
    pats += [os.path.join(d, "libcupti.so*") for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for pat in pats:
        for lib in glob.glob(pat):
            out += [os.path.dirname(os.path.abspath(lib)), os.path.dirname(os.path.realpath(lib))]
    return list(dict.fromkeys(out))


def view_paths(scratch: Path) -> list[str]:
    """What the child sees read-only besides /usr, /etc files and its own folders: the Python install, the
    folders on sys.path (site-packages holding mlx, numpy, pydantic), ksearch's engine folder (never the
    repository or workspace around it), CUDA."""
    pkg = Path(__file__).resolve().parents[1]          # .../ksearch_engine
    keep = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.realpath(sys.executable)), str(pkg)]
    cwd = os.path.realpath(os.getcwd())
    for p in sys.path + os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if not p or os.path.realpath(p) in (cwd, str(pkg.parent)):
            continue  # the working directory or the repository root: only the engine folder is needed
        keep.append(p)
    keep += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    keep += [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    keep += cupti_paths()
    out: list[str] = []
    for p in keep:
        for q in {os.path.abspath(p), os.path.realpath(p)}:
            if os.path.exists(q) and q != "/" and q not in out and not _under_any(q, ("/usr", "/proc", "/sys", "/dev")):
                out.append(q)
    out = [q for q in out if not any(q != o and _under_any(q, [o]) for o in out)]   # outermost only
    return sorted(out)


def bwrap_args(scratch: Path, limits: Limits, *, root_uid: int | None) -> tuple[list[str], list[str]]:
    """The bubblewrap command line (up to `--`) for a child with `scratch`, and the paths it sees read-only."""
    a = [bwrap_path() or "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
         "--unshare-cgroup-try", "--new-session", "--die-with-parent", "--cap-drop", "ALL"]
    if root_uid is not None:  # root: keep only what the launcher needs to become `root_uid`, then nothing
        a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    a += ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(d):
            a += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            a += ["--ro-bind", d, d]
    a += ["--proc", "/proc", "--dev", "/dev"]
    for name in _ETC:
        a += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    tmp = str(limits.tmp_mb << 20)
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        a += ["--size", tmp, "--perms", "1777", "--tmpfs", d]
    seen = view_paths(scratch)
    made = {"/", "/tmp", "/var", "/var/tmp", "/dev", "/dev/shm", "/usr", "/etc", "/proc"}

    def parents(path: str, mode: str) -> list[str]:
        # bubblewrap makes missing folders above a mount point with the host folder's mode (a 0700 /root
        # would stop a child of another uid from reaching the Python under it): make them 0755/0711 first
        out = []
        for anc in reversed(Path(path).parents):
            if str(anc) not in made and not _under_any(str(anc), seen if path not in seen else []):
                out += ["--perms", mode, "--dir", str(anc)]
                made.add(str(anc))
        return out

    for p in seen:
        a += parents(p, "0755") + ["--ro-bind", p, p]
        if os.path.isdir(os.path.join(p, ".ksearch")):   # a store inside a bound folder stays out of sight
            a += ["--tmpfs", os.path.join(p, ".ksearch")]
    gpu = [f"/dev/{d}" for d in sorted(os.listdir("/dev")) if d.startswith(("nvidia", "dri"))] if os.path.isdir("/dev") else []
    for d in gpu:
        a += ["--dev-bind-try", d, d]
    if gpu:  # the CUDA driver reads PCI topology
        a += ["--ro-bind-try", "/sys/devices", "/sys/devices", "--ro-bind-try", "/sys/bus", "/sys/bus",
              "--ro-bind-try", "/sys/module", "/sys/module"]
    # 0511: passable, not writable, even by a user's own uid (bubblewrap's user namespace makes that uid the
    # folders' owner): the evaluator's folder in the private /tmp holds nothing a candidate may add to
    a += parents(str(scratch), "0511")
    inputs = scratch.parent / "inputs"
    if inputs.is_dir():
        a += ["--ro-bind", str(inputs), str(inputs)]
    a += ["--bind", str(scratch), str(scratch)]
    # the root of the view (bubblewrap's tmpfs, where the folders above each bound path were made) read-only:
    # for a user's own uid those folders would be writable (the home's place, the PYTHONPATH folder's place)
    a += ["--remount-ro", "/"]
    if root_uid is None:  # else the launcher changes to it once it is `root_uid` (the folder is that uid's)
        a += ["--chdir", str(scratch)]
    return a, seen


def _chown_tree(scratch: Path, uid: int) -> None:
    """The scratch folder and what the evaluator put in it before the start (the PTX cache copy) belong to the
    worker's uid: MLX writes its compiled kernels there, and cannot once privileges are dropped otherwise."""
    os.chown(scratch, uid, uid)
    for root, dirs, files in os.walk(scratch):
        for n in dirs + files:
            try:
                os.lchown(os.path.join(root, n), uid, uid)
            except OSError:
                pass


def spawn(cmd: list[str], scratch: Path, limits: Limits, *, backend: str, env_extra: dict | None = None,
          stderr_path: Path | None = None) -> tuple[subprocess.Popen, dict, PidsCgroup]:
    """Start `cmd` sandboxed in `scratch`. Returns the process, what was applied (`applied["kind"]` names the
    sandbox), and its cgroup."""
    scratch.mkdir(parents=True, exist_ok=True)
    kind = sandbox_kind(limits)
    is_root = os.geteuid() == 0 if hasattr(os, "geteuid") else False
    cg = PidsCgroup(f"ksearch-{os.getpid()}-{next(_SEQ)}", limits.nproc, limits.memory_mb) \
        if sys.platform.startswith("linux") else PidsCgroup.__new__(PidsCgroup)
    if not sys.platform.startswith("linux"):
        cg.path, cg.dirs, cg.version, cg.memory, cg.processes = None, [], None, None, None
    rl = [("RLIMIT_CPU", limits.cpu_s), ("RLIMIT_FSIZE", limits.file_mb << 20), ("RLIMIT_NOFILE", limits.nofile)]
    own_uid = _child_uid() if (is_root and limits.drop_privileges and kind != "none") else None
    nproc = None
    if own_uid is not None or (is_root and kind == "unshare" and limits.drop_privileges):
        nproc = limits.nproc
    elif not is_root:
        # RLIMIT_NPROC counts every thread of the user, not of the child: allow what the user already runs
        busy = _user_threads(os.geteuid()) if hasattr(os, "geteuid") else None
        if busy is not None:
            nproc = busy + limits.nproc
    if nproc is not None:
        rl.append(("RLIMIT_NPROC", nproc))
    as_limit = backend != "mlx-cuda" and not mlx_has_cuda()
    if as_limit:
        # CUDA runtimes reserve large virtual ranges; RLIMIT_AS breaks them. An MLX built with its CUDA backend
        # initialises CUDA on import even for a CPU evaluation, so the limit is off wherever that MLX is installed.
        rl.append(("RLIMIT_AS", limits.memory_mb << 20))
    memory = cg.memory or (f"RLIMIT_AS={limits.memory_mb} MB per process" if as_limit else "none (no cgroup; "
                           "RLIMIT_AS is off under CUDA)")
    processes = cg.processes or (f"RLIMIT_NPROC={nproc} for {'its own uid' if own_uid is not None else 'the user'}"
                                 if nproc is not None else "none (root without a cgroup)")
    env = dict(env_extra or {})
    confine: dict = {}
    seen: list[str] = []
    hide = hidden_paths(limits)
    outer = {"join": cg.procs_files(), "rlimits": rl, "pdeathsig": sys.platform.startswith("linux"),
             "parent": os.getpid()}
    if kind == "bwrap":
        uid_txt = f"uid {own_uid} (bubblewrap, no capabilities)" if own_uid is not None else \
            "the user's own uid in a user namespace of its own (bubblewrap, no capabilities, read-only view)"
        if own_uid is not None:
            _chown_tree(scratch, own_uid)
            os.chmod(scratch.parent, 0o711)  # bubblewrap copies the folders' modes: the uid must pass through
        os.chmod(scratch, 0o700)
        b, seen = bwrap_args(scratch, limits, root_uid=own_uid)
        inner = _launcher({"uid": own_uid, "chdir": str(scratch)}) if own_uid is not None else []
        full = _launcher(outer) + b + ["--"] + inner + cmd
        confine = {"prepared": uid_txt, "hide": hide, "keep": seen}
        isolation = {"network": "isolated (new network namespace)", "pid_namespace": True,
                     "view": "read-only: /usr, a few /etc files, " + ", ".join(seen) + "; writable: scratch, "
                     "private /tmp, /var/tmp, /dev/shm"}
    elif kind == "unshare":
        prefix = _unshare_prefix()
        userns = "--user" in prefix
        uid = own_uid if not userns else None
        if uid is not None:
            _chown_tree(scratch, uid)
            os.chmod(scratch, 0o700)
            os.chmod(scratch.parent, 0o711)  # others may pass through the evaluator's folder, not list it
        if own_uid is not None and uid is None:
            rl[:] = [r for r in rl if r[0] != "RLIMIT_NPROC"]
        confine = {"hide": hide, "tmp": [d for d in TMP_DIRS if os.path.isdir(d)],
                   "tmp_mb": limits.tmp_mb, "keep": needed_paths(scratch), "uid": uid, "userns": userns}
        full = _launcher(outer) + prefix + cmd
        isolation = {"network": "isolated (new network namespace)", "pid_namespace": True,
                     "view": "host file system with the home and temp folders covered"}
    else:
        full = _launcher(outer) + cmd
        isolation = {"network": "not isolated (no namespaces here)", "pid_namespace": False,
                     "view": "the whole file system (no namespaces here)"}
    applied = {"kind": KINDS[kind], "session": True, "scratch": str(scratch),
               "rlimits": [n.removeprefix("RLIMIT_").lower() for n, _ in rl], "cgroup": cg.version,
               "memory_limit": memory, "process_limit": processes, "pids_cgroup": cg.path is not None,
               "hidden": hide if kind != "none" else [], "private_tmp": list(TMP_DIRS[:3]) if kind != "none" else [],
               "env": "scrubbed", "scratch_quota": f"{limits.scratch_mb} MB, {limits.scratch_files} files", **isolation}
    if confine:
        env["KSEARCH_CONFINE"] = json.dumps(confine)
    if limits.disable_guards:
        env["KSEARCH_GUARDS_OFF"] = ",".join(limits.disable_guards)
    if limits.gpu_standin:
        env["KSEARCH_GPU_STANDIN"] = limits.gpu_standin
    err = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(full, cwd=scratch, env=scrubbed_env(scratch, env), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, start_new_session=True, close_fds=True)
    finally:
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


def _cgroup_parents() -> list[Path]:
    """Folders where this process's evaluators create their cgroups (v2 and v1), for the sweep."""
    root = PidsCgroup.ROOT
    out = []
    own = PidsCgroup._own("")
    if own is not None:
        out.append(root / own.lstrip("/"))
    for ctrl in ("pids", "memory"):
        own = PidsCgroup._own(ctrl)
        out += [root / ctrl / (own or "/").lstrip("/"), root / ctrl]
    return list(dict.fromkeys(out))


def sweep_stale(tmp: Path | None = None) -> dict:
    """Remove what evaluators that were killed (SIGKILL: no cleanup ran) left behind: their cgroups,
    killing any process still in them, and their `ksearch-eval-PID-*` folders. Returns the counts."""
    import tempfile

    out = {"cgroups": 0, "dirs": 0}
    for root, kind in [(p, "cgroups") for p in _cgroup_parents()] + [(Path(tmp or tempfile.gettempdir()), "dirs")]:
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
                cg.path, cg.dirs, cg.version = root / name, [root / name], None
                cg.remove()
                out[kind] += not (root / name).exists()
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


# -- what the child says: read incrementally, bounded, control characters removed ------------------------------
# CSI/OSC/other escape sequences, C0/C1 controls (tab and newline kept): a candidate's text must not draw on
# the user's terminal (rich's escape() keeps ESC) or in the editor.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|\x9b[0-?]*[ -/]*[@-~]"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def strip_controls(text: str) -> str:
    """`text` without terminal escape sequences, control characters or bidi overrides (tab, newline kept)."""
    return _CONTROL.sub("", text)


def clean(obj):
    """`obj` (decoded JSON) with `strip_controls` applied to every string in it."""
    if isinstance(obj, str):
        return strip_controls(obj)
    if isinstance(obj, list):
        return [clean(x) for x in obj]
    if isinstance(obj, dict):
        return {clean(k) if isinstance(k, str) else k: clean(v) for k, v in obj.items()}
    return obj


def tail_text(path: Path, lines: int = 15, max_bytes: int = 64 << 10) -> str:
    """The last `lines` lines of a file a child wrote (only its last `max_bytes` are read), cleaned."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return ""
    return "\n".join(strip_controls(data.decode("utf-8", "replace")).splitlines()[-lines:])


class Channel:
    """The child's JSON-lines reply channel, read incrementally: a line longer than `max_line` is a protocol
    error (not a reason to buffer), guard events are kept up to `max_events` (the first ones: the first is
    what gets reported), every string is cleaned of control characters, and the child closing its end or its
    request pipe is an error of the child's, never an exception of ours. `error` is the exception class the
    caller raises for a channel the child broke."""

    def __init__(self, proc: subprocess.Popen, error: type[Exception], *, max_line: int = 8 << 20,
                 max_events: int = 64):
        self.proc, self.error, self.max_line, self.max_events = proc, error, max_line, max_events
        self.max_event_chars = 300
        self.buf = bytearray()
        self.scanned = 0
        self.events: list[dict] = []
        self.dropped = 0
        self.ticked = 0.0

    def send(self, obj: dict) -> None:
        self.events.clear()
        self.dropped = 0
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError, OSError, ValueError) as e:
            code = self.proc.poll()
            if code is not None:
                raise EOFError(code) from None
            raise self.error(f"the worker closed its request pipe ({type(e).__name__})") from None

    def _line(self) -> bytes | None:
        i = self.buf.find(b"\n", self.scanned)
        if i < 0:
            self.scanned = len(self.buf)
            if len(self.buf) > self.max_line:
                raise self.error(f"the worker sent an over-long line (over {self.max_line >> 20} MB)")
            return None
        if i > self.max_line:
            raise self.error(f"the worker sent an over-long line (over {self.max_line >> 20} MB)")
        line = bytes(self.buf[:i])
        del self.buf[: i + 1]
        self.scanned = 0
        return line

    def _fill(self, deadline: float, tick=None, since: float = 0.0) -> bool:
        """Read what the child sent (one chunk, up to 64 KB) into the buffer; False once `deadline` passed.
        `tick()` runs once the read began 0.5 s ago (`since`) and at most every 0.5 s (a quick round trip is
        never slowed down by it, a flood does not run it per chunk)."""
        import select

        left = deadline - time.monotonic()
        if left <= 0:
            return False
        fd = self.proc.stdout.fileno()
        try:
            r, _, _ = select.select([fd], [], [], min(left, 0.5))
        except (OSError, ValueError) as e:
            raise self.error(f"the worker's reply channel cannot be read ({type(e).__name__})") from None
        now = time.monotonic()
        if tick is not None and now - since >= 0.5 and now - self.ticked >= 0.5:
            self.ticked = now
            tick()
        if not r:
            return True
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                raise self.error("the worker closed its reply channel and kept running") from None
            raise EOFError(self.proc.returncode)
        self.buf += chunk
        return True

    def read_bytes(self, n: int, timeout: float) -> bytes:
        """The `n` raw bytes that follow a reply line (the caller bounds `n` before asking); TimeoutError when
        they do not all come within `timeout`."""
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            if not self._fill(deadline):
                raise TimeoutError(timeout)
        data = bytes(self.buf[:n])
        del self.buf[:n]
        self.scanned = 0
        return data

    def read(self, timeout: float, tick=None) -> dict | None:
        """The next reply, or None on timeout; EOFError(returncode) when the child died; `error` on a line
        that is not a JSON object, an over-long line, or a closed reply channel of a child still running.
        `tick()` runs every 0.5 s or so once the read has waited 0.5 s (see `_fill`)."""
        since = time.monotonic()
        deadline = since + timeout
        while True:
            line = self._line()
            while line is None:
                if not self._fill(deadline, tick, since):
                    return None
                line = self._line()
            try:
                msg = json.loads(line)
            except ValueError:
                raise self.error(f"the worker sent a line that is not JSON: {strip_controls(repr(line[:80]))}") from None
            if not isinstance(msg, dict):
                raise self.error("the worker sent a reply that is not an object")
            if "event" in msg:
                if len(self.events) < self.max_events:
                    ev = {k: (clean(v[: self.max_event_chars]) if isinstance(v, str) else v) for k, v in msg.items()
                          if k in ("event", "detail")}
                    self.events.append(ev)
                else:
                    self.dropped += 1
                continue
            return clean(msg)
