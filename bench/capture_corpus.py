"""Sweep: launch capture (ksearch_engine.sim.capture) on every .cu file with a main() in the public corpus.

    python bench/capture_corpus.py [--corpus /work/shared/corpus] [--timeout 20] [--only SUBSTR] [--json out.json]

Runs each program with no arguments (Rodinia programs mostly need argv or input files: they show up as
"needs argv/input"; no data is faked), with cuda-samples' Common/ as an include folder. Prints one row per
program and a summary: programs compiled, ran (exit 0 or stopped at a budget), kernels with at least one
launch recorded, and the most common failure causes.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ksearch_engine.sim.capture import capture_program  # noqa: E402

_MAIN = re.compile(r"^\s*(?:int|void)\s+main\s*\(", re.M)


def programs(corpus: Path) -> list[Path]:
    roots = [corpus / "rodinia" / "cuda", corpus / "cuda-samples" / "Samples"]
    out = []
    for r in roots:
        for p in sorted(r.rglob("*.cu")):
            try:
                if _MAIN.search(p.read_text(errors="replace")):
                    out.append(p)
            except OSError:
                pass
    return out


def cause(cap) -> str:
    """A short class of what stopped a capture."""
    if cap.status == "ok":
        return "ok"
    e = cap.error or ""
    for n in cap.notes:
        if n.kind == "gpu_only" and n.message.split(" ")[0] in e:
            return "gpu_only: " + re.sub(r"\s*\(.*", "", n.message.split(" only runs")[0].split(" cannot run")[0])
    m = re.search(r"ksim-capture: \S+ \(([^)]*)\)", e) or re.search(r": \S+ \(([^)]+)\) cannot run", e)
    if m:
        return f"unsupported header: {m.group(1)}"
    if "header" in e and "not found" in e:
        return "missing header: " + re.search(r"header (\S+)", e).group(1)
    if "link error" in e:
        return "link: function defined in another source file"
    if "before any kernel launch" in e:
        return "needs argv/input (exited before a launch)"
    if "time budget" in e:
        return "time budget"
    if "out-of-bounds" in e or "memory fault" in e:
        return "memory fault (kernel)" if "in kernel" in e else "memory fault (host)"
    if "does this compile with nvcc" in e:
        msg = e.split(": ", 1)[1].split(" — ")[0] if ": " in e else e
        msg = re.sub(r"‘[^’]*’", "‘X’", msg)
        return "compile: " + msg[:70]
    return (e.split(" — ")[0].split(": ", 1)[-1])[:70]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="/work/shared/corpus")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    corpus = Path(a.corpus)
    common = corpus / "cuda-samples" / "Common"
    rows = []
    t0 = time.monotonic()
    progs = [p for p in programs(corpus) if a.only in str(p)]
    print(f"{'program':58} {'status':8} {'launches':>8} {'kernels':>7}  cause", flush=True)
    for p in progs:
        wd = Path(tempfile.mkdtemp(prefix="capsweep-"))
        cap = capture_program(p, include_dirs=[common], timeout_s=a.timeout, workdir=wd, byte_budget=16 << 20)
        compiled = not (cap.status == "failed" and not cap.launches and cap.exit_code is None)
        ran = cap.status in ("ok", "partial") or bool(cap.launches)
        kernels = sorted({ln.kernel for ln in cap.launches if ln.sim_error is None})
        row = dict(program=str(p.relative_to(corpus)), status=cap.status, compiled=compiled, ran=ran,
                   launches=sum(cap.launch_counts.values()), kernels=kernels, cause=cause(cap),
                   error=cap.error, seconds=cap.seconds)
        rows.append(row)
        print(f"{row['program'][-58:]:58} {cap.status:8} {row['launches']:8d} {len(kernels):7d}  "
              f"{'' if cap.status == 'ok' else row['cause']}", flush=True)
    n = len(rows)
    comp = sum(r["compiled"] for r in rows)
    ran = sum(r["ran"] for r in rows)
    ok = sum(r["status"] == "ok" for r in rows)
    nk = sum(len(r["kernels"]) for r in rows)
    print(f"\n{n} programs: {comp} compiled, {ran} ran with launches recorded or finished ({ok} ok), "
          f"{nk} kernels with a launch recorded; {time.monotonic() - t0:.0f} s")
    causes = collections.Counter(r["cause"] for r in rows if r["status"] != "ok")
    print("top causes:")
    for c, k in causes.most_common(15):
        print(f"  {k:3d}  {c}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
