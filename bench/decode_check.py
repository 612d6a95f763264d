"""Correctness of every decode / paged_decode gqa_async bench knob set (and gqa_tiles' two) on the task's small
workloads, several calls each with fresh inputs, in one process: a wrong or flaky split-KV kernel shows here with
its workload and error, apart from any timing. GPU machine:  python3 bench/decode_check.py [--families decode,paged_decode]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from common import as_tuple, compare, load, to_mx  # noqa: E402
from families import SWEEPS, candidate_source  # noqa: E402
from ksearch_engine import families as F  # noqa: E402


def check(name: str, sets, calls: int) -> int:
    """Check each (template, knobs) of `sets` of family `name` on the task's small workloads, `calls` seeds each;
    print a line a set (and the wrong rows); return how many sets were wrong."""
    fam = F.get(name)
    task = fam.make_task()
    ref = load(task.reference, "reference").reference
    bad = 0
    for tname, knobs in sets:
        src, label = candidate_source(fam, tname, knobs)
        fn = load(src).kernel
        errs = []
        for wl in task.workloads:
            for seed in range(calls):
                xs = to_mx(task, task.make_inputs(wl, seed))
                exp = [mx.array(x) for x in as_tuple(ref(*xs))]
                got = as_tuple(fn(*xs))
                ok, worst = compare(task, got, exp)
                errs.append((wl.name, seed, ok, worst))
                if not ok:   # where: the (sequence, head) rows that are off, and by how much
                    d = np.abs(np.array(got[0].astype(mx.float32)) - np.array(exp[0].astype(mx.float32)))
                    rows = d.reshape(d.shape[0], d.shape[1], -1).max(-1)
                    print(f"    {wl.name} seed {seed}: row max |err| (sequence x head)\n{np.array2string(rows, precision=2)}")
        wrong = [e for e in errs if not e[2]]
        bad += bool(wrong)
        print(f"{'ok   ' if not wrong else 'WRONG'} {label}: "
              + (", ".join(f"{w} seed {s} excess {x:.3g}" for w, s, _, x in wrong) or f"{len(errs)} calls"), flush=True)
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="decode,paged_decode")
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()
    bad = sum(check(name, SWEEPS[name], a.calls) for name in a.families.split(","))
    print(f"{bad} wrong")


if __name__ == "__main__":
    main()
