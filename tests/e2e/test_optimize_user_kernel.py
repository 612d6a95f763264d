"""`ksearch optimize FILE --kernel K` on the user's own CUDA programs that are no family and have no task file
(a saxpy and a shared-memory histogram, each with a main()): the run starts from the user's kernel ported as is,
every candidate is an edit of that code checked in the real simulator against the original, and the best is a
drop-in replacement of the port: its launch() leaves the same buffers as the original on every launch the
program made."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ksearch_engine.sim import install_mlx_shim, run_cuda_source, uninstall_mlx_shim
from ksearch_engine.sim.capture import capture_program
from ksearch_engine.store import Store

DATA = Path(__file__).parents[1] / "data" / "optimize"


def optimize(tmp: Path, name: str, kernel: str, budget: int = 3) -> tuple[subprocess.CompletedProcess, Path]:
    src = tmp / f"{name}.cu"
    shutil.copy(DATA / f"{name}.cu", src)
    db = tmp / "ks.db"
    p = subprocess.run([sys.executable, "-m", "ksearch_engine.cli", "--store", str(db), "optimize", str(src),
                        "--kernel", kernel, "--budget", str(budget)], capture_output=True, text=True, timeout=900,
                       cwd=tmp, env={**os.environ, "COLUMNS": "200"})
    return p, db


def drop_in(source: str, cu: Path, kernel: str) -> int:
    """Runs the candidate module's launch() on each launch the program made (simulator) and compares every
    buffer with what the original left there. Returns the number of launches checked."""
    cap = capture_program(cu)
    install_mlx_shim()
    try:
        mod: dict = {}
        exec(compile(source, "<best>", "exec"), mod)
        checked = 0
        for rec in cap.launches_of(kernel):
            args = {a.name: (cap.load(a.before) if a.kind == "buffer" else a.value) for a in rec.args}
            want = run_cuda_source(cu.read_text(), kernel, rec.grid, rec.block,
                                   {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()},
                                   rec.shared_mem, filename=cu.name, check_races=False, strict_barriers=False)
            got = mod["launch"](*[mx.array(args[a.name]) if a.kind == "buffer" else args[a.name] for a in rec.args],
                                grid=rec.grid, block=rec.block, shared_mem=rec.shared_mem)
            written = [a.name for a in rec.args if a.kind == "buffer" and a.written]
            assert written and set(written) <= set(got)
            for n in written:
                np.testing.assert_allclose(np.array(got[n]).reshape(-1), np.asarray(want[n]).reshape(-1),
                                           rtol=1e-5, atol=1e-5)
            checked += 1
        return checked
    finally:
        uninstall_mlx_shim()


@pytest.mark.parametrize("name,kernel,body", [("saxpy", "saxpy", "y[i] = a * x[i] + y[i];"),
                                              ("histogram", "histogram", "atomicAdd(&local[data[i]], 1u)")])
def test_optimize_starts_from_the_users_kernel_and_offers_a_drop_in_replacement(tmp_path, name, kernel, body):
    p, db = optimize(tmp_path, name, kernel)
    if "atomic on shared memory" in p.stdout + p.stderr:
        pytest.xfail("the translator does not port atomics on shared memory yet (translate/*): no verified port")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "its verified port on" in p.stdout and "captured launch" in p.stdout
    assert not list(tmp_path.glob("*.task.toml")), "no task file is needed"
    store = Store(str(db))
    run = store.runs()[0]
    cands = store.candidates(run["id"])
    root = cands[0]
    assert root["plan"] == "original" and root["status"] == "passed"
    from ksearch_engine.propose.transforms import bodies, get_const
    assert body.split("(")[0] in get_const(root["source"], "LAUNCH_CUDA_SOURCE")     # the user's own statement
    assert len(cands) >= 3
    for c in cands[1:]:
        # every candidate is the user's port edited: same parameters, same captured geometry, other kernel text
        assert get_const(c["source"], "PARAMS") == get_const(root["source"], "PARAMS")
        assert get_const(c["source"], "KS_GEOMETRY") == get_const(root["source"], "KS_GEOMETRY")
        assert c["source"] != root["source"] and bodies(c["source"])
        assert c["result"]["timing"] is None              # the simulator never times
    best = store.candidate(run["best_candidate"])
    assert best is not None and best["status"] == "passed" and best["id"] != root["id"]
    assert "not timed" in p.stdout
    assert drop_in(best["source"], tmp_path / f"{name}.cu", kernel) >= 2
