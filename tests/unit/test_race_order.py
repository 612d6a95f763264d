"""The race check's allowances: results that the thread order legitimately decides (atomicExch / atomicCAS,
atomic slots, clock readings) are not races, and are left out of the port comparison with a note; a result
that depends on the order for any other reason (a missing barrier), or a port that is order-dependent where
the original is not, is still rejected. Kernels written for these tests."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

sim = pytest.importorskip("ksearch_engine.sim", reason="the CPU simulator (ksearch_engine/sim) is not installed")
if shutil.which("g++") is None and shutil.which("c++") is None:
    pytest.skip("the CPU simulator needs a C++ compiler", allow_module_level=True)

from ksearch_engine.sim import SimError, run_cuda_source, run_mlx_kernel  # noqa: E402

TALLY = """
__global__ void tally(const int* keys, int* stats, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int k = keys[i];
  atomicAdd(&stats[0], k);
  atomicMax(&stats[1], k);
  atomicMin(&stats[2], k);
  atomicOr(&stats[3], 1 << (k & 15));
  atomicXor(&stats[4], k);
  atomicInc((unsigned*)&stats[5], 9u);
  atomicExch(&stats[6], i);
  atomicCAS(&stats[7], i - 1, i);
}
"""


def _tally_args():
    keys = np.random.default_rng(3).integers(0, 100, 256).astype(np.int32)
    stats = np.zeros(8, np.int32)
    stats[2] = 1 << 30
    return {"keys": keys, "stats": stats, "n": 256}


def test_order_independent_atomics_are_deterministic_and_exchange_cas_are_named():
    res = run_cuda_source(TALLY, "tally", (4, 1, 1), (64, 1, 1), _tally_args())
    a = _tally_args()["keys"]
    assert res["stats"][0] == a.sum() and res["stats"][1] == a.max() and res["stats"][2] == a.min()
    od = res.order_dependence["stats"]
    assert set(np.flatnonzero(od.atomic)) <= {6, 7} and od.atomic.any()   # add..inc are order-independent
    assert not od.clock.any() and not od.multiset
    assert "atomicExch/atomicCAS" in od.describe("stats")


def test_threads_storing_the_same_value_to_one_place_are_not_a_race():
    src = """
__global__ void mark(const int* nbr, int* seen, int* level, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int j = nbr[i];
  seen[j] = 1;                 // many threads, one value
  level[j] = level[0] + 1;     // the same value from every writer too
}
"""
    nbr = (np.arange(256, dtype=np.int32) * 7) % 16 + 1
    res = run_cuda_source(src, "mark", (4, 1, 1), (64, 1, 1), {"nbr": nbr, "seen": np.zeros(32, np.int32),
                                                              "level": np.zeros(32, np.int32), "n": 256})
    assert res["seen"][1:17].all() and not res.order_dependence


def test_missing_barrier_is_still_a_race_next_to_an_exchange():
    src = """
__global__ void flip(int* out, int* last) {
  __shared__ int s[64];
  s[threadIdx.x] = threadIdx.x * 3;
  atomicExch(&last[0], threadIdx.x);
  out[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x];   // no __syncthreads: reads unwritten slots
}
"""
    with pytest.raises(SimError) as e:
        run_cuda_source(src, "flip", (2, 1, 1), (64, 1, 1), {"out": np.zeros(128, np.int32),
                                                            "last": np.zeros(1, np.int32)})
    assert e.value.kind == "race" and "'out'" in str(e.value)
    assert "warps inside each threadgroup" in str(e.value)       # the warps' order, not the threadgroups'


def test_a_race_between_threadgroups_is_named_as_such():
    src = """
__global__ void handoff(const float* w, float* total, float* scaled) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  scaled[i] = w[i] * 0.5f;
  if (i == 0) {                       // block 0 sums what every block writes: no grid-wide order on a GPU
    float s = 0.0f;
    for (int j = 0; j < 128; j++) s += scaled[j];
    total[0] = s;
  }
}
"""
    args = {"w": np.ones(128, np.float32), "total": np.zeros(1, np.float32), "scaled": np.zeros(128, np.float32)}
    with pytest.raises(SimError) as e:
        run_cuda_source(src, "handoff", (2, 1, 1), (64, 1, 1), args)
    assert e.value.kind == "race" and "'total'" in str(e.value) and "only the threadgroups' (blocks') order" in str(e.value)


def test_an_exchange_does_not_excuse_other_elements_of_its_buffer():
    src = """
__global__ void mixed(int* buf) {
  atomicExch(&buf[0], threadIdx.x);
  if (threadIdx.x == 5) buf[1] = buf[2];     // reads what thread 40 (another warp) writes: no atomic
  if (threadIdx.x == 40) buf[2] = 77;
}
"""
    with pytest.raises(SimError) as e:
        run_cuda_source(src, "mixed", (1, 1, 1), (64, 1, 1), {"buf": np.zeros(4, np.int32)})
    assert e.value.kind == "race" and "index (1,)" in str(e.value)


def test_slots_taken_through_an_atomic_counter_are_a_multiset_not_a_race():
    src = """
__global__ void compact(const int* x, int* out, int* count, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] % 3 == 0) out[atomicAdd(count, 1)] = x[i];
}
"""
    x = np.arange(200, dtype=np.int32)
    res = run_cuda_source(src, "compact", (4, 1, 1), (64, 1, 1), {"x": x, "out": np.full(200, -1, np.int32),
                                                                 "count": np.zeros(1, np.int32), "n": 200})
    assert res["count"][0] == 67 and "count" not in res.order_dependence
    assert res.order_dependence["out"].multiset
    assert sorted(res["out"][:67]) == list(range(0, 200, 3))


def test_clock_readings_are_timing_data_and_the_rest_is_still_checked():
    src = """
__global__ void timed(const float* x, float* y, long long* cycles, clock_t* stamp) {
  long long t0 = clock64();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = 2.0f * x[i];
  __syncthreads();
  if (threadIdx.x == 0) { cycles[blockIdx.x] = clock64() - t0; stamp[blockIdx.x] = clock(); }
}
"""
    args = {"x": np.arange(128, dtype=np.float32), "y": np.zeros(128, np.float32),
            "cycles": np.zeros(2, np.int64), "stamp": np.zeros(2, np.int64)}
    res = run_cuda_source(src, "timed", (2, 1, 1), (64, 1, 1), args)
    assert np.array_equal(res["y"], 2 * args["x"]) and "y" not in res.order_dependence
    assert res.order_dependence["cycles"].clock.all() and res.order_dependence["stamp"].clock.all()
    racy = src.replace("y[i] = 2.0f * x[i];", "y[i] = 2.0f * x[i] + y[(i + 64) % 128];")
    with pytest.raises(SimError) as e:
        run_cuda_source(racy, "timed", (2, 1, 1), (64, 1, 1), args)
    assert e.value.kind == "race" and "'y'" in str(e.value)


def test_metal_exchange_on_an_inout_buffer_is_allowed_and_reported():
    body = """
    uint i = thread_position_in_grid.x;
    atomic_fetch_add_explicit((device atomic_int*)&acc_inout[0], 2, memory_order_relaxed);
    atomic_exchange_explicit((device atomic_int*)&acc_inout[1], int(i), memory_order_relaxed);
    out[i] = int(i) * 2;
"""
    order: dict = {}
    inout: dict = {}
    outs = run_mlx_kernel("metal", "ex", ["acc_inout"], ["out"], body, "", [np.zeros(8, np.int32)], [],
                          grid=(128, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(128,)],
                          output_dtypes=["int32"], inout_results=inout, order_dependence=order)
    assert inout["acc_inout"][0] == 256 and list(outs[0][:3]) == [0, 2, 4]
    assert list(np.flatnonzero(order["acc_inout"].atomic)) == [1] and "out" not in order


def test_failed_assert_names_the_line_and_can_be_compiled_out():
    src = "__global__ void guard(int* y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n" \
          "  assert(i < n);\n  y[i] = i;\n}\n"
    with pytest.raises(SimError) as e:
        run_cuda_source(src, "guard", (2, 1, 1), (32, 1, 1), {"y": np.zeros(64, np.int32), "n": 40})
    assert e.value.kind == "assert" and e.value.line == 3 and "i < n" in str(e.value)
    res = run_cuda_source(src, "guard", (2, 1, 1), (32, 1, 1), {"y": np.zeros(64, np.int32), "n": 40},
                          asserts=False)
    assert list(res["y"][-2:]) == [62, 63]


# ---- the port comparison (translate.check.check_port): both ports of kernels written here -------------------

def _port(tmp_path: Path, src: str, name: str):
    from ksearch_engine.source import find_kernels
    from ksearch_engine.translate import translate_kernel

    f = tmp_path / f"{name}.cu"
    f.write_text(src)
    tr = translate_kernel(find_kernels(src, str(f)), name, str(f))
    return tr.module_text


@pytest.fixture(scope="module")
def shim():
    sim.install_mlx_shim()
    yield
    sim.uninstall_mlx_shim()


def test_port_of_exchange_atomics_verifies_with_a_note_and_an_order_dependent_port_is_rejected(tmp_path, shim):
    from ksearch_engine.translate.check import check_port

    module = _port(tmp_path, TALLY, "tally")
    launch = {"args": _tally_args(), "grid": (4, 1, 1), "block": (64, 1, 1)}
    res = check_port(module, TALLY, "tally", launch, filename="tally.cu")
    assert res.passed, res.message
    assert any("'stats'" in n and "atomicExch/atomicCAS" in n for n in res.notes)

    # the same result taken from the capture (no run of the original beforehand)
    want = run_cuda_source(TALLY, "tally", (4, 1, 1), (64, 1, 1), _tally_args())
    res = check_port(module, TALLY, "tally", launch, filename="tally.cu", expected={"stats": want["stats"]})
    assert res.passed, res.message

    # a port whose maximum became an exchange: its stats[1] depends on the order, the original's does not
    bad = module.replace("ks_atomic_max(&stats[1]", "ks_atomic_exch(&stats[1]") \
                .replace("atomicMax(&stats[1]", "atomicExch(&stats[1]")
    assert bad != module
    res = check_port(bad, TALLY, "tally", launch, filename="tally.cu")
    assert not res.passed
    assert set(res.dialects.values()) == {"sim_error"}
    assert all("race" in m and "'stats' [1]" in m for m in res.messages.values())


def test_port_that_lost_its_barrier_is_still_a_race(tmp_path, shim):
    from ksearch_engine.translate.check import check_port

    src = """
__global__ void rev(const int* x, int* y, int* last) {
  __shared__ int s[64];
  s[threadIdx.x] = x[blockIdx.x * 64 + threadIdx.x];
  atomicExch(last, threadIdx.x);
  __syncthreads();
  y[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x];
}
"""
    module = _port(tmp_path, src, "rev")
    launch = {"args": {"x": np.arange(128, dtype=np.int32), "y": np.zeros(128, np.int32),
                       "last": np.zeros(1, np.int32)}, "grid": (2, 1, 1), "block": (64, 1, 1)}
    res = check_port(module, src, "rev", launch, filename="rev.cu")
    assert res.passed, res.message
    bad = module.replace("threadgroup_barrier(mem_flags::mem_threadgroup);", "") \
                .replace("__syncthreads();", "")
    assert bad != module
    res = check_port(bad, src, "rev", launch, filename="rev.cu")
    assert not res.passed and all("race" in m and "'y" in m for m in res.messages.values()), res.messages


def test_port_of_a_timed_kernel_compares_everything_but_the_clock(tmp_path, shim):
    from ksearch_engine.translate.check import check_port

    src = """
__global__ void timed(const float* x, float* y, clock_t* stamp) {
  clock_t t0 = clock();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = 2.0f * x[i];
  __syncthreads();
  if (threadIdx.x == 0) stamp[blockIdx.x] = clock() - t0;
}
"""
    module = _port(tmp_path, src, "timed")
    launch = {"args": {"x": np.arange(128, dtype=np.float32), "y": np.zeros(128, np.float32),
                       "stamp": np.zeros(2, np.int64)}, "grid": (2, 1, 1), "block": (64, 1, 1)}
    res = check_port(module, src, "timed", launch, filename="timed.cu")
    assert res.passed, res.message
    assert any("'stamp'" in n and "clock" in n for n in res.notes)
    wrong = module.replace("2.0f * x[i]", "3.0f * x[i]")
    assert wrong != module
    res = check_port(wrong, src, "timed", launch, filename="timed.cu")
    assert not res.passed and "'y'" in res.message


def test_port_checked_where_the_original_fails_its_assert(tmp_path, shim):
    from ksearch_engine.translate.check import check_port

    src = "__global__ void guard(int* y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n" \
          "  assert(i < n);\n  y[i] = 5 * i;\n}\n"
    module = _port(tmp_path, src, "guard")
    launch = {"args": {"y": np.zeros(64, np.int32), "n": 40}, "grid": (2, 1, 1), "block": (32, 1, 1)}
    res = check_port(module, src, "guard", launch, filename="guard.cu")
    assert res.passed, res.message
    assert any("assertion `i < n` failed" in n and "cudaErrorAssert" in n for n in res.notes)
    wrong = module.replace("5 * i", "4 * i")
    assert wrong != module
    assert not check_port(wrong, src, "guard", launch, filename="guard.cu").passed


def test_port_of_a_compaction_is_compared_as_a_multiset(tmp_path, shim):
    from ksearch_engine.translate.check import check_port

    src = """
__global__ void keep3(const int* x, int* out, int* count, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] % 3 == 0) out[atomicAdd(count, 1)] = x[i];
}
"""
    module = _port(tmp_path, src, "keep3")
    launch = {"args": {"x": np.arange(200, dtype=np.int32), "out": np.full(200, -1, np.int32),
                       "count": np.zeros(1, np.int32), "n": 200}, "grid": (4, 1, 1), "block": (64, 1, 1)}
    res = check_port(module, src, "keep3", launch, filename="keep3.cu")
    assert res.passed, res.message
    assert any("'out'" in n and "multiset" in n for n in res.notes)
    wrong = module.replace("= x[i];", "= x[i] + 1;")
    assert wrong != module
    res = check_port(wrong, src, "keep3", launch, filename="keep3.cu")
    assert not res.passed and "'out'" in res.message


def test_a_captured_launch_where_the_original_races_too_is_named_as_the_originals(tmp_path, shim):
    from ksearch_engine.translate.check import check_port

    src = """
__global__ void split(const float* w, float* acc) {
  if (threadIdx.x == 0) acc[0] = blockIdx.x == 0 ? w[0] : w[1];   // two blocks, two values, one place
}
"""
    module = _port(tmp_path, src, "split")
    args = {"w": np.array([1.0, 2.0], np.float32), "acc": np.zeros(1, np.float32)}
    launch = {"args": args, "grid": (2, 1, 1), "block": (32, 1, 1)}
    res = check_port(module, src, "split", launch, filename="split.cu", expected={"acc": np.array([2.0], np.float32)})
    assert not res.passed and set(res.dialects.values()) == {"not_runnable"}
    assert all("the original kernel races on this launch too" in m and "'acc'" in m for m in res.messages.values())
