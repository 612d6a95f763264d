"""scan.chunked_fused on the GPU machine: every knob set checked against the reference, then timed next to
scan.registers (issue 15's scan target: <= 0.1 ms at B1 L4096 D2048 N16 fp32 on an H100/H200).

    python bench/scan_check.py [--out bench/results/scan_check.json] [--sets all|sweep] [--repeats 50]
    python bench/scan_check.py --sim      # a smoke test of this script on a CPU: small shapes, kernels simulated

For each knob set (the bench sweep's, bench/families.py SWEEPS["scan"], then a few more): the CUDA candidate is
checked on the task's small workloads against the reference (the per-token MLX loop), then at the bench shapes
(mamba-370m B1 L512, B1 L4096) against the same loop with the bench's 5x tolerance; the stateful variant
(bench/mamba_prefill.py's kernel: initial state in, final state out) against the loop from a random h0 at L4096
(mamba_prefill's knob set only). Passing sets are timed: GPU time per call from torch.profiler (CUPTI), one call
per mx.eval + synchronize, inputs rotated past the L2 (bench/common.py). A set that fails to build or launch (e.g.
too many registers for its threadgroup) is reported and skipped. Prints a table with GB/s (x, delta read twice
and y written: 2 * 8 + 4 bytes per (t, d); A, B, C, D are small) and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mlx.core as mx  # noqa: E402

from common import GpuTimer, as_tuple, compare, input_sets, load, measure, to_mx  # noqa: E402
from ksearch_engine import families as F  # noqa: E402
from ksearch_engine.families._scan_fused import chunked_fused_problem  # noqa: E402
from ksearch_engine.families.scan import render_stateful  # noqa: E402

TARGET_MS = 0.1
# beyond the sweep: 8 warps an SM (16 chunks) with 4 and 8 staged steps, 64 chunks of 8 channels, 32 channels a
# group (64 groups: half the SMs at D 2048), the accurate exp (its cost), 2 steps forwards
EXTRA = [dict(channels_per_group=16, seq_chunks=16, stage_steps=4, warm_l2=True, fast_exp=True),
         dict(channels_per_group=16, seq_chunks=16, stage_steps=8, warm_l2=True, fast_exp=True),
         dict(channels_per_group=8, seq_chunks=64, stage_steps=2, warm_l2=True, fast_exp=True),
         dict(channels_per_group=32, seq_chunks=16, stage_steps=4, warm_l2=True, fast_exp=True),
         dict(channels_per_group=16, seq_chunks=32, stage_steps=4, warm_l2=True, fast_exp=False),
         dict(channels_per_group=16, seq_chunks=32, stage_steps=2, warm_l2=False, fast_exp=True)]


def knob_sets(which: str) -> tuple[list[tuple[str, dict]], dict]:
    import families as bench_families  # bench/families.py

    sweep = bench_families.SWEEPS["scan"]
    fused = [k for name, k in sweep if name == "chunked_fused"]
    others = [(name, k) for name, k in sweep if name != "chunked_fused"]
    if which == "all":
        fused += [k for k in EXTRA if k not in fused]
    return [("chunked_fused", k) for k in fused] + others, fused[0]


def loop_with_state(x, delta, A, B, C, D, h0):
    """The reference recurrence from an initial state, in MLX ops (per token), returning (y, h_last)."""
    h = h0
    ys = []
    for t in range(x.shape[1]):
        dt = delta[:, t, :, None]
        h = mx.exp(dt * A) * h + dt * B[:, t, None, :] * x[:, t, :, None]
        ys.append((h * C[:, t, None, :]).sum(axis=-1) + D * x[:, t])
        if t % 256 == 255:
            mx.eval(h, *ys)
    return mx.stack(ys, axis=1), h


def short(tname: str, kn: dict) -> str:
    """A compact label for the table: template suffix and knob values."""
    abbr = {"channels_per_group": "cpg", "seq_chunks": "S", "stage_steps": "ts", "warm_l2": "warm",
            "fast_exp": "fast", "states_per_thread": "spt", "threads_per_group": "tpg"}
    return tname + " " + " ".join(f"{abbr.get(a, a)}={int(v) if isinstance(v, bool) else v}" for a, v in kn.items())


def bytes_moved(dims: dict) -> float:
    return float(dims["Bt"] * dims["L"] * dims["Dm"] * (2 * 8 + 4))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/scan_check.json")
    ap.add_argument("--sets", choices=["all", "sweep"], default="all")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--sim", action="store_true",
                    help="CPU smoke test: kernels run in the simulator, the small shapes stand in for the bench ones")
    args = ap.parse_args()
    t0 = time.monotonic()
    fam = F.get("scan")
    task = fam.make_task()
    if args.sim:
        from ksearch_engine.sim import install_mlx_shim

        install_mlx_shim(check_races=False)
        task = task.model_copy(update={"bench_workloads": task.workloads})
        args.repeats = 3
    gpu = GpuTimer()
    ref = load(task.reference, "reference").reference
    info = {"device": str(mx.device_info().get("device_name", "")), "mlx": mx.__version__,
            "timing": "GPU kernel time per call (torch.profiler), one call per mx.eval + synchronize, inputs rotated "
                      "past the L2" if gpu.ok else "wall time per call: " + gpu.why}
    print(json.dumps(info), flush=True)
    rows = []

    def log(row):
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "source"}), flush=True)

    # expected outputs: the small workloads, then the bench shapes (the loop runs once per shape)
    small = []
    for wl in task.workloads:
        xs = to_mx(task, task.make_inputs(wl, 0))
        small.append((wl, xs, [mx.array(a) for a in as_tuple(ref(*xs))]))
    bench = []
    for wl in task.bench_workloads:
        sets, nbytes = input_sets(task, wl)
        expect = as_tuple(ref(*sets[0]))
        mx.eval(*expect)
        bench.append((wl, sets, expect))
    knobsets, prefill_knobs = knob_sets(args.sets)
    for tname, kn in knobsets:
        t = fam.template(f"scan.{tname}")
        k = dict(t.defaults(), **kn)
        label = f"{t.id}({', '.join(f'{a}={v}' for a, v in kn.items())})"
        row = {"candidate": label, "short": short(tname, kn), "template": t.id, "knobs": kn}
        try:
            if not t.valid(k):
                row["status"] = "refused: " + (chunked_fused_problem(k) or "invalid") if tname == "chunked_fused" else "invalid"
                log(row)
                continue
            fn = load(t.render(k, "cuda")).kernel
            bad = None
            for wl, xs, exp in small:
                ok, worst = compare(task, as_tuple(fn(*xs)), exp)
                if not ok:
                    bad = f"wrong on {wl.name} (excess {worst:.3g})"
                    break
            if bad is None:
                for wl, sets, exp in bench:
                    ok, worst = compare(task, as_tuple(fn(*sets[0])), exp, scale=5.0)
                    if not ok:
                        bad = f"disagrees with the reference at {wl.name} (excess {worst:.3g})"
                        break
            if bad:
                row["status"] = bad
                log(row)
                continue
            row["status"] = "passed"
            for wl, sets, _ in bench:
                m = measure(fn, sets, gpu, max_repeats=args.repeats)
                ms = m["gpu_ms"] or m["wall_ms"]
                row[wl.name] = dict(m, gb_s=bytes_moved(wl.dims) / (ms * 1e-3) / 1e9)
        except Exception as e:  # noqa: BLE001 - a set that does not build or launch must not stop the table
            row["status"] = f"error: {type(e).__name__}: {str(e)[:400]}"
        log(row)

    # the stateful kernel bench/mamba_prefill.py patches in, from a random initial state at L4096
    try:
        wl, sets, _ = bench[-1]
        x, delta, A, B, C, D = sets[0]
        h0 = mx.random.normal((x.shape[0], x.shape[2], A.shape[1]), key=mx.random.key(7)) * 0.5
        ns = load(render_stateful(dict(fam.template("scan.chunked_fused").defaults(), **prefill_knobs), "cuda",
                                  "scan.chunked_fused"), "stateful")
        y, h = ns.scan_with_state(x, delta, A, B, C, D, h0)
        ye, he = loop_with_state(x, delta, A, B, C, D, h0)
        mx.eval(y, h, ye, he)
        ok_y, wy = compare(task, (y,), (ye,), scale=5.0)
        ok_h, wh = compare(task, (h,), (he,), scale=5.0)
        m = measure(lambda *a: ns.scan_with_state(*a, h0), sets, gpu, max_repeats=args.repeats)
        m["gb_s"] = bytes_moved(wl.dims) / ((m["gpu_ms"] or m["wall_ms"]) * 1e-3) / 1e9
        log({"candidate": f"scan.chunked_fused with state {prefill_knobs}", "workload": wl.name,
             "short": short("chunked_fused+state", prefill_knobs),
             "status": "passed" if ok_y and ok_h else f"wrong: y excess {wy:.3g}, h_last excess {wh:.3g}",
             "max_abs_y": float(mx.max(mx.abs(y - ye)).item()), "max_abs_h": float(mx.max(mx.abs(h - he)).item()),
             wl.name: m})
    except Exception as e:  # noqa: BLE001
        log({"candidate": "scan.chunked_fused with state", "status": f"error: {type(e).__name__}: {e}",
             "trace": traceback.format_exc()[-1500:]})

    t_ = "gpu" if gpu.ok else "wall"
    names = [wl.name for wl, _, _ in bench]
    head = f"{'candidate':<62} " + " ".join(f"{n + ' ms':>26} {'GB/s':>6}" for n in names)
    lines = [info["timing"], head, "-" * len(head)]
    for r in rows:
        cells = []
        for n in names:
            m = r.get(n)
            if m:
                ms = m.get(f"{t_}_ms") or m["wall_ms"]
                cells.append(f"{ms:>26.4f} {m.get('gb_s', float('nan')):>6.0f}")
            else:
                cells.append(f"{'-':>26} {'':>6}")
        lines.append(f"{r.get('short', r['candidate'])[:62]:<62} " + " ".join(cells) + ("" if r["status"] == "passed" else f"  [{r['status'][:120]}]"))
    timed = [(r[names[-1]].get(f"{t_}_ms") or r[names[-1]]["wall_ms"], r["candidate"]) for r in rows
             if r.get("status") == "passed" and r.get(names[-1]) and r.get("template") == "scan.chunked_fused"]
    if timed:
        best = min(timed)
        lines.append(f"best scan.chunked_fused at {names[-1]}: {best[0]:.4f} ms ({best[1]}); target {TARGET_MS} ms: "
                     + ("MET" if best[0] <= TARGET_MS else "not met"))
    table = "\n".join(lines)
    print("\n" + table, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"info": info, "rows": rows, "table": table}, indent=1, default=str))
    print(f"wrote {out} in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
