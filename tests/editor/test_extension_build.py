"""The VS Code extension type-checks (tsc), its pure modules pass their `node --test` unit tests
(interpreter order, candidate URIs, status text, settings), and the .vsix holds what VS Code loads."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile

import pytest

from editor_helpers import REPO

EXT = REPO / "editor-client"


def npm(tools, script: str) -> subprocess.CompletedProcess:
    # npm is a `#!/usr/bin/env node` script: Node 24 first on PATH runs it and the scripts under Node 24.
    env = {**os.environ, "PATH": f"{tools.node.resolve().parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["npm", "run", "--silent", script], cwd=EXT, env=env, capture_output=True, text=True,
                          timeout=180)


@pytest.fixture(scope="module")
def built(tools):
    if not (EXT / "node_modules" / "typescript").is_dir():
        pytest.skip("editor-client/node_modules is missing; run `bash scripts/install-editor-deps.sh` first")
    return tools


def test_extension_type_checks(built):
    run = npm(built, "check")
    assert run.returncode == 0, f"tsc found errors:\n{run.stdout}{run.stderr}"


def test_extension_unit_tests_pass(built):
    run = npm(built, "test")
    out = run.stdout + run.stderr
    assert run.returncode == 0, f"node --test failed:\n{out[-4000:]}"
    passed = [line for line in out.splitlines() if line.startswith("ℹ pass ")]
    assert passed and int(passed[0].split()[-1]) >= 10, f"too few unit tests ran:\n{out[-2000:]}"


def test_vsix_holds_the_bundle_and_manifest(built):
    with zipfile.ZipFile(built.vsix) as z:
        names = set(z.namelist())
        manifest = json.loads(z.read("extension/package.json"))
    assert {"extension/out/extension.js", "extension/package.json", "extension/language-configuration.json",
            "extension/syntaxes/metal.tmLanguage.json"} <= names, names
    assert not any(n.startswith(("extension/src/", "extension/node_modules/", "extension/test/")) for n in names)
    assert manifest["main"] == "./out/extension.js" and manifest["engines"]["vscode"] == "^1.91.0"
