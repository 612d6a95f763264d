"""Source transformations of the user's kernel (ksearch_engine/propose/transforms.py): each keeps the kernel's
contract (checked in the real simulator against the original), edits both dialects, and says why it does not
apply instead of guessing."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ksearch_engine.captask import build_captured_task, launches_from_capture
from ksearch_engine.evaluate import Evaluator
from ksearch_engine.portfile import port_file
from ksearch_engine.propose import transforms as T
from ksearch_engine.sim.capture import capture_program

DATA = Path(__file__).parents[1] / "data" / "optimize"


@pytest.fixture(scope="module")
def saxpy():
    path = DATA / "saxpy.cu"
    r = port_file(path, kernels=["saxpy"], write=False)
    cap = capture_program(path)
    return build_captured_task(r.kernels[0].module_text, path.read_text(), "saxpy",
                               launches_from_capture(cap, "saxpy"), source_file=str(path))


def test_what_applies_to_an_elementwise_kernel_and_why_the_rest_does_not(saxpy):
    ids = [t.id for t, _ in T.applicable(saxpy.root)]
    assert ids == ["vectorize", "grid_stride", "block_size", "read_only"]
    assert "no exp" in T.get("fast_math").applies(saxpy.root)
    assert "constant trip" in T.get("unroll").applies(saxpy.root)
    # a body without the canonical index: the loop transformations refuse
    odd = T.set_const(saxpy.root, "LAUNCH_CUDA_SOURCE",
                      T.get_const(saxpy.root, "LAUNCH_CUDA_SOURCE").replace("int i = blockIdx.x * blockDim.x + threadIdx.x;",
                                                                            "int i = threadIdx.x;"))
    assert "canonical" in T.get("grid_stride").applies(odd)


def test_grid_stride_rewrites_both_dialects_and_shrinks_the_grid(saxpy):
    out = T.apply_chain(saxpy.root, [("grid_stride", 4)])
    for name, body in T.bodies(out).items():
        assert "for (int i = " in body and "i += " in body and "if (i < n)" not in body, name
    assert "threads_per_grid.x" in T.get_const(out, "LAUNCH_METAL_SOURCE")
    assert "gridDim.x * blockDim.x" in T.get_const(out, "LAUNCH_CUDA_SOURCE")
    assert T.get_const(out, "KS_GRID_DIV") == 4
    with pytest.raises(T.TransformError, match="does not apply"):
        T.apply_chain(out, [("grid_stride", 2)])      # already a loop


def test_fast_math_and_unroll_edit_the_text_they_name():
    body = "    float s = 0;\n    for (int j = 0; j < 8; ++j) s += expf(x[j]);\n    y[0] = logf(s);\n"
    assert "__expf(x[j])" in T._fast_rewrite(body, "cuda") and "__logf(s)" in T._fast_rewrite(body, "cuda")
    metal = body.replace("expf", "metal::exp").replace("logf", "log")
    assert "fast::exp(" in T._fast_rewrite(metal, "metal") and "fast::log(s)" in T._fast_rewrite(metal, "metal")
    assert "    #pragma unroll\n    for (int j = 0; j < 8" in T._unroll_rewrite(body, "cuda")
    assert T._unroll_rewrite("for (int j = 0; j < n; ++j) {}", "cuda") == "for (int j = 0; j < n; ++j) {}"


@pytest.mark.parametrize("steps", [[("vectorize", 4)], [("grid_stride", 4), ("block_size", 128), ("read_only", True)]])
def test_transformed_kernels_still_match_the_original(saxpy, steps):
    src = T.apply_chain(saxpy.root, steps)
    assert src != saxpy.root
    with Evaluator(saxpy.task, backend="sim") as ev:
        res = ev.evaluate(src, timing=False)
    assert res.status == "passed", res.message


def test_a_broken_rewrite_is_caught_by_the_check(saxpy):
    src = T.apply_chain(saxpy.root, [("vectorize", 4)])
    body = T.get_const(src, "LAUNCH_METAL_SOURCE")
    assert "ks_y.y = a * ks_x.y + ks_y.y" in body
    broken = T.set_const(src, "LAUNCH_METAL_SOURCE", body.replace("ks_y.y = a * ks_x.y", "ks_y.y = a * ks_x.x"))
    with Evaluator(saxpy.task, backend="sim") as ev:
        assert ev.evaluate(broken, timing=False).status == "failed"


def _captured(name: str, kernel: str):
    path = DATA / name
    r = port_file(path, kernels=[kernel], write=False)
    assert r.kernels[0].status == "verified", r.kernels[0].reason
    cap = capture_program(path)
    return build_captured_task(r.kernels[0].module_text, path.read_text(), kernel,
                               launches_from_capture(cap, kernel), source_file=str(path))


@pytest.mark.parametrize("kernel, update", [("block_max", r"ks_v = (?:metal::)?(?:fmaxf|max)\(ks_v, ks_p\);"),
                                            ("block_sum", r"ks_v \+= ks_p;")])
def test_warp_reduce_finishes_a_shared_memory_tree_with_shuffles(kernel, update):
    task = _captured("block_max.cu", kernel)
    assert T.get("warp_reduce").applies(task.root) is None
    src = T.apply_chain(task.root, [("warp_reduce", True)])
    cuda, metal = T.get_const(src, "LAUNCH_CUDA_SOURCE"), T.get_const(src, "LAUNCH_METAL_SOURCE")
    assert "__shfl_down_sync(0xffffffffu, ks_v, ks_o)" in cuda and "simd_shuffle_down(ks_v" in metal
    assert re.search(update, cuda) and re.search(update, metal)
    assert "> 16;" in cuda and "} else {" in cuda      # the tree stops at 32 partials; small blocks keep it whole
    with Evaluator(task.task, backend="sim") as ev:
        res = ev.evaluate(src, timing=False)
    assert res.status == "passed", res.message
    with pytest.raises(T.TransformError, match="does not apply"):
        T.apply_chain(src, [("warp_reduce", True)])    # the tree is gone: nothing left to rewrite


def test_warp_reduce_refuses_what_is_not_one_warp_and_a_wrong_rewrite_fails():
    task = _captured("block_max.cu", "block_sum")
    body = T.get_const(task.root, "LAUNCH_CUDA_SOURCE")
    two_d = T.set_const(task.root, "LAUNCH_CUDA_SOURCE", body.replace("unsigned int tid = threadIdx.x;",
                                                                       "unsigned int tid = threadIdx.y;"))
    assert "no shared-memory tree" in T.get("warp_reduce").applies(two_d)
    src = T.apply_chain(task.root, [("warp_reduce", True)])
    wrong = T.set_const(src, "LAUNCH_METAL_SOURCE", T.get_const(src, "LAUNCH_METAL_SOURCE").replace(
        "ks_o = 16; ks_o > 0", "ks_o = 8; ks_o > 0"))   # drops the upper 16 partials
    with Evaluator(task.task, backend="sim") as ev:
        assert ev.evaluate(wrong, timing=False).status == "failed"


def test_blocks_too_small_to_fill_the_gpu_put_the_block_size_plan_first(saxpy):
    """A program launching 32-thread blocks fills half an SM's thread slots (NVIDIA: 2048 threads, 32 blocks per
    SM, specs/hardware/nvidia.yaml): larger blocks are predicted above every other edit; at 256 threads they are
    not."""
    geo = T.get_const(saxpy.root, "KS_GEOMETRY")
    small = T.set_const(saxpy.root, "KS_GEOMETRY", {k: {**g, "block": [32, 1, 1]} for k, g in geo.items()})
    assert T.captured_blocks(small)[0] == {32}
    blk = T.get("block_size")
    factor = blk.predict({"captured_blocks": [32]}, 256)[1]
    others = [t.predict({"captured_blocks": [32]}, vals[0])[1] for t, vals in T.applicable(small) if t.id != "block_size"]
    assert factor > max(others) and factor > 1.3
    assert blk.predict({"captured_blocks": [256]}, 128)[1] <= max(others)


def test_a_kernel_striding_over_the_grid_gets_more_blocks_and_one_sized_by_the_grid_does_not():
    """`grid_blocks`: row_dots takes rows in `for (r = blockIdx.x; ...; r += gridDim.x)` and was launched with 4
    blocks; 2x the blocks compute the same dots (checked in the simulator). block_sum writes `out[blockIdx.x]`:
    its grid sizes its output, so the transformation refuses it."""
    task = _captured("row_dots.cu", "row_dots")
    assert T.get("grid_blocks").applies(task.root) is None
    src = T.apply_chain(task.root, [("grid_blocks", 2)])
    assert T.get_const(src, "KS_GRID_MUL") == 2
    with Evaluator(task.task, backend="sim") as ev:
        res = ev.evaluate(src, timing=False)
    assert res.status == "passed", res.message
    # the launch really grows: the adapter's geometry for the captured launch (4 blocks of 128) has 8 blocks
    ns: dict = {}
    exec(compile(src, "row_dots_candidate", "exec"), ns)
    assert ns["_ks_launch_geometry"]({"grid": [4, 1, 1], "block": [128, 1, 1]}) == ((8, 1, 1), (128, 1, 1))
    # a grid that sizes an output is refused: out[blockIdx.x] instead of out[r]
    sized = T.set_const(task.root, "LAUNCH_CUDA_SOURCE", T.get_const(task.root, "LAUNCH_CUDA_SOURCE").replace(
        "out[r] = acc[0]", "out[blockIdx.x] = acc[0]"))
    assert sized != task.root and "outside grid-stride" in T.get("grid_blocks").applies(sized)
    assert T.get("grid_blocks").applies(_captured("block_max.cu", "block_sum").root) is not None
