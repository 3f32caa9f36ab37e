#!/usr/bin/env bash
# Runs an example's loop end to end: lays examples/NAME out as a git repository of its own in a
# temporary directory (an example inside mvk's repository is not a repository), runs
# `mvk apply loops/fix.kdl` there, then shows the run's STATUS.md and the new commits.
# Needs cargo, git and sh, and what the example's gates run: `examples/NAME/REQUIRES` lists a
# command per line that must succeed first (the Python examples need pytest and ruff); when one
# fails, nothing runs and the script says what to install (exit 69). Otherwise it exits with
# mvk's exit code (0: accepted).
# Usage: examples/run.sh NAME      e.g. examples/run.sh slugify
# Environment: MVK_BIN=PATH uses that mvk instead of building one; MVK_EXAMPLE_DIR=DIR lays the
# example out in DIR (which must not hold a repo/ yet) instead of a fresh temporary directory.
set -euo pipefail

if [ $# -ne 1 ]; then
    names=$(cd "$(dirname "$0")" && for f in */loops/fix.kdl; do printf '%s ' "${f%%/*}"; done)
    echo "usage: $0 NAME   (one of: $names)" >&2
    exit 64
fi
name=$1
root=$(cd "$(dirname "$0")/.." && pwd)
example=$root/examples/$name
if [ ! -f "$example/loops/fix.kdl" ]; then
    echo "$0: $example/loops/fix.kdl not found" >&2
    exit 64
fi

# What the example's gates run must be here before anything is built or run: a missing tool would
# otherwise show only as a failing gate, several attempts later.
if [ -f "$example/REQUIRES" ]; then
    while IFS= read -r check || [ -n "$check" ]; do
        [ -n "$check" ] || continue
        if ! sh -c "$check" >/dev/null 2>&1; then
            echo "$0: examples/$name needs \`$check\` to work, and it does not here." >&2
            echo "  install the tools: pip install pytest ruff (or: export PATH=\"\$($root/tests/tools/install.sh):\$PATH\")" >&2
            exit 69
        fi
    done < "$example/REQUIRES"
fi

if [ -n "${MVK_BIN:-}" ]; then
    mvk=$MVK_BIN
else
    # Cargo's own progress: the first build takes minutes, and a silent one looks hung.
    echo "building mvk (the first build takes a few minutes) …" >&2
    (cd "$root" && cargo build)
    target=${CARGO_TARGET_DIR:-target}
    case $target in /*) ;; *) target=$root/$target ;; esac
    mvk=$target/debug/mvk
fi

dir=${MVK_EXAMPLE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/mvk-example-$name.XXXXXX")}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
repo=$dir/repo
if [ -e "$repo" ]; then
    echo "$0: $repo exists already; choose another MVK_EXAMPLE_DIR" >&2
    exit 64
fi

# Git settings of the caller's own repository (a hook, a test harness) must not leak in.
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_COMMON_DIR
mkdir -p "$repo"
cp -R "$example/." "$repo/"
rm -rf "$repo/target"
git -C "$repo" init -q -b main
git -C "$repo" config user.name "mvk example"
git -C "$repo" config user.email "example@mvk.invalid"
git -C "$repo" config commit.gpgsign false
git -C "$repo" add -A
git -C "$repo" commit -q -m "$name: the example project"

# Worktrees and cargo's build output stay inside $dir: nothing lands in mvk's checkout or ~/.cache.
export MVK_WORKTREE_ROOT=$dir/worktrees
export CARGO_TARGET_DIR=$dir/target
echo "repo: $repo"

status=0
(cd "$repo" && "$mvk" apply loops/fix.kdl) || status=$?

echo
if [ -f "$repo/.mvk/STATUS.md" ]; then
    cat "$repo/.mvk/STATUS.md"
else
    echo "(no $repo/.mvk/STATUS.md)"
fi
echo
git -C "$repo" log --oneline -3
echo
echo "exit code: $status   (look around: cd $repo; events in .mvk/runs/)"
exit "$status"
