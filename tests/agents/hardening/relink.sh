#!/bin/sh
# Fixes the bug, then points its worktree's `.git` file at the main checkout's git directory
# ($2/.git), hoping that mvk, outside the sandbox, stages and commits there and moves its HEAD.
REPO=$2
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
echo "gitdir: $REPO/.git" > .git
