#!/bin/sh
# Attempt 1: commits a fix of its own to the main repository ($1) while it works, then fixes
# the same line differently in its worktree, so landing conflicts. It records main's new tip in
# $2/main_tip. Later attempts add NOTES.md only.
set -eu
if [ "$MVK_ATTEMPT" = 1 ]; then
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(( $1 + $2 )); } # fixed on main' > "$1/src/calc.sh"
    git -C "$1" commit -q -am "main: fix add meanwhile"
    git -C "$1" rev-parse HEAD > "$2/main_tip"
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1+$2)); } # fixed by the agent' > src/calc.sh
else
    echo "checked add() after main's fix" > NOTES.md
fi
