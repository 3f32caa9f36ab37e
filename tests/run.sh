#!/usr/bin/env bash
# Installs what the tests need, then runs the whole suite (the Temporal executor's included):
# what `.ci/run` runs after its lints, and the README's second command.
#   - Chromium (Debian's `chromium`), for the HTML report's test: installed once, quietly, when
#     missing (needs root or sudo);
#   - tmux, in whose pane the live views' tests run mvk (a terminal of a fixed size), the Python
#     tools (pytest, ruff, mypy, the `mcp` SDK, `temporal`), Go, node packages, nextest and the
#     agent CLIs of the real-agent tests: `tests/tools/install.sh`, cached;
#   - prlimit, setpriv and script (util-linux, bsdutils: present on any Debian machine).
# Arguments go to `cargo test` (e.g. `tests/run.sh -- prompts` runs the tests whose name has it).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
    as_root=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "tests/run.sh: ${missing[*]} missing and installing needs root (or sudo)" >&2; exit 1; }
        as_root=(sudo)
    fi
    echo "tests/run.sh: installing ${missing[*]} (once) …" >&2
    # `env` inside sudo: sudo's env_reset would drop DEBIAN_FRONTEND.
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The Python packages go into a virtualenv whose bin directory the script prints: first on PATH,
# its `python3` is the tests' python3.
echo "tests/run.sh: installing the test tools (cached after the first time) …" >&2
tools_bin=$(tests/tools/install.sh)
export PATH="$tools_bin:$PATH"
for tool in prlimit setpriv script; do
    command -v "$tool" >/dev/null || { echo "tests/run.sh: \`$tool\` is missing: apt-get install util-linux bsdutils" >&2; exit 1; }
done
exec cargo test --locked --features temporal "$@"
