#!/bin/sh
# Fixes the bug and commits it, then replaces `info` in its own object directory with a symlink
# to $1/victim, hoping that mvk, outside the sandbox, deletes `alternates` there while it
# cleans the directory up.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
git add -A && git commit -qm "the fix"
rm -rf "$GIT_OBJECT_DIRECTORY/info"
ln -s "$1/victim" "$GIT_OBJECT_DIRECTORY/info"
