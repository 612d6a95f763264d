"""On an NVIDIA GPU: the CUDA-backend ports of verified kernels against their originals compiled by nvcc.

Two steps, because the GPU machine sees only what is carried to it:

    python bench/port_corpus.py DIR... --gpu-out .portgpu          # here: the corpus sweep keeps the verified
                                                                   # ports with the launch each was checked on
    python bench/ports_vs_nvcc.py run .portgpu [--json OUT]        # there: nvcc + cupy for the original,
                                                                   # mx.fast.cuda_kernel for the port

The sweep writes (`package`), per verified kernel, its port module, the launch (grid, block, shared memory, template
arguments, every argument's contents before the launch) and a copy of the original source with the headers it
includes (so nvcc finds them there). `run` compiles each original file to a cubin for sm_90 (the file as it is,
else with its host code blanked), launches the kernel through cupy on the same arguments, runs the port's
`launch()` on MLX's CUDA backend, and compares every buffer the kernel writes with translate.check.compare.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MAX_LAUNCH_BYTES = 4 << 20   # before compression (npz)
ROW_MARK = "KSEARCH_ROW "     # run-one's result line (the kernels' own printf output goes to the same stdout)


# ------------------------------------------------------------------------------------------- prepare (CPU)
def _copy_tree_for(src: Path, dest: Path, include_dirs: list[str], shared: Path, text: str | None = None) -> list[str]:
    """The source file and the headers beside it copied to dest; other include folders copied once under
    `shared` (for all kernels). Returns the -I folders, relative to the manifest's folder."""
    import hashlib

    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest / src.name)
    for f, rel in _local_includes(src, text):   # `#include "define.c"`, `"../main.h"`: where the file finds them
        target = (dest / rel).resolve()
        if dest.resolve().parent in target.parents:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, target)
    incs = []
    for d in include_dirs:
        dd = Path(d)
        if dd.resolve() == src.parent.resolve():
            for h in dd.iterdir():
                if h.suffix in (".h", ".cuh", ".hpp", ".cu", ".inc") and h.is_file():
                    shutil.copy(h, dest / h.name)
            continue
        name = f"{dd.name}-{hashlib.sha256(str(dd.resolve()).encode()).hexdigest()[:8]}"
        target = shared / name
        if not target.exists() and dd.is_dir():
            shutil.copytree(dd, target, ignore=lambda folder, names: [
                n for n in names if not (Path(folder, n).is_dir() or n.endswith((".h", ".cuh", ".hpp", ".inc")))])
        incs.append(f"{shared.name}/{name}")
    return incs


def _local_includes(src: Path, text: str | None = None) -> list[tuple[Path, str]]:
    """(file, its path relative to src's folder) of every local `#include "..."` reachable from src (or from
    `text`, src as its program prefixes it), whatever its suffix (rodinia's `#include "define.c"`) and wherever it
    lies (`"../main.h"`)."""
    import os
    out, todo, seen = [], [src], {src.resolve()}
    while todo:
        cur = todo.pop()
        try:
            body = text if cur is src and text is not None else cur.read_text(errors="replace")
        except OSError:
            continue
        for inc in re.findall(r'^[ \t]*#\s*include\s*"([^"]+)"', body, re.M):
            f = cur.parent / inc
            if f.is_file() and f.resolve() not in seen:
                seen.add(f.resolve())
                out.append((f, os.path.relpath(f.resolve(), src.parent.resolve())))
                todo.append(f)
    return out


def _depth_up(src: Path, text: str | None = None) -> int:
    """How many folders above src's its local includes reach (`../main.h`: 1)."""
    return max((len(re.match(r"(?:\.\./)*", rel).group(0)) // 3 for _, rel in _local_includes(src, text)),
               default=0)


def package(f: Path, rep, out: Path, extra_includes: list[str] = ()) -> list[dict]:
    """One file's verified kernels made ready for the GPU machine: per kernel its port module, the launch it was
    checked on (grid, block, shared memory, template arguments, every argument before the launch) and a copy of
    the original source with the headers it includes. Returns the manifest entries (a launch over what can be
    carried is an entry that says so)."""
    from bench.port_corpus import include_dirs_for
    from ksearch_engine.source import find_kernels

    verified = [v for v in rep.kernels if v.status == "verified"]
    if not verified:
        return []
    f = Path(f)
    out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", str(f.relative_to(f.parents[2])))[:80]
    # nvcc compiles the file as its program does: a file the program #includes sees the includers' text first
    # (their #defines, typedefs and headers: rodinia's `fp`, NUMBER_THREADS), as the ports did
    from ksearch_engine.portfile import with_program_prefix
    text = with_program_prefix(f, f.read_text(errors="replace"))
    # the file sits as deep under its folder as its includes reach up (`../main.h` lands in the folder itself)
    sub = "src" + "/up" * _depth_up(f, text)
    rel_incs = _copy_tree_for(f, out / slug / sub, [str(f.parent)] + include_dirs_for(f) + list(extra_includes),
                              out / "includes", text)
    (out / slug / sub / f.name).write_text(text)
    parsed = find_kernels(f.read_text(errors="replace"), str(f))
    entries = []
    for v in verified:
        k = parsed.kernel(v.kernel)
        entry = {"file": str(f), "dir": slug, "src": f"{slug}/{sub}/{f.name}", "includes": rel_incs,
                 "kernel": v.kernel, "workload": v.workload, "module": f"{slug}/{v.kernel}_port.py",
                 "namespaces": [n for n in (k.namespaces if k is not None else []) if n]}
        entries.append(entry)
        # the smallest launch the port was checked on: what travels to the GPU machine is limited
        rec, args = min(v.checked, key=lambda ra: sum(a.nbytes for a in ra[1].values() if isinstance(a, np.ndarray)))
        ctypes = {a.name: a.ctype for a in rec.args}
        total = sum(a.nbytes for a in args.values() if isinstance(a, np.ndarray))
        if "'lifted':" in v.module_text or '"lifted":' in v.module_text:
            # a struct's pointer field the ports take as a buffer (translate/lift.py): the original reads the
            # program's own pointers from the struct, which this harness does not rebuild on the GPU
            entry["skipped"] = "a struct's pointer field is a buffer of its own in the port: not carried"
            continue
        if total > MAX_LAUNCH_BYTES:
            entry["skipped"] = f"launch of {total >> 20} MB: over what is carried"
            continue
        (out / entry["module"]).write_text(v.module_text)
        arg_meta = []
        for p in k.params:
            if p.name not in args:
                # a parameter the launch left to its default (`int* partial = NULL`): nvcc's kernel gets the default
                # (a null pointer, or the number), the port's launch() None or the same number
                val = _default_of(p)
                if val is _NO_DEFAULT:
                    entry["skipped"] = f"argument {p.name} not recorded and without a default"
                    break
                arg_meta.append({"name": p.name, "kind": "null" if p.pointer else "scalar", "value": val,
                                 "ctype": ctypes.get(p.name, p.type)})
                continue
            val = args[p.name]
            if isinstance(val, np.ndarray):
                name = f"{slug}/{v.kernel}.{p.name}.npz"
                np.savez_compressed(out / name, a=val)
                arg_meta.append({"name": p.name, "kind": "buffer", "npy": name, "ctype": ctypes.get(p.name, p.type)})
            elif isinstance(val, bytes):
                arg_meta.append({"name": p.name, "kind": "struct", "hex": val.hex(), "ctype": ctypes.get(p.name)})
            else:
                arg_meta.append({"name": p.name, "kind": "scalar", "value": val, "ctype": ctypes.get(p.name, p.type)})
        if entry.get("skipped"):
            continue
        entry.update(grid=list(rec.grid), block=list(rec.block), shared_mem=rec.shared_mem,
                     template_args=list(rec.template_args or []), args=arg_meta)
    (out / slug / "entries.json").write_text(json.dumps(entries, indent=1))
    return entries


_NO_DEFAULT = object()


def _default_of(p):
    """A parameter's default argument as a launch passes it: None for a null pointer, the number for a scalar
    (translate.launch.default_value), else _NO_DEFAULT."""
    text = (p.text or "").split("//")[0]
    if "=" not in text:
        return _NO_DEFAULT
    if p.pointer:
        return None if re.fullmatch(r"\s*(NULL|nullptr|0)\s*", text.split("=", 1)[1]) else _NO_DEFAULT
    from ksearch_engine.translate.launch import default_value
    v = default_value(p, [])
    return _NO_DEFAULT if v is None else v


def write_manifest(out: Path) -> int:
    """manifest.json from every packaged file's entries.json (files packaged by separate processes)."""
    manifest = []
    for e in sorted(out.glob("*/entries.json")):
        manifest += json.loads(e.read_text())
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return len(manifest)


def trim(out: Path, budget_mb: float) -> tuple[int, int]:
    """What travels to the GPU machine is limited (the device tool's carry, shared with MLX's wheels): the
    launches carried smallest first until `budget_mb` of argument files; the others' files are removed and their
    entries say so (skipped, with the size). Returns (kept, skipped)."""
    manifest = json.loads((out / "manifest.json").read_text())
    sized = []
    for i, e in enumerate(manifest):
        if e.get("skipped"):
            continue
        files = [out / a["npy"] for a in e.get("args", []) if a.get("kind") == "buffer"]
        sized.append((sum(f.stat().st_size for f in files if f.exists()), i, files))
    left, kept, skipped = budget_mb * (1 << 20), 0, 0
    for size, i, files in sorted(sized):
        if size <= left:
            left -= size
            kept += 1
            continue
        for f in files:
            f.unlink(missing_ok=True)
        manifest[i]["skipped"] = f"launch of {size >> 10} KB compressed: over what this run carries ({budget_mb:g} MB)"
        skipped += 1
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return kept, skipped


# ----------------------------------------------------------------------------------------------- run (GPU)
def _scalar(ctype: str, value):
    """The kernel argument as nvcc's kernel takes it (C type sizes from translate.launch.POINTEE)."""
    from ksearch_engine.translate.launch import POINTEE, norm_type
    dt = POINTEE.get(norm_type(ctype or "int"), (None,))[0]
    if dt is None or dt == "bfloat16":
        return (np.float32 if isinstance(value, float) else np.int32)(value)
    return np.dtype(dt).type(value)


def _cubin(entry: dict, root: Path, tmp: Path) -> tuple[Path | None, str]:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    src = root / entry["src"]
    incs = [f"-I{src.parent}", *[f"-I{root / i}" for i in entry["includes"]]]
    text = src.read_text(errors="replace")
    targs = entry.get("template_args") or []
    qual = "::".join([*entry.get("namespaces", []), entry["kernel"]])   # a kernel in a namespace (dwt_cuda::)
    inst = f"\nvoid* ksearch_instantiate_{entry['kernel']} = (void*)&{qual}<{', '.join(targs)}>;\n" \
        if targs else ""
    cubin = tmp / (src.stem + "_" + entry["kernel"] + ".cubin")
    errs = []
    from ksearch_engine.sim.preprocess import strip_host_code
    for variant, body in (("as is", text + inst), ("host code blanked", strip_host_code(text) + inst)):
        cu = tmp / f"{src.stem}_{entry['kernel']}.cu"
        cu.write_text(body)
        r = subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-O2", "-w", *incs, "-o", str(cubin), str(cu)],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return cubin, variant
        errs.append(f"{variant}: " + " ".join(r.stderr.split())[:300])
    return None, " | ".join(errs)


def run(root: Path, out_json: Path | None, jobs: int = 6, only: list[int] | None = None) -> int:
    """Each kernel in its own process (a fault in one original poisons its CUDA context, not the others')."""
    from concurrent.futures import ThreadPoolExecutor

    manifest = json.loads((root / "manifest.json").read_text())
    idx = [i for i in range(len(manifest)) if only is None or i in only]

    def one(i: int) -> dict:
        try:
            r = subprocess.run([sys.executable, __file__, "run-one", str(root), str(i)], capture_output=True,
                               text=True, timeout=120)
            line = [x for x in r.stdout.splitlines() if x.startswith(ROW_MARK)]   # a kernel may printf
            if line:
                return json.loads(line[-1][len(ROW_MARK):])
            return {"file": manifest[i]["file"], "kernel": manifest[i]["kernel"], "status": "error",
                    "why": (r.stderr.strip().splitlines() or ["no output"])[-1][:300]}
        except subprocess.TimeoutExpired:
            return {"file": manifest[i]["file"], "kernel": manifest[i]["kernel"], "status": "error",
                    "why": "over 120 s"}

    from concurrent.futures import as_completed

    rows = []
    with ThreadPoolExecutor(jobs) as pool:
        for fut in as_completed([pool.submit(one, i) for i in idx]):
            rows.append(fut.result())
            if out_json:   # as it goes: a run stopped at its time limit still says what it checked
                out_json.write_text(json.dumps({"device": "see gpu.txt", "partial": True, "rows": rows}, indent=1))
    for row in rows:
        print(f"{row['status']:<12} {row['kernel']:<32} {Path(row['file']).name}  {row.get('why') or ''}"[:220])
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("totals:", json.dumps(counts))
    if out_json:
        out_json.write_text(json.dumps({"device": _device(), "counts": counts, "rows": rows}, indent=1))
    return 0


def _entry_symbol(syms: str, kernel: str, targs: list[str] = ()) -> str | None:
    """The kernel's entry in `cuobjdump -symbols` output: a function symbol (STT_FUNC), never a variable of it
    (a template kernel's static __shared__ array is mangled with the kernel's name too)."""
    lines = [ln.split() for ln in syms.splitlines() if "STT_FUNC" in ln and ln.split()]
    funcs = [ln[-1] for ln in lines if "STO_ENTRY" in ln] or [ln[-1] for ln in lines]   # kernels are entries
    # Itanium mangling writes the name with its length in front (_Z7reduce0IiEv..., _ZN2ns6kernelEv)
    mangled = [f for f in funcs if f.startswith("_Z") and re.search(rf"(?<!\d){len(kernel)}{re.escape(kernel)}", f)]
    exact = [f for f in funcs if f == kernel]
    if len(mangled) > 1 and targs:   # several instantiations (the host code launches more than one): the one
        want = [_norm_targ(t) for t in targs]   # with the launch's template arguments, read from the demangled name
        names = _demangle(mangled)
        for f, d in zip(mangled, names):
            m = re.search(rf"\b{re.escape(kernel)}<(.*)>\s*\(", d)
            if m and [_norm_targ(t) for t in _split_targs(m.group(1))] == want:
                return f
    return (exact or mangled or [None])[0]


def _demangle(names: list[str]) -> list[str]:
    tool = shutil.which("cu++filt") or "/usr/local/cuda/bin/cu++filt"
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=30).stdout
        got = out.splitlines()
        return got if len(got) == len(names) else names
    except (OSError, subprocess.TimeoutExpired):
        return names


def _split_targs(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += (ch == "<") - (ch == ">")
        cur += ch
    return out + [cur]


def _norm_targ(t: str) -> str:
    """A template argument as text to compare: 1U, 1u, (unsigned int)1 and 1 alike; types without spaces."""
    t = " ".join(str(t).split())
    m = re.fullmatch(r"\(?[a-z ]*\)?\s*(-?\d+)[uUlL]*", t)
    if m:
        return m.group(1)
    return {"true": "1", "false": "0"}.get(t, t.replace(" ", ""))


def _is_texture(param: dict) -> bool:
    return bool(param.get("texture") or param.get("surface")) or "TextureObject" in (param.get("ctype") or "") \
        or "SurfaceObject" in (param.get("ctype") or "")


def run_one(root: Path, index: int) -> dict:
    """One kernel: nvcc's original launched through cupy twice (elements where its two runs disagree depend on
    the order threads run in, atomics or clocks, and are left out of the comparison, counted), then the port's
    launch() on MLX's CUDA backend, every written buffer and written __device__ symbol compared."""
    import cupy as cp
    import mlx.core as mx

    from ksearch_engine.translate.check import compare

    manifest = json.loads((root / "manifest.json").read_text())
    tmp = root / "_build" / str(index)
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    for e in manifest[index:index + 1]:
        row = {"file": e["file"], "kernel": e["kernel"], "workload": e["workload"]}
        rows.append(row)
        if e.get("skipped"):
            row.update(status="skipped", why=e["skipped"])
            continue
        try:
            ns: dict = {}
            exec(compile((root / e["module"]).read_text(), e["module"], "exec"), ns)
            params = {q["name"]: q for q in ns.get("PARAMS", [])}
            if any(_is_texture(q) for q in params.values()):
                row.update(status="skipped", why="a texture or surface object: the program's host code builds it "
                                                 "(sampler, array); this harness does not rebuild it")
                continue
            cubin, how = _cubin(e, root, tmp)
            if cubin is None:
                row.update(status="nvcc_failed", why=how)
                continue
            syms = subprocess.run(["cuobjdump", "-symbols", str(cubin)], capture_output=True, text=True).stdout
            name = _entry_symbol(syms, e["kernel"], e.get("template_args") or [])
            if name is None:
                row.update(status="nvcc_failed", why="kernel symbol not found in the cubin")
                continue
            mod = cp.RawModule(path=str(cubin))
            fn = mod.get_function(name)
            host = {}
            for a in e["args"]:
                if a["kind"] == "buffer":
                    host[a["name"]] = _load(root / a["npy"])
                elif a["kind"] == "struct":
                    row.update(status="skipped", why="struct passed by value")
                    break
            if row.get("status"):
                continue

            def original_run():
                dev, cargs = {}, []
                for a in e["args"]:
                    if a["kind"] == "buffer":
                        h = host[a["name"]]
                        dev[a["name"]] = cp.asarray(h.view(np.uint8) if h.dtype.fields else h)   # structs as bytes
                        cargs.append(dev[a["name"]])
                    elif a["kind"] == "scalar":
                        cargs.append(_scalar(a["ctype"], a["value"]))
                    else:
                        cargs.append(np.uint64(0))   # a null device pointer
                if e["shared_mem"]:
                    fn.max_dynamic_shared_size_bytes = int(e["shared_mem"])
                fn(tuple(e["grid"]), tuple(e["block"]), tuple(cargs), shared_mem=int(e["shared_mem"]))
                cp.cuda.runtime.deviceSynchronize()
                return {n: cp.asnumpy(d) for n, d in dev.items()}
            first, second = original_run(), original_run()
            margs = []
            for a in e["args"]:
                if a["kind"] == "buffer":
                    h, q = host[a["name"]], params.get(a["name"], {})
                    if h.dtype.fields and q.get("dtype"):   # the port takes a struct array as its scalar fields
                        h = h.view(np.uint8).view(np.dtype(q["dtype"]))
                    margs.append(mx.array(h))
                else:
                    margs.append(None if a["kind"] == "null" else a["value"])
            got = ns["launch"](*margs, grid=tuple(e["grid"]), block=tuple(e["block"]),
                               shared_mem=int(e["shared_mem"]), template=e["template_args"] or None)
            mx.eval(list(got.values()))
            bad, unstable = None, 0
            for out_name, arr in got.items():
                g = np.array(arr).reshape(-1)
                if out_name.startswith("symbol:"):   # a __device__ variable the kernel writes
                    sym = out_name.split(":", 1)[1]
                    ptr = mod.get_global(sym)
                    o1 = o2 = cp.asnumpy(cp.ndarray(g.shape, g.dtype, memptr=ptr)).reshape(-1)
                else:
                    o1, o2 = (x[out_name].reshape(-1) for x in (first, second))
                    if o1.dtype != g.dtype and o1.nbytes == g.nbytes:
                        o1, o2 = o1.view(g.dtype), o2.view(g.dtype)
                same = (o1 == o2) | (np.isnan(o1) & np.isnan(o2)) if o1.dtype.kind == "f" else o1 == o2
                unstable += int((~same).sum())
                msg = compare(out_name, g[same], o1[same])
                if msg:
                    bad = msg
                    break
            note = f"; {unstable} element(s) differ between two runs of the original (left out)" if unstable else ""
            row.update(status="match" if bad is None else "mismatch", why=(bad or how) + note, unstable=unstable)
        except Exception as ex:  # one kernel's failure is a row, not the end of the run
            why = f"{type(ex).__name__}: {str(ex)[:300]}"
            if "cudaErrorAssert" in why:
                why = "the original's own assert fired on this launch (nvcc's build): " + why
            row.update(status="error", why=why)
    print(ROW_MARK + json.dumps(rows[0]), flush=True)
    return rows[0]


def _load(path: Path) -> np.ndarray:
    """A carried argument: .npz (compressed, key 'a') or .npy (packages of earlier runs)."""
    got = np.load(path)
    return got["a"] if path.suffix == ".npz" else got


def _device() -> str:
    try:
        import mlx.core as mx
        return str(mx.device_info().get("device_name", "gpu"))
    except Exception:  # noqa: BLE001
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("root")
    r.add_argument("--json")
    r.add_argument("--jobs", type=int, default=6)
    r.add_argument("--only", help="comma-separated manifest indices")
    t = sub.add_parser("trim", help="keep the smallest launches within a carry budget")
    t.add_argument("root")
    t.add_argument("--mb", type=float, default=24.0)
    o = sub.add_parser("run-one")
    o.add_argument("root")
    o.add_argument("index", type=int)
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    if a.cmd == "run-one":
        run_one(Path(a.root), a.index)
        return 0
    if a.cmd == "trim":
        kept, skipped = trim(Path(a.root), a.mb)
        print(f"{kept} launches kept, {skipped} over {a.mb:g} MB skipped")
        return 0
    else:
        run(Path(a.root), Path(a.json) if a.json else None, a.jobs,
            [int(x) for x in a.only.split(",")] if a.only else None)
    print(f"{time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
