"""Issue 14's table from one H200 session: `ksearch optimize` (the search, 24 evaluations, GPU time) against
bench/families.py's fixed sweep on the same families, and optimize's speedups on corpus kernels.

    python bench/optimize_summary.py DIR [DIR...] [--markdown OUT.md]

DIR holds what bench/optimize_h200.sh left: show_<name>.json (one run each) and families_issue14.json.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

FAMILIES = ("softmax", "layernorm", "decode", "scan")


def run_figures(show: dict) -> dict:
    """Best passing timed candidate of a run: its GPU/wall median at the last timing workload, the baseline op's,
    the root's (the user's kernel as written), and the evaluations' durations."""
    cands = sorted(show.get("candidates", []), key=lambda c: c.get("seq", 0))
    timed, evals = [], []
    for c in cands:
        r = c.get("result") or {}
        if r.get("eval_ms"):
            evals.append(r["eval_ms"] / 1e3)
        t = r.get("timing")
        if r.get("status") == "passed" and t and r.get("complete", True):   # staged checks that stopped: no best
            timed.append((c, t))
    if not timed:
        return {"evaluations": len(cands), "eval_s": evals}
    root = timed[0] if timed[0][0].get("plan") in (None, "", "original") or timed[0][0].get("seq") == 1 else None
    best_c, best_t = min(timed, key=lambda ct: ct[1]["median_ms"])
    out = {"evaluations": len(cands), "eval_s": evals, "workload": best_t["workload"],
           "best_ms": best_t["median_ms"], "baseline_ms": best_t["baseline_ms"],
           "vs_baseline": best_t["baseline_ms"] / best_t["median_ms"], "method": best_t["method"].split(":")[0],
           "best_seq": best_c.get("seq"), "best_plan": best_c.get("plan", "")}
    if root is not None:
        out["original_ms"] = root[1]["median_ms"]
        out["vs_original"] = root[1]["median_ms"] / best_t["median_ms"]
    return out


def families_best(path: Path) -> dict:
    d = json.loads(path.read_text())
    out = {}
    for s in d.get("summaries", []):
        b, base = s.get("best") or {}, s.get("base") or {}
        if b.get("gpu_ms") and base.get("gpu_ms"):
            out[s["family"]] = {"workload": s["workload"], "best_ms": b["gpu_ms"], "baseline_ms": base["gpu_ms"],
                                "speedup": base["gpu_ms"] / b["gpu_ms"], "candidate": b.get("candidate", "")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--markdown")
    ap.add_argument("--families", help="a bench/families.py output to compare with (default: families_issue14.json in DIR)")
    a = ap.parse_args()
    shows, fam = {}, {}
    for d in map(Path, a.dirs):
        for f in sorted(d.glob("show_*.json")):
            try:
                shows[f.stem[5:]] = run_figures(json.loads(f.read_text()))
            except (ValueError, OSError) as e:
                shows[f.stem[5:]] = {"error": str(e)}
        if (d / "families_issue14.json").exists():
            fam = families_best(d / "families_issue14.json")
    if a.families:
        fam = families_best(Path(a.families))
    lines = ["| family | optimize best (ms) | vs baseline op | families.py best (ms) | vs baseline op | share of families.py's speedup | evaluations | median s/eval |",
             "|---|---|---|---|---|---|---|---|"]
    for f in FAMILIES:
        r, b = shows.get(f, {}), fam.get(f, {})
        ev = sorted(r.get("eval_s", []))
        med = f"{ev[len(ev) // 2]:.1f}" if ev else "-"
        share = f"{r['vs_baseline'] / b['speedup']:.0%}" if r.get("vs_baseline") and b.get("speedup") else "-"
        lines.append(f"| {f} | {r.get('best_ms', float('nan')):.4g} ({r.get('method', '-')}) | {r.get('vs_baseline', float('nan')):.2f}x "
                     f"| {b.get('best_ms', float('nan')):.4g} | {b.get('speedup', float('nan')):.2f}x | {share} | {r.get('evaluations', 0)} | {med} |")
    lines += ["", "| kernel | original (ms) | best (ms) | vs original | vs baseline column | evaluations | method |", "|---|---|---|---|---|---|---|"]
    for name, r in shows.items():
        if name in FAMILIES:
            continue
        lines.append(f"| {name} | {r.get('original_ms', float('nan')):.4g} | {r.get('best_ms', float('nan')):.4g} | "
                     f"{r.get('vs_original', float('nan')):.2f}x | {r.get('vs_baseline', float('nan')):.2f}x | {r.get('evaluations', 0)} | {r.get('method', '-')} |")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        Path(a.markdown).write_text(text + "\n")


if __name__ == "__main__":
    main()
