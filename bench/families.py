"""Per kernel family, on the GPU machine: the family's baseline vs the best of a fixed sweep of its templates'
knobs (MLX ops and CUDA-backend kernels), in one table.

    python bench/families.py [--families softmax,scan,...] [--out bench/results/families.json] [--budget-s 420]

Every candidate is first checked against the task's reference on a small workload and against the baseline's
output at the timed shape; only passing candidates are timed. Timing: see bench/common.py (GPU time from
torch.profiler per call, one call per eval + synchronize, inputs rotated past the L2; wall time too).
This is a fixed sweep of hand-picked knob settings, not the search loop (`ksearch_engine.search.run_search`).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mlx.core as mx  # noqa: E402

from common import GpuTimer, as_tuple, compare, input_sets, load, measure, to_mx, torch_peer  # noqa: E402
from ksearch_engine import families as F  # noqa: E402
from ksearch_engine.families._gqa_async import BENCH_KNOBS  # noqa: E402

TARGETS = {"softmax": 1.5, "layernorm": 2.0, "rmsnorm": 1.0, "scan": 100.0, "decode": 1.5, "paged_decode": 5.0,
           "attention": 0.6, "attention_causal": 0.6, "moe_gating": 3.0, "ssd": 1.5, "moe": 1.0}  # issue 15's must-show


def _row_sweep(fast: bool, online: bool):
    # the bests of families_run1/run2 (H200) and optimize_h100_G_dec5 (H100) first; the rest lost in every run
    s = [("group_row", dict(threads_per_row=128, rows_per_group=1, vec=8, strategy="registers")),
         ("simd_row", dict(threads_per_row=32, rows_per_group=4, vec=8, strategy="registers"))]
    if online:
        s += [("group_row", dict(threads_per_row=128, rows_per_group=1, vec=8, strategy="online"))]
    if fast:
        s = [("group_row", dict(threads_per_row=128, rows_per_group=1, vec=8, strategy="registers", fast_math=True))] + s
    return s


# the issue-15 templates: the best knobs of bench/results/headline_run1.json first
_TILES = [dict(warps=4, block_keys=64, target_blocks=256), dict(warps=4, block_keys=64, target_blocks=512),
          dict(warps=8, block_keys=128, target_blocks=512), dict(warps=4, block_keys=32, target_blocks=1024)]
# attention.flash_wgmma (sm_90a): the default first, then 96-key tiles and the 3-warpgroup lockstep kernel (H100:
# bench/results/wgmma_h100)
_WGMMA = [dict(), dict(block_kv=96), dict(warpgroups=3, block_kv=64, stages=2, q_in="smem", stagger=False)]
_DECODE = [("gqa_async", k) for k in BENCH_KNOBS] + [("gqa_tiles", k) for k in _TILES[:2]]
_ATTENTION = [("flash_wgmma", k) for k in _WGMMA] + [("flash_mma2", dict(warps=4, rows=32, block_kv=64))]
_GMMA = [dict(block_m=128, block_n=128, block_k=32, warps_m=2, warps_n=4, group_m=8),
         dict(block_m=64, block_n=128, block_k=32, warps_m=2, warps_n=4, group_m=8)]

# how many of the main shape's best candidates each other bench shape re-times (default 3)
RETIME = {"decode": len(_DECODE), "paged_decode": len(_DECODE)}

SWEEPS = {
    "softmax": [("ops", dict(formulation="max_sub", upcast=True, compile=True))] + _row_sweep(True, True),
    "rmsnorm": [("ops", dict(formulation="mean_square", upcast=True, compile=True))] + _row_sweep(False, False),
    "layernorm": [("ops", dict(formulation="two_pass", upcast=True, compile=True))] + _row_sweep(False, True),
    # scan: the one-kernel chunked scan first (expected best first: 16 channels x 32 chunks, 16 warps an SM, 4 steps
    # staged, pass 1 backwards so pass 2 finds its first steps in L2; 2 steps staged; pass 1 forwards; 8 channels,
    # 2 groups an SM), then the best register kernel of families_run2 for reference; the three-kernel chunked scan
    # (0.47 ms), the ops and naive kernels (5+ ms) are left out
    "scan": [*[("chunked_fused", dict(channels_per_group=c, seq_chunks=n, stage_steps=s_, warm_l2=w, fast_exp=True))
               for c, n, s_, w in ((16, 32, 4, True), (16, 32, 2, True), (16, 32, 4, False), (8, 32, 4, True))],
             ("registers", dict(states_per_thread=1, chunk=32, threads_per_group=64, fast_exp=True))],
    # decode: the six gqa_async sets first (_gqa_async.BENCH_KNOBS), then the two gqa_tiles bests (H100 dec5c: GQA
    # 256 groups, MHA 512); the ops and split_kv entries (0.4-0.97x in families_run1/2) and the other tiles are left out
    "decode": _DECODE,
    "paged_decode": _DECODE,
    # attention: the three flash_wgmma sets (bench/results/wgmma_h100/: 0.65x / 0.75x of cuDNN on an H100), then
    # flash_mma2's best (headline_h100_dec5b: 0.51x); the ops, flash and flash_mma entries (0.09-0.27x) are left out
    "attention": _ATTENTION,
    "attention_causal": _ATTENTION,
    # ssd and moe: the bests of headline_h100_dec5b/c first (chunked_kernels 0.357 ms; grouped_mma 128x128)
    "ssd": [("chunked_kernels", dict(chunk=c, warps=w, k_tile=kt)) for c, w, kt in ((64, 8, 8), (64, 8, 16), (64, 4, 16))]
           + [("chunked_mma", dict(chunk=64, warps=8, k_tile=16))],
    "moe": [("grouped_mma", k) for k in _GMMA],
    "moe_gating": [("ops", dict(method="k_argmax", compile=True))]
                  + [("k_passes", dict(lanes_per_token=l, threads_per_group=g, fast_exp=f))
                     for l, g, f in ((16, 128, False), (8, 128, False), (8, 256, True))],
}


def candidate_source(fam, tname: str, knobs: dict) -> tuple[str, str]:
    if tname == "naive":
        return fam.naive("cuda"), f"{fam.name}.naive"
    t = fam.template(f"{fam.name}.{tname}")
    full = dict(t.defaults(), **knobs)
    if not t.valid(full):
        raise ValueError(f"knobs {full} rejected by {t.id}.valid")
    kind = "ops" if t.kinds == ("ops",) else "cuda"
    return t.render(full, kind), f"{t.id}({', '.join(f'{k}={v}' for k, v in knobs.items())})"


# bench entries that are a family's task with options
VARIANTS = {"attention_causal": ("attention", {"causal": True})}


def _peer(name: str, sets, gpu: GpuTimer) -> dict:
    """torch's op on the same tensors (GPU time, where the profiler works): the table's peer column."""
    if not gpu.ok:
        return {"gpu_ms": None, "op": gpu.why}
    ms, op = torch_peer(name, sets)
    return {"gpu_ms": ms, "op": op}


def run_family(name: str, gpu: GpuTimer, deadline: float, log, small: bool = False) -> dict:
    fam_name, opts = VARIANTS.get(name, (name, {}))
    fam = F.get(fam_name)
    task = fam.make_task(**opts)
    ref = load(task.reference, "reference").reference
    base = load(task.baseline_source(), "baseline").baseline
    wl_small = task.workloads[0]
    xs_small = to_mx(task, task.make_inputs(wl_small, 0))
    exp_small = [mx.array(a) for a in as_tuple(ref(*xs_small))]
    mx.eval(*exp_small)
    if small:  # a smoke test of this script on the CPU: time the correctness shapes instead
        task = task.model_copy(update={"bench_workloads": task.workloads})
    main = task.bench_workloads[-1]
    sets, nbytes = input_sets(task, main)
    base_out = as_tuple(base(*sets[0]))
    ref_out = as_tuple(ref(*sets[0])) if name != "scan" else base_out  # scan: the loop is both
    mx.eval(*base_out, *ref_out)
    b = measure(base, sets, gpu)
    log({"family": name, "workload": main.name, "candidate": "baseline:" + task.baseline_name, **b})
    peer = _peer(name, sets, gpu)
    log({"family": name, "workload": main.name, "candidate": "torch peer", **peer})
    results = []
    for tname, knobs in SWEEPS.get(name, []):
        if time.monotonic() > deadline:
            log({"family": name, "candidate": tname, "skipped": "time budget"})
            continue
        row = {"family": name, "workload": main.name}
        try:
            src, label = candidate_source(fam, tname, knobs)
            row["candidate"] = label
            fn = load(src).kernel
            ok, worst = compare(task, as_tuple(fn(*xs_small)), exp_small)
            if not ok:
                row["status"] = f"wrong on {wl_small.name} (excess {worst:.3g})"
                log(row); continue
            ok, worst = compare(task, as_tuple(fn(*sets[0])), ref_out, scale=5.0)
            if not ok:
                row["status"] = f"disagrees with the reference at {main.name} (excess {worst:.3g})"
                log(row); continue
            row.update(measure(fn, sets, gpu))
            row["status"] = "passed"
            row["source"] = src
            results.append(row)
        except Exception as e:  # noqa: BLE001 - one broken candidate must not stop the table
            row["status"] = f"error: {type(e).__name__}: {str(e)[:600]}"
        log({k: v for k, v in row.items() if k != "source"})
    key = (lambda r: r["gpu_ms"]) if gpu.ok and all(r.get("gpu_ms") for r in results) else (lambda r: r["wall_ms"])
    best = min(results, key=key) if results else None
    summary = {"family": name, "workload": main.name, "bytes_in": nbytes, "baseline": task.baseline_name,
               "base": b, "torch": peer, "best": {k: v for k, v in best.items() if k != "source"} if best else None,
               "best_source": best["source"] if best else None, "others": []}
    # the other bench shapes: the best candidates of the main shape (decode: all of them: MHA's best is not GQA's),
    # re-checked and timed there
    top = sorted(results, key=key)[:RETIME.get(name, 3)]
    for wl in task.bench_workloads[:-1]:
        if not top or time.monotonic() > deadline:
            break
        try:
            s2, _ = input_sets(task, wl)
            expect = as_tuple((ref if name != "scan" else base)(*s2[0]))
            other = {"workload": wl.name, "base": measure(base, s2, gpu), "torch": _peer(name, s2, gpu),
                     "best": None, "tried": []}
            for r in top:
                fn = load(r["source"]).kernel
                ok, _ = compare(task, as_tuple(fn(*s2[0])), expect, scale=5.0)
                m = dict(measure(fn, s2, gpu), candidate=r["candidate"]) if ok else {"candidate": r["candidate"], "status": "wrong"}
                other["tried"].append(m)
                if ok and (other["best"] is None or key(m) < key(other["best"])):
                    other["best"] = m
            summary["others"].append(other)
        except Exception as e:  # noqa: BLE001
            summary["others"].append({"workload": wl.name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    return summary


def _shapes(s: dict) -> list[tuple]:
    """A family summary's (workload, baseline, best, torch) per timed shape: the main one, then the others."""
    return [(s["workload"], s["base"], s["best"], s.get("torch"))] + [
        (o["workload"], o.get("base"), o.get("best"), o.get("torch")) for o in s.get("others", [])]


def table(summaries: list[dict], gpu_ok: bool) -> str:
    t = "gpu" if gpu_ok else "wall"
    head = f"{'family':<17} {'workload':<30} {'baseline':<44} {'base ms':>9} {'best ms':>9} {'speedup':>8} {'target':>7} {'torch ms':>9}  best candidate"
    lines = [head, "-" * len(head)]
    for s in summaries:
        for wl, b, c, p in _shapes(s):
            if not b:
                continue
            bm = b.get(f"{t}_ms") or b["wall_ms"]
            cm = (c.get(f"{t}_ms") or c["wall_ms"]) if c else None
            sp = f"{bm / cm:.2f}x" if cm else "-"
            pm = (p or {}).get("gpu_ms")
            lines.append(f"{s['family']:<17} {wl:<30} {s['baseline'][:44]:<44} {bm:>9.4f} {cm if cm else float('nan'):>9.4f} {sp:>8} "
                         f"{TARGETS.get(s['family'], 0):>6}x {pm if pm else float('nan'):>9.4f}  {(c or {}).get('candidate', 'none passed')}")
    return "\n".join(lines)


def markdown(summaries: list[dict], info: dict) -> str:
    """The README's table from a families.json: one row a (family, workload), GPU time, torch as the peer column."""
    t = "gpu" if "profiler" in info.get("timing", "") else "wall"
    lines = [f"| family | workload | baseline (MLX) | baseline ms | ours ms | speedup | target | torch ms | ours |",
             "|---|---|---|---|---|---|---|---|---|"]

    def ms(m):
        return (m.get(f"{t}_ms") or m.get("wall_ms")) if m else None
    for s in summaries:
        for wl, b, c, p in _shapes(s):
            bm, cm, pm = ms(b), ms(c), (p or {}).get("gpu_ms")
            if bm is None:
                continue
            sp = f"**{bm / cm:.2f}x**" if cm else "-"
            lines.append(f"| {s['family']} | {wl} | {s['baseline']} | {bm:.4f} | {f'{cm:.4f}' if cm else '-'} | {sp} | "
                         f"{TARGETS.get(s['family'], 0)}x | {f'{pm:.4f}' if pm else '-'} | "
                         f"`{(c or {}).get('candidate', 'none passed')}` |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(SWEEPS))
    ap.add_argument("--out", default="bench/results/families.json")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--small", action="store_true", help="time the small correctness shapes (a smoke test on CPU)")
    ap.add_argument("--markdown", metavar="JSON", help="print the README's table from a families.json and stop")
    args = ap.parse_args()
    if args.markdown:
        d = json.loads(Path(args.markdown).read_text())
        print(f"{d['info'].get('device')}, MLX {d['info'].get('mlx')}; {d['info'].get('timing')}\n")
        print(markdown(d["summaries"], d["info"]))
        return
    t0 = time.monotonic()
    deadline = t0 + args.budget_s
    gpu = GpuTimer()
    raw = []

    def log(row):
        raw.append(row)
        print(json.dumps(row), flush=True)

    info = {"device": str(mx.device_info().get("device_name", "")), "mlx": mx.__version__, "default_device": str(mx.default_device()),
            "python": platform.python_version(), "timing": ("GPU kernel time per call from torch.profiler (CUPTI), one call per "
                                                           "mx.eval + mx.synchronize, inputs rotated past the L2"
                                                           if gpu.ok else "wall time per call (eval + synchronize): " + gpu.why),
            "selection": "fixed knob sweep (bench/families.py SWEEPS), not run_search"}
    print(json.dumps(info), flush=True)
    names = [n for n in args.families.split(",") if n]
    summaries = []
    for i, n in enumerate(names):
        now = time.monotonic()  # a fair share of what is left, with slack for families that finish early
        fam_deadline = min(deadline, now + 1.5 * max(20.0, (deadline - now) / (len(names) - i)))
        try:
            summaries.append(run_family(n, gpu, fam_deadline, log, args.small))
        except Exception as e:  # noqa: BLE001
            log({"family": n, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]})
    tab = table(summaries, gpu.ok)
    print("\n" + info["timing"] + "\n" + tab, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"info": info, "summaries": summaries, "rows": raw, "table": tab}, indent=1))
    print(f"wrote {out} in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
