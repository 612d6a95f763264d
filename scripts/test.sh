#!/usr/bin/env bash
# The test command: installs what the tests need (idempotent), then runs the whole suite.
#   bash scripts/test.sh            everything, editor tests (real VS Code via code-server, Neovim) included
#   bash scripts/test.sh -m "not slow"   the quick suite only
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v -E "^(WARNING: (Running pip as|Location))" || true
if [ -f scripts/install-editor-deps.sh ]; then
  bash scripts/install-editor-deps.sh
fi
python3 -m pytest -q -p no:cacheprovider "$@"
