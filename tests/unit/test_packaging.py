"""A non-editable install (a wheel, as users get it) carries everything the port needs: specs, headers, data.

The wheel is built from this checkout, installed into a folder of its own, and `ksearch port` runs from a
directory outside the repository with that folder first on the path, so nothing can be read from the source tree.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            str(ROOT), "-w", str(work / "dist")], capture_output=True, text=True, timeout=600)
    if build.returncode != 0 and "bdist_wheel" in build.stderr:   # no `wheel` package here: isolated build
        build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT),
                                "-w", str(work / "dist")], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    wheel = next((work / "dist").glob("ksearch-*.whl"))
    target = work / "site"
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-2000:]
    return target


def test_the_wheel_carries_the_specs_and_the_simulator_headers(installed):
    specs = installed / "ksearch_engine" / "data" / "specs"
    for name in ("translation.yaml", "families.yaml", "mlx_api.yaml", "hardware/apple.yaml", "patterns/scan.yaml"):
        assert (specs / name).is_file(), name
    assert (installed / "ksearch_engine" / "sim" / "ksim_cuda.h").is_file()


def test_port_runs_from_the_installed_wheel(installed, tmp_path):
    src = tmp_path / "gelu.cu"
    shutil.copy(ROOT / "examples" / "gelu" / "gelu.cu", src)
    env = {**os.environ, "PYTHONPATH": str(installed), "KSEARCH_STORE": str(tmp_path / "store.db")}
    env.pop("KSEARCH_SPECS", None)
    where = subprocess.run([sys.executable, "-P", "-c", "import ksearch_engine; print(ksearch_engine.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert where.stdout.strip().startswith(str(installed)), where.stdout + where.stderr
    r = subprocess.run([sys.executable, "-P", "-m", "ksearch_engine.cli", "port", str(src), "--json"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "translation table not found" not in r.stdout + r.stderr
    module = tmp_path / "gelu_mlx.py"
    assert module.is_file() and "metal_kernel" in module.read_text()
