#!/usr/bin/env bash
# The test command: installs what the tests need (idempotent), then runs the whole suite.
#   bash scripts/test.sh            everything, editor tests (real VS Code via code-server, Neovim) included
#   bash scripts/test.sh -m "not slow"   the quick suite only
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[test]" 2>&1 | grep -v -E "^(WARNING: (Running pip as|Location))" || true
# bubblewrap: the candidate sandbox (ksearch_engine/evaluate/sandbox.py). Installed where apt can be used
# (root, or sudo without a password); otherwise the sandbox falls back to namespaces and the tests say so.
if ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get install -y -q bubblewrap >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1; } \
      || echo "test.sh: could not install bubblewrap with apt-get; the sandbox tests that need it will be skipped"
  elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo -n apt-get install -y -q bubblewrap >/dev/null 2>&1 \
      || echo "test.sh: could not install bubblewrap with sudo apt-get; the sandbox tests that need it will be skipped"
  else
    echo "test.sh: bubblewrap is not installed and apt-get cannot be used here (not root, no sudo, or no apt);" \
         "the sandbox falls back to namespaces and the tests that need bubblewrap are skipped"
  fi
fi
# The editor tests (a real VS Code and Neovim) need Debian packages: as root (CI) a failed install is an error;
# elsewhere (a non-root user, macOS) the Python tests still run and the editor tests are skipped, named.
if [ -f scripts/install-editor-deps.sh ]; then
  if ! bash scripts/install-editor-deps.sh > .editor-deps.log 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      tail -20 .editor-deps.log; echo "test.sh: installing the editor test tools failed (log: .editor-deps.log)" >&2
      exit 1
    fi
    reason="$( (grep -h 'install-editor-deps.sh:' .editor-deps.log || true) | tail -1)"
    if [ -z "$reason" ]; then
      step="$( (grep -h '^==>' .editor-deps.log || true) | tail -1 | sed 's/^==> \[[0-9]*s\] //')"
      reason="installing the editor test tools failed at: ${step:-the first step} (log: .editor-deps.log)"
    fi
    export KSEARCH_EDITOR_SKIP="${reason:-the editor test tools could not be installed here (see .editor-deps.log)}"
    echo "test.sh: editor tests will be skipped: $KSEARCH_EDITOR_SKIP"
  fi
fi
python3 -m pytest -q -p no:cacheprovider "$@"
