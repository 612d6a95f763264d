"""Ports checked by running them: for every example, the ORIGINAL CUDA kernel (run_cuda_source, grid in
blocks) and the Metal and CUDA-backend ports (through the MLX shim → run_mlx_kernel) on the same random
inputs must agree; a planted wrong translation rule must make them disagree."""
from __future__ import annotations

import shutil
import types
from pathlib import Path

import numpy as np
import pytest

sim = pytest.importorskip("ksearch_engine.sim", reason="the CPU simulator (ksearch_engine/sim) is not installed")
if shutil.which("g++") is None and shutil.which("c++") is None:
    pytest.skip("the CPU simulator needs a C++ compiler", allow_module_level=True)

import mlx.core as mx  # noqa: E402

from ksearch_engine.source import find_kernels  # noqa: E402
from ksearch_engine.task import InputSpec, KernelTask, Workload  # noqa: E402
from ksearch_engine.translate import load_rules, translate_kernel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*/*.cu"))


@pytest.fixture(scope="module", autouse=True)
def shim():
    sim.install_mlx_shim()
    yield
    sim.uninstall_mlx_shim()


def _port(path: Path, rules=None):
    text = path.read_text()
    result = find_kernels(text, str(path))
    k = result.kernels[0]
    tr = translate_kernel(result, k.name, str(path), rules=rules)
    mod = types.ModuleType("port")
    exec(compile(tr.module_text, str(tr.module_path), "exec"), mod.__dict__)
    return text, k, tr, mod


def _inputs(tr, seed=0) -> list[np.ndarray]:
    hint = tr.task_hint
    task = KernelTask(name=tr.kernel, family=hint["family"] or "custom",
                      inputs=[InputSpec(**i) for i in hint["inputs"]], outputs=tr.output_names,
                      reference=tr.module_text, workloads=[Workload(name="small", dims=hint["dims"])])
    return task.make_inputs(task.workloads[0], seed)


def _run_original(text, k, tr, cfg, inputs) -> list[np.ndarray]:
    args, it = {}, iter(inputs)
    for p in k.params:
        if not p.pointer:
            args[p.name] = cfg["scalars"][p.name]
        elif p.name in tr.output_names:
            j = tr.output_names.index(p.name)
            dtype = np.int32 if cfg["output_dtypes"][j] == mx.int32 else np.float32
            args[p.name] = np.zeros(cfg["output_shapes"][j], dtype=dtype)
        else:
            args[p.name] = next(it)
    tnames = [t.name for t in k.template_params]
    targs = [v for n, v in cfg["template"] if n in tnames]
    outs = sim.run_cuda_source(text, k.name, cfg["grid"], cfg["block"], args, cfg["shared_mem"],
                               template_args=targs or None, filename=str(k.name))
    return [outs[n] for n in tr.output_names]


def _run_port(mod, kind, inputs, monkeypatch) -> list[np.ndarray]:
    monkeypatch.setenv("KSEARCH_SIM_DIALECT", kind)
    out = mod.kernel(*[mx.array(a) for a in inputs])
    return [np.array(o) for o in (out if isinstance(out, tuple) else (out,))]


def _agree(got, want) -> bool:
    return all(g.shape == w.shape and np.allclose(g, w, atol=1e-5, rtol=1e-4) for g, w in zip(got, want))


def _caught(mod, inputs, original, monkeypatch) -> bool:
    """A wrong port is caught when its outputs differ, or when the simulator sees the race it causes."""
    try:
        return not _agree(_run_port(mod, "metal", inputs, monkeypatch), original)
    except sim.SimError as e:
        return e.kind == "race"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_ports_agree_with_the_original_cuda_kernel(path, monkeypatch):
    text, k, tr, mod = _port(path)
    inputs = _inputs(tr)
    cfg = mod.launch_config(*[mx.array(a) for a in inputs])
    original = _run_original(text, k, tr, cfg, inputs)
    assert any(np.abs(o).sum() > 0 for o in original), "the original wrote nothing: the check would be vacuous"
    for kind in ("metal", "cuda"):
        got = _run_port(mod, kind, inputs, monkeypatch)
        assert _agree(got, original), f"{kind} port of {k.name} differs from the original"
    # and all of them compute the family's definition
    ref = mod.reference(*[mx.array(a) for a in inputs])
    ref = [np.array(r) for r in (ref if isinstance(ref, tuple) else (ref,))]
    assert _agree(original, ref)


def _planted(rule_id: str, metal: str):
    table = load_rules()
    return table.replacing(table.get(rule_id).model_copy(update={"metal": metal}))


@pytest.mark.parametrize("example", ["softmax/softmax.cu", "matmul/matmul.cu"])
def test_dropping_the_barrier_is_caught(example, monkeypatch):
    path = ROOT / "examples" / example
    text, k, tr, mod = _port(path, rules=_planted("sync.syncthreads", "(void)0"))
    assert "threadgroup_barrier" not in tr.metal_source
    inputs = _inputs(tr)
    cfg = mod.launch_config(*[mx.array(a) for a in inputs])
    original = _run_original(text, k, tr, cfg, inputs)
    assert _caught(mod, inputs, original, monkeypatch)


@pytest.mark.parametrize("example", ["softmax/softmax.cu", "paged_attention/paged_decode.cu"])
def test_a_shuffle_of_the_wrong_width_is_caught(example, monkeypatch):
    path = ROOT / "examples" / example
    # lanes exchange only inside groups of 8: a width-8 butterfly where CUDA reduces over all 32 lanes
    text, k, tr, mod = _port(path, rules=_planted("warp.shfl_xor", "simd_shuffle_xor($value, ($lane_mask) & 7)"))
    inputs = _inputs(tr)
    cfg = mod.launch_config(*[mx.array(a) for a in inputs])
    original = _run_original(text, k, tr, cfg, inputs)
    assert _caught(mod, inputs, original, monkeypatch)


def test_a_wrong_math_rule_is_caught(monkeypatch):
    path = ROOT / "examples" / "gelu" / "gelu.cu"
    text, k, tr, mod = _port(path, rules=_planted("math.tanhf", "metal::sin"))
    inputs = _inputs(tr)
    cfg = mod.launch_config(*[mx.array(a) for a in inputs])
    original = _run_original(text, k, tr, cfg, inputs)
    assert _caught(mod, inputs, original, monkeypatch)
    assert _agree(_run_port(mod, "cuda", inputs, monkeypatch), original)   # the CUDA port does not use the table


GRID_STRIDE = (Path(__file__).resolve().parents[1] / "data" / "grid_stride.cu").read_text()


def test_grid_stride_template_kernel_with_host_helpers(monkeypatch):
    result = find_kernels(GRID_STRIDE, "scale.cu")
    tr = translate_kernel(result, "scale", "scale.cu")
    mod = types.ModuleType("port")
    exec(compile(tr.module_text, "scale_mlx.py", "exec"), mod.__dict__)
    x = np.random.default_rng(0).uniform(-1, 1, 3000).astype(np.float32)
    cfg = mod.launch_config(mx.array(x), s=3.0)
    original = sim.run_cuda_source(GRID_STRIDE, "scale", cfg["grid"], cfg["block"],
                                   {"x": x, "y": np.zeros_like(x), "s": 3.0, "n": 3000},
                                   template_args=["float", "256"])["y"]
    assert np.allclose(original, 3 * x)
    for kind in ("metal", "cuda"):
        monkeypatch.setenv("KSEARCH_SIM_DIALECT", kind)
        assert np.allclose(np.array(mod.kernel(mx.array(x), s=3.0)), original)


def test_a_port_passes_the_evaluator_on_the_sim_backend():
    """The port module is a candidate the evaluator accepts, with a task built from the translator's hint."""
    from ksearch_engine.evaluate import Evaluator

    _, _, tr, _ = _port(ROOT / "examples/rmsnorm/rmsnorm.cu")
    hint = tr.task_hint
    task = KernelTask(name=tr.kernel, family=hint["family"], inputs=[InputSpec(**i) for i in hint["inputs"]],
                      outputs=tr.output_names, reference=hint["reference"],
                      workloads=[Workload(name="small", dims=hint["dims"])], seeds=[0])
    broken = tr.module_text.replace("rsqrt(t / (float)cols + eps)", "rsqrt(t / (float)cols + eps) * 1.01f")
    assert broken != tr.module_text
    with Evaluator(task, "sim") as ev:
        assert ev.evaluate(tr.module_text, timing=False).status == "passed"
        assert ev.evaluate(broken, timing=False).status == "failed"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_without_host_code_the_family_launch_is_used(path, tmp_path, monkeypatch):
    example = path.relative_to(ROOT / "examples")
    full = path.read_text()
    kernels_only = full[:full.rindex("\nvoid ")]           # drop the host launch function
    path = tmp_path / Path(example).name
    path.write_text(kernels_only)
    text, k, tr, mod = _port(path)
    assert k.launches == [] and any("usual" in i.message for i in tr.report)
    assert [i for i in tr.report if i.severity == "error"] == []
    inputs = _inputs(tr)
    cfg = mod.launch_config(*[mx.array(a) for a in inputs])
    original = _run_original(full, k, tr, cfg, inputs)
    ref = mod.reference(*[mx.array(a) for a in inputs])
    assert _agree(original, [np.array(r) for r in (ref if isinstance(ref, tuple) else (ref,))])
    assert _agree(_run_port(mod, "metal", inputs, monkeypatch), original)
