"""The issue-15 headline kernels on the GPU machine, in one run: compile, check, time.

    python bench/headline.py [--only decode,paged,moe,attention] [--out $OUT/headline.json] [--budget-s 400]

For each family: the task's baseline (MLX), a sweep of the new templates' knobs (decode / paged_decode: gqa_async
first, then gqa_tiles; moe.grouped_mma, attention.flash_wgmma / flash_mma2 / flash_mma) and torch's op on the same
tensors (a peer column). A candidate of several kernels a call also gets each kernel's GPU ms (`kernel_ms`: a split
pass vs its merge).
Every candidate is checked against the task's reference on the small workloads, then at the timed shape against
the reference (MoE: against the baseline's output plus an expert-by-expert reference on a slice of the tokens).
GPU time per call from torch.profiler (CUPTI), one call per mx.eval + mx.synchronize, inputs rotated past the L2
(bench/common.py). Prints a table and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from common import GpuTimer, as_tuple, compare, input_sets, load, measure, to_mx, torch_peer  # noqa: E402
from ksearch_engine import families as F  # noqa: E402
from ksearch_engine.families._gqa_async import BENCH_KNOBS  # noqa: E402
from ksearch_engine.task import Workload  # noqa: E402

HBM = 4.8e12  # bytes/s: the card's own figure from specs/hardware once the device is known (main), else the H200's


def _card_bandwidth(device_name: str) -> float:
    """The memory bandwidth specs/hardware gives for the device MLX names (bytes/s), else HBM."""
    try:
        from ksearch_engine.specs import load_specs
        chip = load_specs().hardware(device_name).chip
        v = chip.memory_bandwidth_gbs if chip is not None else None
        return float(sum(v) / 2 if isinstance(v, tuple) else v) * 1e9 if v else HBM
    except Exception:   # noqa: BLE001 (an unknown device: the H200's figure, said in the info)
        return HBM

# decode/paged: "template" names the family's template by its suffix (default: the PLAN entry's gqa_tiles).
# First the six decode.gqa_async sets (_gqa_async.BENCH_KNOBS, why each: there; never timed before this run), then
# the two bests so far (H100, bench/results/headline_h100_dec5c): gqa_tiles 4 warps x 64 keys at 256 groups (GQA
# 0.0160-0.0162 ms) and at 512 (MHA 0.0314). Left out as slower in those runs: gqa_fused (GQA 0.0184-0.0261, MHA
# 0.0332 vs 0.0314), gqa_tiles at 128/192 groups or 32-key tiles.
DEC = [dict(template="gqa_async", **k) for k in BENCH_KNOBS] + \
      [dict(warps=4, block_keys=64, target_blocks=256), dict(warps=4, block_keys=64, target_blocks=512)]
MOE = [dict(block_m=128, block_n=128, block_k=32, warps_m=2, warps_n=4, group_m=8),
       dict(block_m=128, block_n=128, block_k=32, warps_m=4, warps_n=2, group_m=8),
       dict(block_m=64, block_n=128, block_k=32, warps_m=2, warps_n=4, group_m=8),
       dict(block_m=128, block_n=64, block_k=32, warps_m=4, warps_n=2, group_m=8),
       dict(block_m=64, block_n=64, block_k=64, warps_m=2, warps_n=2, group_m=8),
       dict(block_m=128, block_n=128, block_k=32, warps_m=2, warps_n=4, group_m=16),
       dict(block_m=128, block_n=128, block_k=16, warps_m=2, warps_n=4, group_m=8)]
# attention.flash_mma2 (expected best first: FlashAttention-2's 128 x 64 tile, 4 warps of 32 rows); an entry's
# "template" key names another template of the family (the first generation's best on the H200, for reference)
# ptxas 13.0 for sm_90 at Dh=128 (local compile, no GPU): 255/239/168/166/168/239/235 registers a thread in this
# order, no spills (the first: 12 bytes at the GQA shape). All but the 4th need more than 48 KB of dynamic shared
# memory (MLX raises the kernel's limit above 48000 bytes); the 4th (35 KB) tells a launch failure from that
# attention.flash_wgmma (Hopper wgmma, sm_90a) first: its default (staggered warpgroups, Q in registers, 64-key tiles
# 2 ahead), 96-key tiles (the best non-causal) and the 3-warpgroup lockstep kernel; H100, bench/wgmma_check.py run 3
# (bench/results/wgmma_h100): 0.643 / 0.627 / 0.687 ms non-causal, 0.352 / 0.365 / 0.353 causal, cuDNN 0.420 / 0.264
WGMMA = [dict(template="attention.flash_wgmma"),
         dict(template="attention.flash_wgmma", block_kv=96),
         dict(template="attention.flash_wgmma", warpgroups=3, block_kv=64, stages=2, q_in="smem", stagger=False)]
ATT = WGMMA + [dict(warps=4, rows=32, block_kv=64), dict(warps=4, rows=32, block_kv=32), dict(warps=8, rows=16, block_kv=64),
       dict(warps=4, rows=16, block_kv=32), dict(warps=4, rows=16, block_kv=64), dict(warps=8, rows=32, block_kv=32),
       dict(warps=8, rows=16, block_kv=128), dict(template="attention.flash_mma", warps=8, block_kv=64)]

# the second run: what the first ones left open (bench/results/headline_run1.json, headline_h100_dec5b/): the split
# count around the GQA best (gqa_tiles, 256 threadgroups), the MHA bests of both templates, MoE on its reference
SWEEP2 = {"decode": [  # gqa_async around the first run's sets: what they leave open (split count, ring depth, warps)
                     dict(template="gqa_async", warps=8, block_keys=32, stages=1, target_blocks=132, compute="mma", merge="fused"),
                     dict(template="gqa_async", warps=4, block_keys=32, stages=2, target_blocks=264, compute="mma", merge="fused"),
                     dict(template="gqa_async", warps=4, block_keys=32, stages=2, target_blocks=66, compute="mma", merge="fused"),
                     dict(template="gqa_async", warps=4, block_keys=16, stages=4, target_blocks=132, compute="mma", merge="fused"),
                     dict(template="gqa_async", warps=2, block_keys=64, stages=3, target_blocks=264, compute="mma", merge="fused"),
                     dict(template="gqa_async", warps=8, block_keys=16, stages=3, target_blocks=132, compute="mma", merge="kernel"),
                     dict(template="gqa_async", **BENCH_KNOBS[0]), dict(warps=4, block_keys=64, target_blocks=256)],
          "moe": [dict(block_m=128, block_n=128, block_k=32, warps_m=2, warps_n=4, group_m=8),
                  dict(block_m=128, block_n=128, block_k=32, warps_m=4, warps_n=2, group_m=8)]}

# (label, family, task options, template id, sweep, workloads to time: (name, dims))
PLAN = {
    "decode": ("decode", {}, "decode.gqa_tiles", DEC, None),
    "paged": ("paged_decode", {}, "paged_decode.gqa_tiles", DEC, None),
    "moe": ("moe", {}, "moe.grouped_mma", MOE, None),
    "attention": ("attention", {}, "attention.flash_mma2", ATT, None),
    "attention_causal": ("attention", {"causal": True}, "attention.flash_mma2", ATT, None),
}


def moe_slice_check(fn_out, x, w, route, n_tok: int = 64) -> float:
    """Expert-by-expert fp32 reference on the first n_tok tokens; returns the max abs error."""
    E = w.shape[0]
    idx = route[:n_tok] % E
    xf = x[:n_tok].astype(mx.float32)
    y = mx.zeros((*idx.shape, w.shape[1]), dtype=mx.float32)
    for e in range(E):
        ye = xf @ w[e].astype(mx.float32).T
        y = y + mx.where((idx == e)[..., None], ye[:, None, :], 0.0)
        mx.eval(y)
    return float(mx.max(mx.abs(fn_out[:n_tok].astype(mx.float32) - y)).item())


FULL_MOE_CHECK = False


def _bad_rows(got, exp, tol: float = 0.05) -> dict:
    """Rows (token, slot) of a (T, K, O) output off the expected one by more than tol + tol*|e|."""
    g = np.array(got.astype(mx.float32)).reshape(-1, got.shape[-1])
    e = np.array(exp.astype(mx.float32)).reshape(-1, exp.shape[-1])
    bad = np.abs(g - e) > tol * (1 + np.abs(e))
    rows = np.nonzero(bad.any(axis=1))[0]
    return {"n_rows": int(rows.size), "of": int(g.shape[0]), "first": rows[:8].tolist(),
            "max_abs": float(np.abs(g - e).max()), "nan": bool(np.isnan(g).any())}


def bytes_moved(label, dims) -> float:
    d = dims
    if label == "decode":
        return 2 * (2 * d["Bt"] * d["Hkv"] * d["S"] * d["Dh"] + 2 * d["Bt"] * d["Hq"] * d["Dh"])
    if label == "paged":
        return 2 * (2 * d["Bt"] * d["Hkv"] * d["NBLK"] * d["P"] * d["Dh"] + 2 * d["Bt"] * d["Hq"] * d["Dh"])
    return 0.0


def flops(label, dims) -> float:
    d = dims
    if label == "moe":
        return 2.0 * d["T"] * d["K"] * d["D"] * d["O"]
    if label.startswith("attention"):
        f = 4.0 * d["Bt"] * d["Hq"] * d["L"] * d["L"] * d["Dh"]
        return f / 2 if label.endswith("causal") else f
    return 0.0


def run(label: str, gpu: GpuTimer, deadline: float, log) -> list[dict]:
    fam_name, opts, tid, sweep, _ = PLAN[label]
    fam = F.get(fam_name)
    task = fam.make_task(**opts)
    t = fam.template(tid)
    ref = load(task.reference, "reference").reference
    base = load(task.baseline_source(), "baseline").baseline
    srcs = []
    for kn in sweep:
        # a sweep entry may name its template: in full ("attention.flash_mma2") or within the family ("gqa_fused")
        tn = kn.get("template", "")
        tt = (fam.template(tn if "." in tn else f"{fam_name}.{tn}")) if tn else t
        full = dict(tt.defaults(), **{k: v for k, v in kn.items() if k != "template"})
        if not tt.valid(full):
            log({"family": label, "candidate": str(kn), "status": "invalid knobs"})
            continue
        srcs.append((kn, tt.render(full, "cuda")))
    # small-shape checks against the reference (tails, GQA, splits)
    ok_src = []
    for kn, src in srcs:
        try:
            fn = load(src).kernel
            bad = None
            for wl in task.workloads:
                xs = to_mx(task, task.make_inputs(wl, 0))
                good, worst = compare(task, as_tuple(fn(*xs)), as_tuple(ref(*xs)))
                if not good:
                    bad = f"wrong on {wl.name} (excess {worst:.3g})"
                    break
            if bad:
                log({"family": label, "candidate": str(kn), "status": bad})
            else:
                ok_src.append((kn, src))
        except Exception as e:  # noqa: BLE001
            log({"family": label, "candidate": str(kn), "status": f"error: {type(e).__name__}: {str(e)[:800]}"})
    out = []
    for wl in task.bench_workloads:
        if time.monotonic() > deadline:
            log({"family": label, "workload": wl.name, "skipped": "time budget"})
            continue
        sets, nbytes = input_sets(task, wl)
        b_out = as_tuple(base(*sets[0]))
        mx.eval(*b_out)
        if label == "moe" and not FULL_MOE_CHECK:
            expect = b_out
        else:
            expect = as_tuple(ref(*sets[0]))
            mx.eval(*expect)
        if label == "moe":
            base_bad = _bad_rows(b_out[0], expect[0])
            log({"family": label, "workload": wl.name, "baseline_vs_reference_bad_rows": base_bad})
        row = {"family": label, "workload": wl.name, "dims": wl.dims, "baseline": task.baseline_name,
               "base": measure(base, sets, gpu), "cands": []}
        for kn, src in ok_src:
            if time.monotonic() > deadline:
                break
            c = {"knobs": kn}
            try:
                fn = load(src).kernel
                got = as_tuple(fn(*sets[0]))
                good, worst = compare(task, got, expect, scale=5.0)
                c["excess"] = worst
                if label == "moe":
                    c["slice_max_abs_err"] = moe_slice_check(got[0], *sets[0])
                    c["bad_rows_vs_reference"] = _bad_rows(got[0], expect[0])
                if not good and label == "moe" and FULL_MOE_CHECK:
                    c.update(measure(fn, sets, gpu))
                    c["status"] = f"timed, but disagrees at {wl.name} (excess {worst:.3g})"
                elif not good:
                    c["status"] = f"disagrees at {wl.name} (excess {worst:.3g})"
                else:
                    c.update(measure(fn, sets, gpu))
                    c["status"] = "passed"
            except Exception as e:  # noqa: BLE001
                c["status"] = f"error: {type(e).__name__}: {str(e)[:800]}"
            log({"family": label, "workload": wl.name, **c})
            row["cands"].append(c)
        try:
            row["torch_ms"], row["torch_op"] = torch_peer(label, sets)
        except Exception as e:  # noqa: BLE001
            row["torch_ms"], row["torch_op"] = None, f"error: {type(e).__name__}: {str(e)[:300]}"
        row["bytes"] = bytes_moved(label, wl.dims)
        row["flops"] = flops(label, wl.dims)
        log({k: v for k, v in row.items() if k != "cands"})
        out.append(row)
        del sets
        mx.clear_cache()
    return out


def table(rows: list[dict]) -> str:
    head = (f"{'family':<17} {'workload':<36} {'base ms':>8} {'ours ms':>8} {'speedup':>7} {'torch ms':>8}  "
            f"{'bound':<28} best knobs")
    lines = [head, "-" * len(head)]
    for r in rows:
        bm = r["base"].get("gpu_ms") or r["base"]["wall_ms"]
        ok = [c for c in r["cands"] if c.get("status") == "passed"]
        best = min(ok, key=lambda c: c.get("gpu_ms") or c["wall_ms"]) if ok else None
        cm = (best.get("gpu_ms") or best["wall_ms"]) if best else None
        bound = ""
        if cm and r["bytes"]:
            bound = f"{r['bytes'] / (cm * 1e-3) / 1e9:.0f} GB/s ({100 * r['bytes'] / (cm * 1e-3) / HBM:.0f}% HBM)"
        elif cm and r["flops"]:
            bound = f"{r['flops'] / (cm * 1e-3) / 1e12:.0f} TFLOP/s (base {r['flops'] / (bm * 1e-3) / 1e12:.0f})"
        tm = r.get("torch_ms")
        lines.append(f"{r['family']:<17} {r['workload']:<36} {bm:>8.4f} {cm if cm else float('nan'):>8.4f} "
                     f"{(bm / cm if cm else float('nan')):>6.2f}x {tm if tm else float('nan'):>8.4f}  {bound:<28} "
                     f"{best['knobs'] if best else 'none passed'}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(PLAN))
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "headline.json"))
    ap.add_argument("--budget-s", type=float, default=400.0)
    ap.add_argument("--second", action="store_true", help="the second run's sweeps (SWEEP2), full MoE reference check")
    ap.add_argument("--moe-reference", action="store_true",
                    help="check MoE candidates against the expert-by-expert reference (not the baseline's output)")
    ap.add_argument("--sweep", metavar="JSON", help="a list of knob dicts that replaces the sweep of every --only entry")
    args = ap.parse_args()
    t0 = time.monotonic()
    def use_sweep(label: str, sweep: list[dict]) -> None:
        fam, opts, tid, _, x = PLAN[label]
        PLAN[label] = (fam, opts, tid, sweep, x)
    if args.moe_reference:
        global FULL_MOE_CHECK
        FULL_MOE_CHECK = True
    if args.second:
        FULL_MOE_CHECK = True
        for k, sw in SWEEP2.items():
            use_sweep(k, sw)
    if args.sweep:   # after --second: a sweep given on the command line wins
        for k in args.only.split(","):
            use_sweep(k, json.loads(args.sweep))
    gpu = GpuTimer()
    raw, rows = [], []

    def log(r):
        raw.append(r)
        print(json.dumps(r, default=str), flush=True)

    global HBM
    HBM = _card_bandwidth(str(mx.device_info().get("device_name", "")))
    info = {"device": str(mx.device_info().get("device_name", "")), "mlx": mx.__version__, "hbm_bytes_s": HBM,
            "timing": "GPU kernel time per call, torch.profiler (CUPTI), one call per mx.eval + mx.synchronize, "
                      "inputs rotated past the L2" if gpu.ok else "wall: " + gpu.why}
    print(json.dumps(info), flush=True)
    names = [n for n in args.only.split(",") if n]
    for i, n in enumerate(names):
        left = t0 + args.budget_s - time.monotonic()
        try:
            rows += run(n, gpu, time.monotonic() + max(20.0, 1.6 * left / (len(names) - i)), log)
        except Exception as e:  # noqa: BLE001
            log({"family": n, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]})
        Path(args.out).write_text(json.dumps({"info": info, "rows": rows, "log": raw}, indent=1, default=str))
    tab = table(rows)
    print("\n" + info["timing"] + "\n" + tab, flush=True)
    Path(args.out).write_text(json.dumps({"info": info, "rows": rows, "log": raw, "table": tab}, indent=1, default=str))
    print(f"wrote {args.out} in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
