"""`ksearch optimize FILE --kernel K` on the CPU (simulator backend) over kernels whose port was verified in a sweep.

    python bench/optimize_cpu_sweep.py [--sweep /tmp/sweep5.json ...] [-n 30] [--per-file 2] [--budget 6]
                                       [--timeout 240] [--jobs 1] [--scratch DIR] [--json OUT.json]

The sweep is the JSON that `python bench/port_corpus.py DIRS --json OUT` writes (a list of {file, kernels: [{kernel,
status, ...}]}). A deterministic sample of up to N kernels whose port was "verified" is taken, spread over files (at
most --per-file per file, files in an order fixed by a hash of their path). Each kernel's folder (and the include
folders port_corpus gives it) is copied to a scratch folder, never written next to the corpus, and
`ksearch optimize COPY --kernel K --budget B --backend sim --max-seconds 0.7*TIMEOUT --json --store SCRATCH/ks.db` runs in its own process with a
time limit. Collected per kernel: exit status, candidates that passed, whether a candidate other than the root (the
user's kernel, ported) was offered, whether the offered best is a drop-in replacement of the root (same PARAMS and
launch() parameters), the failure message, seconds. Printed: a table and the failure classes ranked.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MAX_COPY_BYTES = 64 << 20     # a data file bigger than this is not copied (the program would not find it)


def _key(s: str) -> str:
    return hashlib.sha1(s.encode()).hexdigest()


def pick(reports: list[dict], n: int, per_file: int) -> list[tuple[str, str]]:
    """Up to n (file, kernel) pairs with a verified port: round-robin over files in hash order, so the sample is
    spread over folders and the same for the same sweep."""
    by_file: dict[str, list[str]] = {}
    for d in reports:
        ks = sorted({k["kernel"] for k in d.get("kernels", []) if k.get("status") == "verified"}, key=_key)
        if ks:
            by_file.setdefault(d["file"], [])
            by_file[d["file"]] += [k for k in ks if k not in by_file[d["file"]]]
    files = sorted(by_file, key=_key)
    out: list[tuple[str, str]] = []
    for rnd in range(per_file):
        for f in files:
            if len(out) >= n:
                return out
            if rnd < len(by_file[f]):
                out.append((f, by_file[f][rnd]))
    return out


def _copy_tree(src: Path, dst: Path) -> None:
    def ignore(folder, names):
        skip = []
        for nm in names:
            p = Path(folder) / nm
            try:
                if p.is_file() and p.stat().st_size > MAX_COPY_BYTES or nm in (".git", ".ksearch"):
                    skip.append(nm)
            except OSError:
                skip.append(nm)
        return skip
    if not dst.exists():
        shutil.copytree(src, dst, ignore=ignore, symlinks=True)


def stage(file: str, scratch: Path, root: Path) -> tuple[Path, list[str]]:
    """Copy the file's folder and its include folders under scratch, at the same places relative to root (so
    relative #includes still resolve); returns the copied file and the copied include folders."""
    from bench.port_corpus import include_dirs_for
    f = Path(file).resolve()
    _copy_tree(f.parent, scratch / f.parent.relative_to(root))
    incs = []
    for inc in include_dirs_for(f):
        ip = Path(inc).resolve()
        try:
            rel = ip.relative_to(root)
        except ValueError:
            continue
        _copy_tree(ip, scratch / rel)
        incs.append(str(scratch / rel))
    return scratch / f.relative_to(root), incs


def launch_signature(module_text: str | None) -> tuple | None:
    """(PARAMS, launch()'s parameter names) of an MLX module, read without running it; None if not found."""
    if not module_text:
        return None
    try:
        tree = ast.parse(module_text)
    except SyntaxError:
        return None
    params = None
    args = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PARAMS" for t in node.targets):
            try:
                params = ast.literal_eval(node.value)
            except ValueError:
                params = ast.dump(node.value)
        if isinstance(node, ast.FunctionDef) and node.name == "launch":
            a = node.args
            args = tuple(x.arg for x in a.posonlyargs + a.args) + ((("*" + a.vararg.arg),) if a.vararg else ()) + \
                tuple(x.arg for x in a.kwonlyargs)
    if params is None and args is None:
        return None
    return (json.dumps(params, sort_keys=True, default=str), args)


def _last_message(stdout: str, stderr: str) -> str:
    msg = ""
    for line in stdout.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and e.get("type") in ("error", "done") and e.get("message"):
            if e.get("type") == "error" or e.get("status") not in (None, "done"):
                msg = e["message"]
    if not msg:
        tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        msg = " | ".join(tail[-3:]) if tail else ""
    return msg


def run_one(file: str, kernel: str, idx: int, scratch: Path, root: Path, budget: int, timeout: float) -> dict:
    from ksearch_engine.store import Store
    work = scratch / f"{idx:02d}"
    row = {"file": file, "kernel": kernel, "rc": None, "passed": 0, "candidates": 0, "beyond_root": False,
           "drop_in": None, "message": "", "seconds": 0.0}
    t0 = time.monotonic()
    try:
        copy, incs = stage(file, work, root)
    except OSError as e:
        row.update(rc=-1, message=f"could not copy the folder: {e}")
        return row
    db = work / "ks.db"
    cmd = [sys.executable, "-m", "ksearch_engine.cli", "--json", "--store", str(db), "optimize", str(copy),
           "--kernel", kernel, "--budget", str(budget), "--backend", "sim",
           "--max-seconds", str(max(10.0, timeout * 0.7))]   # the search's own time budget ends it before the kill
    for i in incs:
        cmd += ["-I", i]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        p = subprocess.run(cmd, cwd=str(copy.parent), capture_output=True, text=True, timeout=timeout, env=env,
                           start_new_session=True)
        row["rc"] = p.returncode
        row["message"] = "" if p.returncode == 0 else _last_message(p.stdout, p.stderr)
        if p.returncode == 0 and "Traceback" in p.stderr:
            row["message"] = "traceback on stderr: " + p.stderr.strip().splitlines()[-1][:200]
        if "Traceback (most recent call last)" in p.stdout + p.stderr:
            row["traceback"] = True
    except subprocess.TimeoutExpired:
        row.update(rc=124, message=f"timeout: over {timeout:.0f} s")
    row["seconds"] = round(time.monotonic() - t0, 1)
    if db.exists():
        try:
            st = Store(str(db))
            runs = st.runs(limit=5)
            if runs:
                rid = runs[0].id
                cands = st.candidates(rid)
                row["candidates"] = len(cands)
                row["passed"] = sum(c.status == "passed" for c in cands)
                row["statuses"] = dict(Counter(c.status for c in cands))
                offers = st.offers(rid)
                root_c = st.original(rid)
                row["beyond_root"] = bool(offers)
                if offers:
                    rs = launch_signature(root_c.target_text or root_c.source) if root_c else None
                    bs = launch_signature(offers[0].target_text or offers[0].source)
                    row["drop_in"] = rs is not None and rs == bs
                    if not row["drop_in"]:
                        row["drop_in_detail"] = {"root": rs, "best": bs}
                fails = [c.message for c in cands if c.status != "passed" and c.message]
                if fails:
                    row["candidate_failures"] = dict(Counter(classify(m) for m in fails))
                    row["candidate_failure_example"] = fails[0][:300]
                if not row["message"] and runs[0].status != "done":
                    row["message"] = runs[0].message or runs[0].status
        except Exception as e:  # the store is the tool's; a failure to read it is a finding too
            row["message"] = (row["message"] + f" [store: {type(e).__name__}: {e}]").strip()
    return row


def classify(msg: str | None) -> str:
    if not msg:
        return "unknown"
    for pat, cls in [(r"^timeout", "timeout"), (r"Traceback|Error:|Exception", "raw traceback / crash"),
                     (r"Cannot cast|dtype", "dtype / cast"), (r"mismatch|does not match|differs", "mismatch"),
                     (r"deadlock", "sim: deadlock"), (r"race", "sim: race"), (r"compile", "compile error"),
                     (r"no workload|made-up", "no workload"), (r"launch", "launch / task")]:
        if re.search(pat, msg, re.I):
            return cls
    m = re.match(r"([^:]{1,50}):", msg)
    return m.group(1).strip() if m else msg[:50]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", action="append", help="port sweep JSON (repeat; default /tmp/sweep5.json)")
    ap.add_argument("-n", type=int, default=30)
    ap.add_argument("--per-file", type=int, default=2)
    ap.add_argument("--budget", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--jobs", type=int, default=1, help="kernels at once (keep 1 on a shared machine)")
    ap.add_argument("--scratch", help="where the copies go (default: a new temporary folder)")
    ap.add_argument("--only", help="run only kernels whose file or name contains this")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    reports = []
    for s in a.sweep or ["/tmp/sweep5.json"]:
        reports += json.loads(Path(s).read_text())
    sample = pick(reports, a.n, a.per_file)
    if a.only:
        sample = [(f, k) for f, k in sample if a.only in f or a.only == k]
    if not sample:
        print("no verified kernel in the sweep")
        return 1
    root = Path(os.path.commonpath([str(Path(f).resolve().parent) for f, _ in sample]))
    if len(sample) == 1:
        root = Path(sample[0][0]).resolve().parents[1]
    scratch = Path(a.scratch or tempfile.mkdtemp(prefix="ks_optsweep_"))
    scratch.mkdir(parents=True, exist_ok=True)
    print(f"{len(sample)} kernels, scratch {scratch}", flush=True)
    rows = []
    t0 = time.monotonic()
    if a.jobs <= 1:
        for i, (f, k) in enumerate(sample):
            r = run_one(f, k, i, scratch, root, a.budget, a.timeout)
            rows.append(r)
            print(f"  [{i + 1:2}/{len(sample)}] rc={r['rc']} passed={r['passed']}/{r['candidates']} "
                  f"beyond_root={'yes' if r['beyond_root'] else 'no'} drop_in={r['drop_in']} {r['seconds']:6.1f}s "
                  f"{k} @ {f}" + (f"\n      {r['message'][:300]}" if r["message"] else ""), flush=True)
    else:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(a.jobs) as ex:
            futs = [ex.submit(run_one, f, k, i, scratch, root, a.budget, a.timeout) for i, (f, k) in enumerate(sample)]
            rows = [fu.result() for fu in futs]
    n = len(rows)
    ok = sum(r["passed"] >= 1 for r in rows)
    beyond = sum(r["beyond_root"] for r in rows)
    not_drop = [r for r in rows if r["drop_in"] is False]
    print()
    print(f"{'kernel':32} {'rc':>4} {'pass':>6} {'beyond':>6} {'drop-in':>7} {'s':>6}  file")
    for r in rows:
        print(f"{r['kernel'][:32]:32} {str(r['rc']):>4} {r['passed']:>3}/{r['candidates']:<2} "
              f"{'yes' if r['beyond_root'] else 'no':>6} {str(r['drop_in']):>7} {r['seconds']:6.1f}  {r['file']}")
    print()
    print(f"optimize returned >=1 checked candidate: {ok}/{n}; offered a candidate beyond the root: {beyond}/{n}; "
          f"offered best not a drop-in replacement: {len(not_drop)}; {time.monotonic() - t0:.0f} s")
    classes = Counter(classify(r["message"]) for r in rows if r["rc"] != 0 or r["passed"] == 0)
    if classes:
        print("\nfailure classes (runs):")
        for c, k in classes.most_common():
            ex = next(r for r in rows if (r["rc"] != 0 or r["passed"] == 0) and classify(r["message"]) == c)
            print(f"  {k:3}  {c}   e.g. {ex['kernel']}: {ex['message'][:200]}")
    cf = Counter()
    for r in rows:
        cf.update(r.get("candidate_failures", {}))
    if cf:
        print("\ncandidate failures inside runs (classes):")
        for c, k in cf.most_common():
            print(f"  {k:3}  {c}")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "checked": ok, "beyond_root": beyond, "sample": n,
                                            "not_drop_in": len(not_drop)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
