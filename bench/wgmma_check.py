"""attention.flash_wgmma on the GPU machine (sm_90): the wgmma helpers alone, the kernel's correctness, its speed.

    python bench/wgmma_check.py [--budget-s 180] [--out $OUT/wgmma_check.json] [--skip micro,check,time]

Three parts, each in its own process (a wrong descriptor can fault the CUDA context; the other parts still run):
* micro: the template's own wgmma wrappers on one warpgroup, exact small-integer data (the error must be 0):
  S = A B^T (both K-major, 128B swizzle) and O = P V (P from registers, V MN-major through the transpose bit) at N=128
  and as two N=64 halves, with the descriptor fields the template uses and a few other readings of them (LBO/SBO
  swapped), so a wrong reading of the layout shows as which variant is exact;
* check: knob sets x shapes (odd L, GQA, Dh 64/128, causal or not, fp16/bf16) against the task's fp32 reference and
  against mx.fast.scaled_dot_product_attention's error to the same reference; L=4096 for the default knobs;
* time: GPU time per call (torch.profiler / CUPTI, one call per mx.eval + synchronize, inputs rotated past the L2:
  bench/common.py) at B1 H32 L4096 D128 (and the GQA 32/8 shape) for SDPA (cuDNN), attention.flash_mma2 (its best
  knobs) and the knob sets that passed the check, non-causal and causal. Prints JSON lines and a table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

TID = "attention.flash_wgmma"
def _k(wg=2, bkv=128, st=1, pvn=128, q="smem", stag=False):
    return dict(warpgroups=wg, block_kv=bkv, stages=st, pv_n=pvn, q_in=q, stagger=stag)


KNOBS = [_k(bkv=64, st=2, q="regs", stag=True),   # the default: warpgroup 1 half an iteration behind, Q in registers
         _k(bkv=64, st=3, q="regs", stag=True),
         _k(bkv=96, st=2, q="regs", stag=True),
         _k(bkv=96, st=1, q="regs", stag=True),
         _k(bkv=64, st=2, q="regs"),
         _k(wg=3, bkv=64, st=2),
         _k(bkv=128, st=1)]                          # the first design (run 1's default): lockstep, Q in smem
MMA2 = dict(warps=4, rows=32, block_kv=64)   # flash_mma2's best on the H100 (0.831 ms non-causal)
# (Bt, Hq, Hkv, L, Dh)
SHAPES = [(1, 4, 2, 40, 64), (1, 2, 2, 21, 128), (1, 2, 1, 77, 128), (1, 4, 2, 150, 64), (2, 8, 2, 333, 128),
          (1, 4, 4, 1024, 128)]
BIG = (1, 32, 32, 4096, 128)


def log(r: dict) -> None:
    print(json.dumps(r, default=str), flush=True)


# ---------------------------------------------------------------------------------------------------------- micro

MICRO_BODY = r"""
extern __shared__ __align__(16) __half ks_smem[];
unsigned char* sm = ks_align1k(ks_smem);
const ks_sa sa = ks_saddr(sm);
const int t = threadIdx.x; const int lane = t & 31; const int w = t >> 5; const int g = lane >> 2; const int q = lane & 3;
const int mode = prm[0]; const unsigned lbo = (unsigned)prm[1]; const unsigned sbo = (unsigned)prm[2];
constexpr int BO = 64 * 128 * 2;      // B (128 x 128) after A (64 x 128)
// A: 64 rows, B: 128 rows, 128 columns each, in the template's layout (two 64-column regions, swizzled rows)
for (int f = t; f < 64 * 16; f += 128) {
  const int r = f / 16; const int c8 = f % 16;
  *reinterpret_cast<uint4*>(sm + ((c8 >> 3) * 64 + r) * 128 + (((c8 & 7) ^ (r & 7)) << 4)) =
      *reinterpret_cast<const uint4*>(A + r * 128 + c8 * 8);
}
for (int f = t; f < 128 * 16; f += 128) {
  const int r = f / 16; const int c8 = f % 16;
  *reinterpret_cast<uint4*>(sm + BO + ((c8 >> 3) * 128 + r) * 128 + (((c8 & 7) ^ (r & 7)) << 4)) =
      *reinterpret_cast<const uint4*>(B + r * 128 + c8 * 8);
}
ks_fence_async();
__syncthreads();
float d[64];
#pragma unroll
for (int i = 0; i < 64; ++i) d[i] = 0.0f;
unsigned pa[8][4];
#pragma unroll
for (int kk = 0; kk < 8; ++kk) {      // P's A fragments (rows 16 w + g, + 8; columns 16 kk + 2 q, + 8)
  const int r0 = 16 * w + g; const int c = 16 * kk + 2 * q;
  pa[kk][0] = *reinterpret_cast<const unsigned*>(P + r0 * 128 + c);
  pa[kk][1] = *reinterpret_cast<const unsigned*>(P + (r0 + 8) * 128 + c);
  pa[kk][2] = *reinterpret_cast<const unsigned*>(P + r0 * 128 + c + 8);
  pa[kk][3] = *reinterpret_cast<const unsigned*>(P + (r0 + 8) * 128 + c + 8);
}
ks_wg_fence();
if (mode == 0) {            // D = A B^T: ks_wgss (the template's descriptors)
#pragma unroll
  for (int kd = 0; kd < 8; ++kd)
    ks_wgss<128, false>(d, sa + (kd >> 2) * 64 * 128 + (kd & 3) * 32, sa + BO + (kd >> 2) * 128 * 128 + (kd & 3) * 32, kd > 0);
} else if (mode == 1) {     // D = A B^T with descriptor fields from prm
#pragma unroll
  for (int kd = 0; kd < 8; ++kd)
    ks_wgss_d<128, false>(d, ks_desc(sa + (kd >> 2) * 64 * 128 + (kd & 3) * 32, lbo, sbo),
                          ks_desc(sa + BO + (kd >> 2) * 128 * 128 + (kd & 3) * 32, lbo, sbo), kd > 0);
} else if (mode == 2) {     // D = P V (V = B: 128 keys x 128 columns), N = 128, fields from prm
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) ks_wgrs_d<128, false>(d, pa[kk], ks_desc(sa + BO + kk * 2048, lbo, sbo));
} else {                    // D = P V as two N = 64 halves (the second region 128 x 128 bytes further), fields from prm
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
#pragma unroll
    for (int nh = 0; nh < 2; ++nh) ks_wgrs_d<64, false>(d + 32 * nh, pa[kk], ks_desc(sa + BO + kk * 2048 + nh * 16384, lbo, sbo));
}
ks_wg_commit();
ks_wg_wait<0>();
#pragma unroll
for (int i = 0; i < 16; ++i) {
  const int r0 = 16 * w + g; const int c = 8 * i + 2 * q;
  D[r0 * 128 + c] = d[4 * i]; D[r0 * 128 + c + 1] = d[4 * i + 1];
  D[(r0 + 8) * 128 + c] = d[4 * i + 2]; D[(r0 + 8) * 128 + c + 1] = d[4 * i + 3];
}
"""


def part_micro() -> None:
    import mlx.core as mx
    import numpy as np

    from ksearch_engine import families as F
    from ksearch_engine.families._flash_wgmma import kernel_header

    t = F.get("attention").template(TID)
    hdr = kernel_header(t.defaults())
    kern = mx.fast.cuda_kernel(name="wgmma_micro", input_names=["A", "B", "P", "prm"], output_names=["D"],
                               source=MICRO_BODY, header=hdr, shared_memory=1024 + 64 * 256 + 128 * 256)
    rng = np.random.default_rng(0)
    A = rng.integers(-2, 3, (64, 128)).astype(np.float16)
    B = rng.integers(-2, 3, (128, 128)).astype(np.float16)
    P = rng.integers(-2, 3, (64, 128)).astype(np.float16)
    want_s = A.astype(np.float64) @ B.astype(np.float64).T
    want_o = P.astype(np.float64) @ B.astype(np.float64)
    cases = [("S=QK^T template (lbo 16, sbo 1024)", 0, 16, 1024, want_s),
             ("S=QK^T fields lbo 16 sbo 1024", 1, 16, 1024, want_s),
             ("S=QK^T fields lbo 1024 sbo 16 (swapped)", 1, 1024, 16, want_s),
             ("O=PV N128 lbo 16384 sbo 1024 (template, pv_n=128)", 2, 16384, 1024, want_o),
             ("O=PV N128 lbo 1024 sbo 16384 (swapped)", 2, 1024, 16384, want_o),
             ("O=PV 2xN64 lbo 1024 sbo 1024 (template, pv_n=64)", 3, 1024, 1024, want_o),
             ("O=PV 2xN64 lbo 16384 sbo 1024", 3, 16384, 1024, want_o)]
    for name, mode, lbo, sbo, want in cases:
        try:
            prm = mx.array(np.array([mode, lbo, sbo, 0], dtype=np.int32))
            out = kern(inputs=[mx.array(A), mx.array(B), mx.array(P), prm], grid=(128, 1, 1),
                       threadgroup=(128, 1, 1), output_shapes=[(64, 128)], output_dtypes=[mx.float32])[0]
            got = np.array(out, dtype=np.float64)
            err = np.abs(got - want)
            bad = np.argwhere(err > 0)
            log({"part": "micro", "case": name, "max_err": float(err.max()), "bad_elements": int(bad.shape[0]),
                 "first_bad": [(int(r), int(c), float(got[r, c]), float(want[r, c])) for r, c in bad[:4]]})
        except Exception as e:  # noqa: BLE001
            log({"part": "micro", "case": name, "error": f"{type(e).__name__}: {str(e)[:1500]}"})


# ---------------------------------------------------------------------------------------------------------- check

def _task(causal: bool, dtype: str):
    from ksearch_engine import families as F
    return F.get("attention").make_task(causal=causal, dtype=dtype)


def _inputs(task, dims, seed=0):
    from common import to_mx
    from ksearch_engine.task import Workload
    wl = Workload(name="w", dims=dict(zip(("Bt", "Hq", "Hkv", "L", "Dh"), dims)))
    return to_mx(task, task.make_inputs(wl, seed))


def _err(got, want) -> float:
    import mlx.core as mx
    return float(mx.max(mx.abs(got.astype(mx.float32) - want.astype(mx.float32))).item())


def part_check(knob_sets: list[dict], deadline: float, quick: bool = False) -> None:
    import mlx.core as mx

    from common import load
    from ksearch_engine import families as F

    t = F.get("attention").template(TID)
    plans = []
    if quick:   # the first knob set everywhere (L=4096 included); the others on one GQA shape with a tail, several
        # query blocks and tiles, Dh=128, both masks
        k0 = knob_sets[0]
        plans += [(0, k0, dims, c, "float16") for dims in SHAPES for c in (False, True)]
        plans += [(0, k0, dims, c, "bfloat16") for dims in SHAPES[2::2] for c in (False, True)]
        for ki, k in enumerate(knob_sets[1:], 1):
            plans += [(ki, k, (2, 8, 2, 333, 128), c, "float16") for c in (False, True)]
        plans += [(0, k0, BIG, c, dt) for dt in ("float16", "bfloat16") for c in (False, True)]
    else:
        for ki, k in enumerate(knob_sets):
            for dims in SHAPES:
                for causal in (False, True):
                    plans.append((ki, k, dims, causal, "float16"))
            if ki in (0, 2):
                for dims in SHAPES[2::2]:
                    for causal in (False, True):
                        plans.append((ki, k, dims, causal, "bfloat16"))
        for causal in (False, True):
            for dt in ("float16", "bfloat16"):
                plans.append((0, knob_sets[0], BIG, causal, dt))
    mods = {}
    refs = {}
    for ki, k, dims, causal, dt in plans:
        if time.monotonic() > deadline:
            log({"part": "check", "skipped": "time budget", "knobs": k, "dims": dims})
            continue
        row = {"part": "check", "knobs": k, "dims": dims, "causal": causal, "dtype": dt}
        try:
            if ki not in mods:
                t0 = time.monotonic()
                mods[ki] = load(t.render(dict(t.defaults(), **k), "cuda"), f"wg{ki}").kernel
                row["load_s"] = round(time.monotonic() - t0, 2)
            task = _task(causal, dt)
            key = (dims, causal, dt)
            xs = _inputs(task, dims)
            if key not in refs:
                ref = load(task.reference, "reference").reference(*xs)
                sd = load(task.baseline_source(), "baseline").baseline(*xs)
                mx.eval(ref, sd)
                refs = {key: (ref, _err(sd, ref))}   # keep one: L=4096's fp32 reference is large
            ref, sdpa_err = refs[key]
            t0 = time.monotonic()
            out = mods[ki](*xs)
            mx.eval(out)
            row["first_call_s"] = round(time.monotonic() - t0, 2)
            e = _err(out, ref)
            nan = bool(mx.any(mx.isnan(out.astype(mx.float32))).item())
            # fp16/bf16 outputs: the task's tolerance (2e-3 / 2e-2 relative-ish); judge against SDPA's own error too
            tol = max(4 * sdpa_err, 4e-3 if dt == "float16" else 3e-2)
            row.update(max_err=e, sdpa_err=sdpa_err, nan=nan, ok=(e <= tol and not nan))
        except Exception as ex:  # noqa: BLE001
            row["error"] = f"{type(ex).__name__}: {str(ex)[:1500]}"
            row["ok"] = False
        log(row)


# ----------------------------------------------------------------------------------------------------------- time

def part_time(knob_sets: list[dict], deadline: float, gqa: bool = True) -> None:
    import mlx.core as mx

    from common import GpuTimer, as_tuple, input_sets, load, measure
    from ksearch_engine import families as F
    from ksearch_engine.task import Workload

    gpu = GpuTimer()
    log({"part": "time", "device": str(mx.device_info().get("device_name", "")), "gpu_timer": gpu.ok or gpu.why})
    fam = F.get("attention")
    t = fam.template(TID)
    cands = [("flash_mma2 " + json.dumps(MMA2), fam.template("attention.flash_mma2").render(
        dict(fam.template("attention.flash_mma2").defaults(), **MMA2), "cuda"))]
    cands += [("flash_wgmma " + json.dumps(k), t.render(dict(t.defaults(), **k), "cuda")) for k in knob_sets]
    mods = {name: load(src, "c").kernel for name, src in cands}
    shapes = [("mha", BIG, False), ("mha", BIG, True), ("gqa", (1, 32, 8, 4096, 128), False)]
    for label, dims, causal in shapes:
        if time.monotonic() > deadline:
            log({"part": "time", "skipped": "time budget", "shape": label, "causal": causal})
            continue
        task = _task(causal, "float16")
        wl = Workload(name=label, dims=dict(zip(("Bt", "Hq", "Hkv", "L", "Dh"), dims)))
        sets, _ = input_sets(task, wl)
        flops = 4.0 * dims[0] * dims[1] * dims[3] * dims[3] * dims[4] / (2 if causal else 1)
        base = load(task.baseline_source(), "baseline").baseline
        b_out = as_tuple(base(*sets[0]))[0]
        mx.eval(b_out)
        m = measure(base, sets, gpu)
        bms = m["gpu_ms"] or m["wall_ms"]
        log({"part": "time", "shape": label, "dims": dims, "causal": causal, "cand": "sdpa (cuDNN)", **m,
             "tflops": flops / (bms * 1e-3) / 1e12})
        for ci, (name, fn) in enumerate(mods.items()):
            if time.monotonic() > deadline or (label == "gqa" and not gqa and ci > 1):
                break   # quick: GQA for flash_mma2 and the first knob set only
            row = {"part": "time", "shape": label, "dims": dims, "causal": causal, "cand": name}
            try:
                out = fn(*sets[0])
                mx.eval(out)
                row["err_vs_sdpa"] = _err(out, b_out)
                if row["err_vs_sdpa"] > 0.05:
                    row["status"] = "disagrees with SDPA"
                else:
                    m = measure(fn, sets, gpu)
                    ms = m["gpu_ms"] or m["wall_ms"]
                    row.update(m, tflops=flops / (ms * 1e-3) / 1e12, vs_sdpa=bms / ms)
            except Exception as ex:  # noqa: BLE001
                row["error"] = f"{type(ex).__name__}: {str(ex)[:800]}"
            log(row)
        del sets
        mx.clear_cache()


# ----------------------------------------------------------------------------------------------------------- main

def _run_part(part: str, knobs: list[dict], budget: float, lines: list, quick: bool = False) -> None:
    cmd = [sys.executable, __file__, "--part", part, "--knobs", json.dumps(knobs), "--budget-s", str(budget)]
    cmd += ["--quick"] if quick else []
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=budget + 30)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, rc = "timeout", "timeout"
    for ln in out.splitlines():
        print(ln, flush=True)
        try:
            lines.append(json.loads(ln))
        except ValueError:
            pass
    print(json.dumps({"part": part, "rc": rc, "seconds": round(time.monotonic() - t0, 1),
                      "stderr_tail": err[-2500:] if rc else ""}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="")
    ap.add_argument("--knobs", default="")
    ap.add_argument("--budget-s", type=float, default=170.0)
    ap.add_argument("--skip", default="")
    ap.add_argument("--quick", action="store_true", help="check: one GQA shape per knob set (+ Dh 64, bf16 for some)")
    ap.add_argument("--check-s", type=float, default=0.0, help="seconds for the check part (default: 45%% of the rest)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "wgmma_check.json"))
    args = ap.parse_args()
    knobs = json.loads(args.knobs) if args.knobs else KNOBS
    if args.part:
        deadline = time.monotonic() + args.budget_s
        {"micro": lambda: part_micro(), "check": lambda: part_check(knobs, deadline, args.quick),
         "time": lambda: part_time(knobs, deadline, not args.quick)}[args.part]()
        return
    t0 = time.monotonic()
    lines: list = []
    skip = set(args.skip.split(","))
    if "micro" not in skip:
        _run_part("micro", knobs, 40, lines)
    if "check" not in skip:
        _run_part("check", knobs, args.check_s or max(30.0, 0.45 * (args.budget_s - (time.monotonic() - t0))), lines,
                  args.quick)
    # time only the knob sets that were right everywhere they ran
    checked = [r for r in lines if r.get("part") == "check" and "knobs" in r and "skipped" not in r]
    good = [k for k in knobs if any(r["knobs"] == k for r in checked)
            and all(r.get("ok") for r in checked if r["knobs"] == k)] if "check" not in skip else knobs
    log({"part": "main", "timing": good})
    if good and "time" not in skip:
        _run_part("time", good, max(30.0, args.budget_s - (time.monotonic() - t0) - 10), lines, args.quick)
    rows = [r for r in lines if r.get("part") == "time" and "cand" in r]
    print("\nGPU time per call (torch.profiler), B1 H32 L4096 D128 fp16:")
    for r in rows:
        ms = r.get("gpu_ms") or r.get("wall_ms")
        print(f"  {r['shape']:<4} causal={str(r['causal']):<5} {r['cand']:<80} "
              + (f"{ms:.4f} ms {r.get('tflops', 0):6.0f} TFLOP/s  vs sdpa {r.get('vs_sdpa', 1.0):.2f}x"
                 if ms else r.get("status", r.get("error", ""))[:120]))
    Path(args.out).write_text(json.dumps(lines, indent=1, default=str))
    print(f"wrote {args.out} in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
