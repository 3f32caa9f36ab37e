#!/bin/sh
# Fixes the bug, rewrites its worktree's registration (`gitdir` in its own git directory) to name
# the main checkout ($2/.git), then stands in the way of mvk putting it back: a directory where
# mvk used to write the new `gitdir` (`gitdir.mvk-new`), and its git directory made read-only.
REPO=$2
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
admin=$(git rev-parse --git-dir)
echo "$REPO/.git" > "$admin/gitdir"
mkdir "$admin/gitdir.mvk-new"
chmod a-w "$admin"
