"""The sandbox's limits do not break MLX's CUDA backend: on an NVIDIA machine the confined, unprivileged
worker still sees the GPU, runs op and cuda_kernel candidates, times them, and still catches attacks.

Run on the device machine (skipped elsewhere):
    python -m pytest -q tests/gpu/test_sandbox_cuda.py
or, where pytest is not installed (the device image), as a script that prints each result:
    PYTHONPATH=. python tests/gpu/test_sandbox_cuda.py
"""
import os
import sys

try:
    import pytest
except ImportError:  # the device machine may have no pytest: see __main__ below
    pytest = None

import mlx.core as mx

if pytest is not None and __name__ != "__main__" and not (hasattr(mx, "cuda") and mx.cuda.is_available()):
    pytest.skip("needs MLX's CUDA backend (an NVIDIA GPU)", allow_module_level=True)

from ksearch_engine.evaluate import Evaluator, Limits  # noqa: E402
from ksearch_engine.task import InputSpec, KernelTask, Workload  # noqa: E402

if pytest is not None:
    pytestmark = pytest.mark.gpu

TASK = KernelTask(
    name="row-softmax", family="softmax",
    inputs=[InputSpec(name="x", shape=["R", "C"], dtype="float16", init="normal", low=-3, high=3)],
    outputs=["y"],
    reference="import mlx.core as mx\n\ndef reference(x):\n    return mx.softmax(x.astype(mx.float32), axis=-1).astype(x.dtype)\n",
    workloads=[Workload(name="small", dims={"R": 16, "C": 128}), Workload(name="ragged", dims={"R": 5, "C": 77})],
    bench_workloads=[Workload(name="bench", dims={"R": 4096, "C": 4096})], seeds=[0, 1])

OPS = """
import mlx.core as mx

def kernel(x):
    return mx.softmax(x.astype(mx.float32), axis=-1).astype(x.dtype)
"""

CUDA = '''
import mlx.core as mx

_K = mx.fast.cuda_kernel(name="row_softmax", input_names=["x"], output_names=["y"], source="""
    const int row = blockIdx.x;
    const int cols = x_shape[1];
    const T* xr = x + (size_t)row * cols;
    T* yr = y + (size_t)row * cols;
    if (threadIdx.x != 0) return;
    float m = -3.0e38f;
    for (int i = 0; i < cols; ++i) m = fmaxf(m, static_cast<float>(xr[i]));
    float s = 0.0f;
    for (int i = 0; i < cols; ++i) s += expf(static_cast<float>(xr[i]) - m);
    for (int i = 0; i < cols; ++i) yr[i] = static_cast<T>(expf(static_cast<float>(xr[i]) - m) / s);
""")

def kernel(x):
    return _K(inputs=[x], template=[("T", x.dtype)], grid=(x.shape[0] * 32, 1, 1), threadgroup=(32, 1, 1),
              output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''

GARBAGE_WHEN_TIMED = """
import mlx.core as mx
_calls = [0]

def kernel(x):
    _calls[0] += 1
    if _calls[0] > 8:
        return mx.zeros_like(x)
    return mx.softmax(x.astype(mx.float32), axis=-1).astype(x.dtype)
"""

SOCKET = """
import socket
import mlx.core as mx

def kernel(x):
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    except OSError:
        pass
    return mx.softmax(x.astype(mx.float32), axis=-1).astype(x.dtype)
"""


def _evaluator() -> Evaluator:
    return Evaluator(TASK, "mlx-cuda", limits=Limits(wall_s=120), repeats=10, warmup=2)


if pytest is not None:
    @pytest.fixture(scope="module")
    def ev():
        with _evaluator() as e:
            yield e


def test_confined_worker_sees_the_gpu_and_times_an_ops_candidate(ev):
    r = ev.evaluate(OPS)
    assert r.status == "passed", f"{r.message}\n{r.log_tail}"
    assert r.backend == "mlx-cuda" and r.device, r
    assert r.timing and r.timing.workload == "bench" and r.timing.median_ms > 0
    print("sandbox applied on mlx-cuda:", r.sandbox)
    print("timing:", r.timing.median_ms, "ms vs baseline", r.timing.baseline_ms, "ms")
    if os.geteuid() == 0:
        # where the GPU device files allow it, the worker runs as a uid of its own; say which it was
        assert r.sandbox.get("user"), r.sandbox


def test_cuda_kernel_candidate_compiles_and_runs_in_the_sandbox(ev):
    r = ev.evaluate(CUDA)
    assert r.status == "passed", f"{r.message}\n{r.log_tail}"
    assert r.kind == "cuda" and r.timing is not None


def test_attacks_are_still_caught_on_the_gpu(ev):
    r = ev.evaluate(GARBAGE_WHEN_TIMED)
    assert r.status == "cheating" and "while being timed" in r.message, r.message
    r = ev.evaluate(SOCKET)
    assert r.status == "cheating" and "network" in r.message, r.message
    assert ev.evaluate(OPS).status == "passed"


def test_memory_limit_is_not_applied_on_cuda_and_the_rest_are(ev):
    """RLIMIT_AS breaks CUDA's address-space reservations, so it is skipped on mlx-cuda; the others hold."""
    r = ev.evaluate(OPS, timing=False)
    assert "as" not in r.sandbox["rlimits"]
    assert {"cpu", "fsize", "nproc", "nofile"} <= set(r.sandbox["rlimits"])


if __name__ == "__main__":
    if not (hasattr(mx, "cuda") and mx.cuda.is_available()):
        sys.exit("needs MLX's CUDA backend (an NVIDIA GPU)")
    failed = 0
    with _evaluator() as e:
        for name, fn in list(globals().items()):
            if name.startswith("test_") and callable(fn):
                try:
                    fn(e)
                    print(f"PASS {name}")
                except Exception as exc:  # noqa: BLE001 - report every test, then exit non-zero
                    failed += 1
                    print(f"FAIL {name}: {type(exc).__name__}: {exc}")
    sys.exit(1 if failed else 0)
