#!/usr/bin/env bash
# Installs the tools the stdlib gate tests (tests/integration/stdlib_gates.rs) run, pinned, quietly
# and only when missing: pytest, ruff and mypy from PyPI; Debian's Go; cargo-nextest from
# crates.io; vitest, jest, eslint and typescript from npm into $MVK_TEST_TOOLS/npm (default
# ~/.cache/mvk-test-tools/npm), where the tests link a fixture's node_modules to.
# .ci/run calls it; run it yourself before `cargo test` on a new machine.
set -euo pipefail

say() { echo "tests/tools/install.sh: $*" >&2; }

# Debian packages, as root or through sudo (`env` inside sudo: its env_reset drops DEBIAN_FRONTEND).
apt_install() {
    local as_root=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { say "installing $* needs root (or sudo)"; exit 1; }
        as_root=(sudo)
    fi
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

python_pins=(pytest==9.2.0 ruff==0.17.6 mypy==2.4.1)
if ! python3 - "${python_pins[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
PY
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "${python_pins[@]}"
fi

if ! command -v go >/dev/null; then
    apt_install golang-go
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
fi
if ! cargo nextest --version >/dev/null 2>&1; then
    say "building cargo-nextest (a few minutes)"
    cargo install --quiet --locked cargo-nextest
fi

npm_dir=${MVK_TEST_TOOLS:-$HOME/.cache/mvk-test-tools}/npm
# vitest 4 is the newest that runs on Node 20 (vitest 5 needs Node 22).
manifest='{"private": true, "dependencies": {"vitest": "4.1.12", "jest": "30.5.2", "eslint": "10.16.0", "typescript": "5.9.3"}}'
if [ "$(cat "$npm_dir/package.json" 2>/dev/null)" != "$manifest" ] || [ ! -x "$npm_dir/node_modules/.bin/vitest" ]; then
    mkdir -p "$npm_dir"
    printf '%s\n' "$manifest" >"$npm_dir/package.json.new"
    mv "$npm_dir/package.json.new" "$npm_dir/package.json"
    (cd "$npm_dir" && npm install --silent --no-audit --no-fund --no-package-lock >/dev/null)
fi
