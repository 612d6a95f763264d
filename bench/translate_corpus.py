"""The translator on real code: for every __global__ kernel under the given directories, translate it and check
the port's launch() against the original in the CPU simulator (Metal port and CUDA-backend port), on a
synthetic launch built from the parameter list (until launch captures exist: 1-D grid of 2 blocks x 64 threads,
int scalars 128, float scalars 0.5, buffers of 64K elements of the pointee type, random; ints small and
non-negative).

    python bench/translate_corpus.py ../shared/corpus [--out results.json] [--timeout 240] [--match NAME]

Per kernel: verified / mismatch / sim-error / original-failed / not-ported (construct, line) / translate-error,
then the failure classes ranked and the totals. Each file runs in its own process with a time limit.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import time
from pathlib import Path

UNPORTABLE = re.compile(r"asm|wmma|mma|texture|tex1D|tex2D|tex3D|surf|grid\.sync|this_grid|<<<|clock|__nanosleep|"
                        r"dynamic parallelism", re.I)
BLOCKS, THREADS, ELEMS = 2, 64, 65536


def synthetic_launch(tr, k, rng):
    import numpy as np

    args = {}
    for p in tr.params:
        if p["pointer"]:
            dt = p["dtype"] or "float32"
            if p.get("template_type"):
                dt = "float32"
            scalar = np.dtype("uint16" if dt == "bfloat16" else dt)
            per = max(1, (p["elem_bytes"] or scalar.itemsize) // scalar.itemsize)
            n = ELEMS * per
            if scalar.kind == "f":
                a = rng.uniform(-1, 1, n).astype(scalar)
            elif scalar.kind == "b":
                a = rng.integers(0, 2, n).astype(bool)
            elif dt == "bfloat16":
                a = (rng.uniform(-1, 1, n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            else:
                a = rng.integers(0, 8, n).astype(scalar)
            args[p["name"]] = a
        else:
            dt = p["dtype"] or "float32"
            args[p["name"]] = 0.5 if dt.startswith(("float", "bfloat")) else (True if dt == "bool" else 128)
    targs = []
    if k.template_params:
        site = next((s for s in k.launches if s.template_args and len(s.template_args) >= len(k.template_params)),
                    None)
        for i, tp in enumerate(k.template_params):
            v = site.template_args[i] if site else tp.default
            if v is None or not re.fullmatch(r"[\w\s:]+", v or ""):
                v = "float" if tp.kind == "typename" else "64"
            targs.append(v)
    smem = 4096 if any(s.dynamic for s in k.shared) else 0
    return {"args": args, "grid": (BLOCKS, 1, 1), "block": (THREADS, 1, 1), "shared_mem": smem, "template_args": targs}


def check_file(path: str, include_dirs: list[str], match: str | None) -> None:
    """Prints one JSON line per kernel of `path`."""
    import numpy as np

    from ksearch_engine.source import find_kernels
    from ksearch_engine.translate import translate_kernel
    from ksearch_engine.translate.check import check_port

    text = Path(path).read_text(errors="replace")
    parsed = find_kernels(text, path)
    for k in parsed.kernels:
        if k.language != "cuda" or (match and match not in k.name):
            continue
        row = {"file": path, "kernel": k.name, "line": k.range.start.line + 1}
        t0 = time.time()
        try:
            tr = translate_kernel(parsed, k.name, path)
        except Exception as e:
            row.update(status="translate-error", reason=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
            print(json.dumps(row), flush=True)
            continue
        errs = [i for i in tr.report if i.severity == "error"]
        hard = [i for i in errs if UNPORTABLE.search(i.construct)]
        if hard:
            i = hard[0]
            row.update(status="not-ported", reason=f"{i.construct} (line {i.line + 1}): {i.message}"[:300])
            print(json.dumps(row), flush=True)
            continue
        row["errors"] = [f"{i.construct} (line {i.line + 1}): {i.message}"[:200] for i in errs]
        try:
            launch = synthetic_launch(tr, k, np.random.default_rng(0))
            res = check_port(tr.module_text, text, k.name, launch, filename=Path(path).name,
                             include_dirs=[str(Path(path).parent)] + include_dirs, timeout_s=30.0)
        except Exception as e:
            row.update(status="harness-error", reason=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
            print(json.dumps(row), flush=True)
            continue
        row["dialects"] = dict(res.dialects)
        row["messages"] = {d: m for d, m in res.messages.items() if m}
        if res.original_error:
            row.update(status="original-failed", reason=res.original_error[:300])
        elif res.passed:
            row["status"] = "verified"
        elif any(s == "mismatch" for s in res.dialects.values()):
            row.update(status="mismatch", reason=res.message[:300])
        else:
            row.update(status="sim-error", reason=res.message[:300])
        row["seconds"] = round(time.time() - t0, 1)
        print(json.dumps(row), flush=True)


def failure_class(row: dict) -> str:
    r = row.get("reason") or ""
    st = row["status"]
    if st == "not-ported":
        return "not-ported: " + r.split(" (line")[0][:40]
    m = re.search(r"error: (.{0,60})", r)
    if m:
        msg = re.sub(r"'[^']*'", "'X'", m.group(1))
        return f"{st}: compile: {msg[:50]}"
    for key in ("deadlock", "timeout", "race", "fault", "time limit", "out of bounds", "not declared",
                "struct passed by value", "template", "does not load", "TypeError", "ValueError", "RuntimeError"):
        if key in r:
            return f"{st}: {key}"
    return f"{st}: {r[:50]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", default=["../shared/corpus"])
    ap.add_argument("--out", default=None, help="write the per-kernel rows here (JSON)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    ap.add_argument("--match", default=None, help="only kernels whose name contains this")
    ap.add_argument("--files", default=None, help="only files whose path contains this")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("-I", dest="include", action="append", default=[])
    a = ap.parse_args(argv)
    if a.one:
        check_file(a.one, a.include, a.match)
        return 0
    files = sorted({p for d in a.dirs for ext in ("*.cu", "*.cuh") for p in Path(d).rglob(ext)})
    files = [f for f in files if "__global__" in f.read_text(errors="replace")
             and (not a.files or a.files in str(f))]
    includes = a.include + [str(p) for d in a.dirs for p in Path(d).rglob("Common") if p.is_dir()]
    rows = []
    for f in files:
        cmd = [sys.executable, __file__, "--one", str(f)] + [x for i in includes for x in ("-I", i)]
        if a.match:
            cmd += ["--match", a.match]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            out, err = p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = f"file timed out after {a.timeout:.0f} s"
        got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        rows += got
        if not got or (err and "timed out" in err):
            rows.append({"file": str(f), "kernel": "*", "status": "harness-error",
                         "reason": " ".join((err or "no output").split())[-300:]})
        for r in got:
            print(f"{r['status']:16} {Path(r['file']).name}:{r.get('line', '?')} {r['kernel']}"
                  + (f"  -- {r.get('reason', '')[:160]}" if r["status"] != "verified" else ""), flush=True)
    kernels = [r for r in rows if r["kernel"] != "*"]
    counts = collections.Counter(r["status"] for r in kernels)
    per_dialect = collections.Counter(d for r in kernels for d, s in (r.get("dialects") or {}).items()
                                      if s == "passed")
    classes = collections.Counter(failure_class(r) for r in rows if r["status"] != "verified")
    print(f"\n{len(kernels)} kernels in {len(files)} files: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()))
    print(f"translated (a module came out): {sum(1 for r in kernels if r['status'] != 'translate-error')}; "
          f"verified: Metal port {per_dialect['metal']}, CUDA-backend port {per_dialect['cuda']}, "
          f"both {counts['verified']}")
    print("failure classes:")
    for c, n in classes.most_common():
        print(f"  {n:4}  {c}")
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
