"""Port to MLX over directories of CUDA code: per kernel and in total, with the failure classes ranked.

    python bench/port_corpus.py DIR [DIR...] [--json OUT.json] [--markdown OUT.md] [--jobs 2] [--timeout 300]

Every `.cu`/`.cuh` file holding a `__global__` kernel is ported with `ksearch port FILE --all` semantics
(portfile.port_file: the program's launches captured where a main() runs it, else a workload found by running the
kernel), each file in its own process with a time limit, nothing written next to the sources. A file's include
folders are found as nvcc -I would need them (the file's folder, and `Common/` or `common/` folders above it).
Kernels counted: `__global__` functions found by ksearch's parser.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_GLOBAL = re.compile(r"__global__")
# CUDA sources and headers (a .h beside its main.cu may hold the kernels: ksearch's parser reads it as CUDA)
SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".hh", ".hxx", ".inl")


def _kernel_names(path: str) -> list[str]:
    """The CUDA kernels ksearch's parser finds in a file (what every row of the table counts)."""
    from ksearch_engine.source import find_kernels
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    return [k.name for k in find_kernels(text, path).kernels if k.language == "cuda"]


def cuda_files(dirs: list[str]) -> list[Path]:
    out = []
    for d in dirs:
        p = Path(d)
        files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.suffix.lower() in SUFFIXES)
        for f in files:
            try:
                if _GLOBAL.search(f.read_text(errors="replace")):
                    out.append(f)
            except OSError:
                pass
    return out


def include_dirs_for(f: Path) -> list[str]:
    dirs = []
    for parent in list(f.parents)[:5]:
        for name in ("Common", "common", "include", "inc"):
            c = parent / name
            if c.is_dir():
                dirs.append(str(c))
    return dirs


def _port_one(args: tuple[str, float, str | None, list[str]]) -> dict:
    path, timeout, gpu_out, nvcc_includes = args
    from ksearch_engine.portfile import port_file

    t0 = time.monotonic()
    try:
        rep = port_file(path, include_dirs=include_dirs_for(Path(path)), write=False,
                        capture_timeout=min(60.0, timeout / 3))
        d = rep.model_dump(mode="json")
    except Exception as e:  # a crash of the tool itself is a finding, recorded as such
        d = {"file": path, "kernels": [], "error": f"CRASH {type(e).__name__}: {e}", "capture": {}}
        rep = None
    if gpu_out and rep is not None:   # the verified ports, ready to be checked against nvcc's originals
        try:                          # (bench/ports_vs_nvcc.py); a packaging failure is this bench's, not the port's
            from bench.ports_vs_nvcc import package
            package(Path(path), rep, Path(gpu_out), nvcc_includes)
        except Exception as e:  # noqa: BLE001
            d["gpu_package_error"] = f"{type(e).__name__}: {e}"
    d["seconds"] = time.monotonic() - t0
    return d


def classify(reason: str | None) -> str:
    """A failure's class: the construct or stage it names, without the file's particulars."""
    if not reason:
        return "unknown"
    r = reason
    for pat, cls in [
        # the construct, not a kernel's name (simple_wmma_gemm): wmma itself runs and ports (translate/wmma.py)
        (r"wmma::|\bmma\.sync|nvcuda::|wmma (?:fragment|shape|operations)|.fragment. is not a member",
         "tensor-core wmma/mma"), (r"\basm\b|inline PTX", "inline PTX"),
        (r"bytes of threadgroup memory; Apple GPUs allow", "Apple threadgroup memory (32 KB)"),
        (r"texture|tex[123]D|surf", "textures/surfaces"), (r"grid\.sync|this_grid|grid_group", "grid-wide sync"),
        (r"never launched", "program never launched it"), (r"program did not run", "program did not run"),
        (r"program stopped before launching", "program stopped before launching it"),
        (r"template kernel that no launch", "template without a launch"),
        (r"passed by value", "struct passed by value"), (r"points to .* struct", "struct buffer"),
        (r"keeps growing|does not run on a made-up|no fault-free", "no workload found"),
        (r"mismatch|does not match|differs|got .* expected", "port mismatch"),
        (r"deadlock", "sim: deadlock"), (r"timeout|timed out", "sim: timeout"), (r"race", "sim: race"),
        (r"compile|error:", "compile error"), (r"translator failed", "translator crash"),
        (r"(?-i:^CRASH )", "tool crash"), (r"killed by signal|Aborted", "sim: the original aborts (assert)"),
    ]:
        if re.search(pat, r, re.I):
            return cls
    m = re.match(r"(?:line \d+: )?([^:]{1,40}):", r)
    return m.group(1).strip() if m else r[:40]


def summarize(reports: list[dict], dirs: list[str], n_files: int, seconds: float, jobs: int) -> str:
    """The markdown summary: totals, the failure classes ranked, files that could not be read, every kernel."""
    kernels = [(d["file"], k) for d in reports for k in d["kernels"]]
    total = len(kernels)
    status = Counter(k["status"] for _, k in kernels)
    workload = Counter(k["workload"] for _, k in kernels if k["status"] == "verified")
    classes = Counter(classify(k.get("reason")) for _, k in kernels if k["status"] != "verified")
    file_errors = [d for d in reports if d.get("error") and not d["kernels"]]
    lines = [f"# Port to MLX over {', '.join(dirs)}", "",
             f"{n_files} files, {total} kernels, {seconds:.0f} s with {jobs} processes.", "",
             "| result | kernels | share |", "|---|---|---|"]
    for st, label in [("verified", "ported and verified (both ports, simulator)"),
                      ("unverified", "ported, not verified"), ("not_ported", "not ported")]:
        lines.append(f"| {label} | {status[st]} | {100 * status[st] / max(total, 1):.1f}% |")
    lines += ["", "Verified on: " + ", ".join(f"{n} {w}" for w, n in workload.most_common()) + " workloads", "",
              "| failure class | kernels |", "|---|---|"]
    lines += [f"| {c} | {n} |" for c, n in classes.most_common()]
    if file_errors:
        lines += ["", "Files that could not be read as CUDA:", ""]
        lines += [f"- {d['file']}: {d['error'][:160]}" for d in file_errors]
    lines += ["", "| file | kernel | result | workload | reason |", "|---|---|---|---|---|"]
    for f, k in kernels:
        why = (k.get("reason") or "").replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {f} | {k['kernel']} | {k['status']} | {k['workload']} | {why} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--json", help="write every file's report here")
    ap.add_argument("--markdown", help="write the summary table here")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    ap.add_argument("--gpu-out", help="also keep every verified port with its checked launch here, for "
                                      "`bench/ports_vs_nvcc.py run DIR` on an NVIDIA GPU")
    ap.add_argument("--nvcc-include", action="append", default=[],
                    help="an include folder nvcc needs on the GPU machine for every file (NVIDIA's helper headers "
                         "that the simulator stands in for), packaged with --gpu-out")
    a = ap.parse_args(argv)
    files = cuda_files(a.dirs)
    print(f"{len(files)} files with __global__ kernels", flush=True)
    t0 = time.monotonic()
    reports = []
    with mp.get_context("spawn").Pool(a.jobs, maxtasksperchild=1) as pool:
        pending = {str(f): pool.apply_async(_port_one, ((str(f), a.timeout, a.gpu_out, a.nvcc_include),)) for f in files}
        for f, res in pending.items():
            try:
                d = res.get(timeout=a.timeout + 30)
            except mp.TimeoutError:   # its kernels still count, as not verified: the rate is over every kernel
                why = f"file took over {a.timeout:.0f} s"
                d = {"file": f, "kernels": [{"kernel": k, "status": "unverified", "workload": "none", "reason": why}
                                            for k in _kernel_names(f)], "error": why, "capture": {}}
            reports.append(d)
            c = Counter(k["status"] for k in d["kernels"])
            print(f"  {c['verified']}/{len(d['kernels'])} verified  {d.get('seconds', 0):6.1f}s  {f}"
                  + (f"  [{d['error'][:80]}]" if d.get("error") else ""), flush=True)
    text = summarize(reports, a.dirs, len(files), time.monotonic() - t0, a.jobs)
    print(text[:6000])
    if a.markdown:
        Path(a.markdown).write_text(text)
    if a.json:
        Path(a.json).write_text(json.dumps(reports, indent=1))
    if a.gpu_out:
        from bench.ports_vs_nvcc import write_manifest
        print(f"{write_manifest(Path(a.gpu_out))} verified kernels packaged in {a.gpu_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
