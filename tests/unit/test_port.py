"""Port to MLX as a job: translate a CUDA kernel, check the Metal and CUDA-backend ports against the ORIGINAL
kernel (run in the CPU simulator), and store the module as a candidate to accept."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ksearch_engine.events import SearchRequest
from ksearch_engine.port import pinned, port_task, translate_file
from ksearch_engine.evaluate import Evaluator
from ksearch_engine.store import Store
from ksearch_engine.worker import run_job

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU simulator needs g++")


def test_port_job_stores_a_sim_verified_module(tmp_path):
    src = tmp_path / "softmax.cu"
    shutil.copy(ROOT / "examples/softmax/softmax.cu", src)
    events = []
    req = SearchRequest(kind="port", store_path=str(tmp_path / "k.db"), source_file=str(src), backend="sim")
    done = run_job(req, emit=events.append)
    assert done.status == "done", done.message
    store = Store(tmp_path / "k.db")
    cand = store.candidate(done.best_candidate)
    assert cand["status"] == "passed"
    assert cand["target_file"] == str(tmp_path / "softmax_mlx.py")
    assert "mx.fast.metal_kernel" in cand["target_text"] and "mx.fast.cuda_kernel" in cand["target_text"]
    checks = cand["result"]["port_checks"]
    assert checks["metal"]["status"] == checks["cuda"]["status"] == "passed"
    assert cand["result"]["timing"] is None  # the simulator never yields a time
    assert [e.type for e in events][-1] == "done" and any(e.type == "stage" for e in events)


def test_a_wrong_port_fails_against_the_original(tmp_path):
    src = tmp_path / "gelu.cu"
    shutil.copy(ROOT / "examples/gelu/gelu.cu", src)
    parsed, k, tr = translate_file(str(src), None)
    task = port_task(parsed.source, k, tr, str(src))
    wrong = tr.module_text.replace("tanh", "sin")
    assert wrong != tr.module_text
    with Evaluator(task, "sim") as ev:
        assert ev.evaluate(pinned(tr.module_text, "metal"), timing=False).status == "passed"
        r = ev.evaluate(pinned(wrong, "metal"), timing=False)
    assert r.status == "failed" and r.worst is not None


def test_a_file_without_kernels_is_a_clear_failure(tmp_path):
    src = tmp_path / "notes.cu"
    src.write_text("This is not CUDA at all, just notes.\n")
    done = run_job(SearchRequest(kind="port", store_path=str(tmp_path / "k.db"), source_file=str(src)), emit=lambda e: None)
    assert done.status == "failed" and "notes.cu" in done.message and "no CUDA kernel" in done.message


def test_cli_port_writes_the_module_and_keeps_user_edits(tmp_path):
    src = tmp_path / "rmsnorm.cu"
    shutil.copy(ROOT / "examples/rmsnorm/rmsnorm.cu", src)
    run = lambda *a: subprocess.run([sys.executable, "-m", "ksearch_engine.cli", "--store", str(tmp_path / "k.db"), "port", str(src), *a],
                                    capture_output=True, text=True, timeout=600)
    r = run()
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "rmsnorm_mlx.py"
    assert out.exists() and "verified" in r.stdout.lower() or "match" in r.stdout
    out.write_text(out.read_text() + "\n# my edit\n")
    r2 = run()
    assert r2.returncode == 1 and "not overwritten" in r2.stderr
    assert out.read_text().endswith("# my edit\n")


def test_porting_a_metal_file_says_it_is_not_cuda_and_what_to_do_instead(tmp_path):
    from ksearch_engine.port import PortError
    src = tmp_path / "add.metal"
    src.write_text("#include <metal_stdlib>\nusing namespace metal;\n"
                   "kernel void add_one(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n"
                   "                    uint i [[thread_position_in_grid]]) { y[i] = x[i] + 1.0f; }\n")
    with pytest.raises(PortError) as e:
        translate_file(str(src), None)
    msg = str(e.value)
    assert "add.metal" in msg and "add_one (metal)" in msg and "ksearch optimize add.metal" in msg


def test_an_internal_error_says_so_and_where_its_trace_is(tmp_path, monkeypatch):
    # a fault of ksearch's own (not the user's input) is not shown as a bare `NameError: ...`: the message says it is
    # ksearch's, that nothing of the user's changed, and where the trace is kept (the run's log_tail)
    import ksearch_engine.port as port_mod

    def broken(req, store, emit):
        raise NameError("name 're' is not defined")
    monkeypatch.setattr(port_mod, "run_port", broken)
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    req = SearchRequest(kind="port", store_path=str(tmp_path / "k.db"), source_file=str(src), backend="sim")
    done = run_job(req, emit=lambda e: None)
    assert done.status == "failed"
    assert done.message.startswith("ksearch hit an internal error (NameError: name 're' is not defined)")
    assert f"ksearch show {req.run_id} --json" in done.message
    assert "NameError" in (Store(tmp_path / "k.db").run(req.run_id) or {}).get("log_tail", "")
