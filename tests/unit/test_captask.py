"""The captured task (ksearch_engine/captask.py): the user's kernel on the launches its program made.

Built from the real port of tests/data/optimize/saxpy.cu and launches recorded as a Capture (capture_models) whose
contents are real .npy files; evaluated in the real simulator against the original CUDA source."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ksearch_engine.captask import (CapturedTaskError, build_captured_task, launches_from_capture,
                                    module_constant)
from ksearch_engine.evaluate import Evaluator
from ksearch_engine.portfile import port_file
from ksearch_engine.sim.capture_models import ArgRecord, Capture, LaunchRecord

SAXPY = Path(__file__).parents[1] / "data" / "optimize" / "saxpy.cu"


@pytest.fixture(scope="module")
def saxpy_port() -> str:
    r = port_file(SAXPY, kernels=["saxpy"], write=False)
    assert r.kernels[0].status == "verified", r.text()
    return r.kernels[0].module_text


def capture_of(tmp: Path, sizes: list[int]) -> Capture:
    """Launches of saxpy(n, a, x, y) as a capture records them: contents before and after, as .npy files."""
    rng = np.random.default_rng(1)
    launches = []
    for i, n in enumerate(sizes):
        x, y = rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32)
        a = 1.5 + i
        for name, arr in (("x", x), ("y", y), ("y_after", (a * x + y).astype(np.float32))):
            np.save(tmp / f"l{i}_{name}.npy", arr)
        launches.append(LaunchRecord(index=i, kernel="saxpy", grid=(-(-n // 128), 1, 1), block=(128, 1, 1), args=[
            ArgRecord(name="n", ctype="int", kind="scalar", value=n),
            ArgRecord(name="a", ctype="float", kind="scalar", value=a),
            ArgRecord(name="x", ctype="const float*", kind="buffer", dtype="float32", before=f"l{i}_x.npy"),
            ArgRecord(name="y", ctype="float*", kind="buffer", dtype="float32", before=f"l{i}_y.npy",
                      after=f"l{i}_y_after.npy", written=True)]))
    return Capture(file=str(SAXPY), dir=str(tmp), launches=launches)


def test_inputs_are_the_kernels_arguments_outputs_every_written_buffer_and_timing_uses_the_largest_launch(
        tmp_path, saxpy_port):
    cap = capture_of(tmp_path, [300, 1000, 5000])
    ct = build_captured_task(saxpy_port, SAXPY.read_text(), "saxpy", launches_from_capture(cap, "saxpy"),
                             source_file=str(SAXPY))
    t = ct.task
    assert [i.name for i in t.inputs] == ["n", "a", "x", "y"] and t.outputs == ["y"]
    assert t.origin == "captured" and t.initial == ct.root
    assert [w.dims["x_len"] for w in t.workloads] == [300, 1000]
    assert [w.dims["x_len"] for w in t.bench_workloads] == [5000]      # timing never on a correctness shape
    # the first seed gives the captured contents exactly; later seeds redraw float buffers in their range
    first = t.make_inputs(t.workloads[0], t.seeds[0])
    assert int(first[0][0]) == 300 and first[1][0] == pytest.approx(1.5)
    np.testing.assert_array_equal(first[2], np.load(tmp_path / "l0_x.npy"))
    later = t.make_inputs(t.workloads[0], t.seeds[1])
    assert int(later[0][0]) == 300 and not np.array_equal(later[2], first[2])
    assert later[2].min() >= first[2].min() and later[2].max() <= first[2].max()
    # the root is the port as is: its kernel body is the user's statement
    assert "y[i] = a * x[i] + y[i];" in module_constant(ct.root, "LAUNCH_CUDA_SOURCE")


def test_the_root_matches_the_original_in_the_simulator_and_a_wrong_kernel_does_not(tmp_path, saxpy_port):
    cap = capture_of(tmp_path, [200, 700])
    ct = build_captured_task(saxpy_port, SAXPY.read_text(), "saxpy", launches_from_capture(cap, "saxpy"),
                             source_file=str(SAXPY))
    wrong = ct.root.replace("y[i] = a * x[i] + y[i];", "y[i] = a * x[i];")
    assert wrong != ct.root
    with Evaluator(ct.task, backend="sim") as ev:
        ok = ev.evaluate(ct.root, timing=False)
        bad = ev.evaluate(wrong, timing=False)
    assert ok.status == "passed", ok.message
    assert bad.status == "failed" and bad.worst.output == "y"


def test_a_kernel_that_writes_nothing_or_has_no_launch_gives_no_task(tmp_path, saxpy_port):
    with pytest.raises(CapturedTaskError, match="no launch"):
        build_captured_task(saxpy_port, SAXPY.read_text(), "saxpy", [], source_file=str(SAXPY))
    no_writes = saxpy_port.replace("'written': True", "'written': False")
    cap = capture_of(tmp_path, [100])
    with pytest.raises(CapturedTaskError, match="writes no buffer"):
        build_captured_task(no_writes, SAXPY.read_text(), "saxpy", launches_from_capture(cap, "saxpy"))


NONCONST_READ = """
__global__ void scale_into(float* out, float* in, float s, int n) {   // `in` is not const, only read
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = s * in[i];
}
"""


def test_a_buffer_only_read_is_an_input_even_when_its_pointer_is_not_const(tmp_path):
    """A non-const pointer the kernel never stores to and no captured launch changed is an input of the task:
    candidates return only what the kernel writes, and the task says so."""
    src = tmp_path / "scale.cu"
    src.write_text(NONCONST_READ)
    r = port_file(src, kernels=["scale_into"], write=False)
    module = r.kernels[0].module_text
    params = {p["name"]: p for p in module_constant(module, "PARAMS")}
    assert params["in"]["written"] and not params["in"]["stored"] and params["out"]["stored"]
    n = 256
    x = np.linspace(-1, 1, n, dtype=np.float32)
    np.save(tmp_path / "in.npy", x)
    np.save(tmp_path / "out0.npy", np.zeros(n, np.float32))
    np.save(tmp_path / "out1.npy", (2.0 * x).astype(np.float32))
    rec = LaunchRecord(index=0, kernel="scale_into", grid=(2, 1, 1), block=(128, 1, 1), args=[
        ArgRecord(name="out", ctype="float*", kind="buffer", dtype="float32", before="out0.npy", after="out1.npy",
                  written=True),
        ArgRecord(name="in", ctype="float*", kind="buffer", dtype="float32", before="in.npy"),
        ArgRecord(name="s", ctype="float", kind="scalar", value=2.0),
        ArgRecord(name="n", ctype="int", kind="scalar", value=n)])
    cap = Capture(file=str(src), dir=str(tmp_path), launches=[rec])
    ct = build_captured_task(module, NONCONST_READ, "scale_into", launches_from_capture(cap, "scale_into"),
                             source_file=str(src))
    assert ct.task.outputs == ["out"]
