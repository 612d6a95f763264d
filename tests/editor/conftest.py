"""Fixtures for the real-editor tests: the tools that scripts/install-editor-deps.sh installs, a
workspace holding a CUDA kernel, and the ksearch language server installed in this Python."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from editor_helpers import ARTIFACTS, DEPS, FALLBACK_KERNEL, INSTALL_HINT, KERNEL, REPO, EditorTools


def _require(paths: dict[str, Path]) -> None:
    if os.environ.get("KSEARCH_EDITOR_SKIP"):     # scripts/test.sh could not install them here, and says why
        pytest.skip(f"editor tests skipped: {os.environ['KSEARCH_EDITOR_SKIP']}")
    missing = [f"{what} ({path})" for what, path in paths.items() if not path.exists()]
    if missing:
        pytest.skip(f"editor test tools missing: {', '.join(missing)}; {INSTALL_HINT}")


@pytest.fixture(scope="session")
def tools() -> EditorTools:
    chromium = Path(shutil.which("chromium") or "/usr/bin/chromium")
    t = EditorTools(
        node=DEPS / "bin" / "node",
        code_server=DEPS / "bin" / "code-server",
        playwright=DEPS / "playwright" / "node_modules" / "playwright-core",
        chromium=chromium,
        nvim=DEPS / "bin" / "nvim",
        vsix=REPO / "editor-client" / "ksearch.vsix",
    )
    _require({"Node 24": t.node, "code-server": t.code_server, "playwright-core": t.playwright,
              "chromium": t.chromium, "nvim": t.nvim, "the extension package": t.vsix})
    return t


@pytest.fixture(scope="session")
def language_server() -> str:
    """The Python that runs the server; fails (not skips) when the server is not installed in it."""
    if importlib.util.find_spec("ksearch_server") is None or importlib.util.find_spec("ksearch_server.__main__") is None:
        pytest.fail(f"the ksearch language server is not importable from {sys.executable}: "
                    f"run `{sys.executable} -m pip install -e {REPO}`")
    return sys.executable


@pytest.fixture
def kernel_workspace(tmp_path: Path) -> Path:
    """A fresh workspace folder holding softmax.cu (the project's example when there is one)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    example = REPO / "examples" / "softmax" / "softmax.cu"
    text = example.read_text() if example.is_file() and KERNEL in example.read_text() else FALLBACK_KERNEL
    (ws / "softmax.cu").write_text(text)
    return ws


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
