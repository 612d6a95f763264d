"""On an NVIDIA GPU: every example's CUDA-backend port, run through `mx.fast.cuda_kernel`, matches the ORIGINAL
kernel compiled by nvcc and launched through cupy on the same inputs.

Skipped where MLX has no CUDA backend (and where nvcc or cupy are missing). Run on the GPU machine:
    python -m pytest -q tests/gpu/test_ports_cuda.py
"""
from __future__ import annotations

import re
import shutil
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
if not mx.cuda.is_available():
    pytest.skip("needs MLX's CUDA backend (an NVIDIA GPU)", allow_module_level=True)
cp = pytest.importorskip("cupy")
if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
    pytest.skip("needs nvcc", allow_module_level=True)

from ksearch_engine.source import find_kernels  # noqa: E402
from ksearch_engine.task import InputSpec, KernelTask, Workload  # noqa: E402
from ksearch_engine.translate import translate_kernel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*/*.cu"))
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
_SCALAR = {"int": np.int32, "unsigned": np.uint32, "float": np.float32, "size_t": np.uint64, "long": np.int64}


def _original_function(text: str, k, targs: list, tmp: Path):
    """nvcc-compile the whole original file to a cubin (host code is ignored there) and load the kernel."""
    src = text
    if targs:  # taking the kernel's address in host code instantiates the template
        src += f"\nvoid* ksearch_instantiate = (void*)&{k.name}<{', '.join(str(a) for a in targs)}>;\n"
    cu = tmp / f"{k.name}.cu"
    cu.write_text(src)
    cubin = tmp / f"{k.name}.cubin"
    subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-O2", "-o", str(cubin), str(cu)], check=True, capture_output=True)
    syms = subprocess.run(["cuobjdump", "-symbols", str(cubin)], capture_output=True, text=True).stdout
    names = [m for m in re.findall(r"(_Z\w+)", syms) if k.name in m and "ksearch" not in m] or [k.name]
    return cp.RawModule(path=str(cubin)).get_function(names[0])


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_cuda_backend_port_matches_the_original_on_the_gpu(path, tmp_path):
    text = path.read_text()
    parsed = find_kernels(text, str(path))
    k = parsed.kernels[0]
    tr = translate_kernel(parsed, k.name, str(path))
    mod = types.ModuleType("port")
    exec(compile(tr.module_text, str(tr.module_path), "exec"), mod.__dict__)
    hint = tr.task_hint
    task = KernelTask(name=k.name, family=hint["family"] or "custom", inputs=[InputSpec(**i) for i in hint["inputs"]],
                      outputs=tr.output_names, reference="def reference(*a):\n    pass\n",
                      workloads=[Workload(name="w", dims=hint["dims"])])
    inputs = task.make_inputs(task.workloads[0], seed=3)
    xs = [mx.array(a) for a in inputs]
    cfg = mod.launch_config(*xs)
    port = mod.kernel(*xs)  # on this machine: the CUDA-backend port through mx.fast.cuda_kernel
    port = [np.array(o) for o in (port if isinstance(port, tuple) else (port,))]

    tnames = [t.name for t in k.template_params]
    targs = [v for n, v in cfg["template"] if n in tnames]
    fn = _original_function(text, k, targs, tmp_path)
    it = iter(inputs)
    args, outs = [], {}
    for p in k.params:
        if not p.pointer:
            args.append(_SCALAR.get(p.type, np.int32)(cfg["scalars"][p.name]))
        elif p.name in tr.output_names:
            j = tr.output_names.index(p.name)
            dt = np.int32 if cfg["output_dtypes"][j] == mx.int32 else np.float32
            outs[p.name] = cp.zeros(cfg["output_shapes"][j], dtype=dt)
            args.append(outs[p.name])
        else:
            args.append(cp.asarray(next(it)))
    fn(tuple(cfg["grid"]), tuple(cfg["block"]), tuple(args), shared_mem=int(cfg["shared_mem"]))
    cp.cuda.runtime.deviceSynchronize()
    original = [cp.asnumpy(outs[n]) for n in tr.output_names]
    assert any(np.abs(o).sum() > 0 for o in original), "the original wrote nothing: the check would be vacuous"
    for got, want in zip(port, original):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4, err_msg=f"{k.name}: port vs original")
