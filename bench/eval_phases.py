"""Where each evaluation's time went: per candidate of a run, eval_ms and its phases (EvalResult.phases).

    python bench/eval_phases.py SHOW.json [SHOW.json ...]     (files written by `ksearch show RUN --json`)
"""
from __future__ import annotations

import json
import sys


def main(paths: list[str]) -> None:
    for p in paths:
        d = json.load(open(p))
        print(f"== {p}")
        for c in sorted(d.get("candidates", []), key=lambda c: c.get("seq", 0)):
            r = c.get("result") or {}
            t = r.get("timing") or {}
            top = ", ".join(f"{k} {v / 1e3:.2f}" for k, v in list((r.get("phases") or {}).items())[:8])
            print(f"#{c.get('seq')} {r.get('status')} {r.get('eval_ms', 0) / 1e3:.1f} s "
                  f"(median {t.get('median_ms', float('nan')):.4g} ms, {t.get('repeats', 0)} repeats): {top}")


if __name__ == "__main__":
    main(sys.argv[1:])
