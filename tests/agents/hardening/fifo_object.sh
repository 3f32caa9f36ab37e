#!/bin/sh
# Fixes the bug and commits it, then plants a FIFO among its loose objects (and a symlink to
# one): libgit2 opens a loose object to read its header, and opening a FIFO no one writes to
# blocks for ever.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
git add -A && git commit -qm "the fix"
mkdir -p "$GIT_OBJECT_DIRECTORY/ab" "$GIT_OBJECT_DIRECTORY/cd"
mkfifo "$GIT_OBJECT_DIRECTORY/ab/cdef0123456789abcdef0123456789abcdef01"
mkfifo "$TMPDIR/fifo"
ln -s "$TMPDIR/fifo" "$GIT_OBJECT_DIRECTORY/cd/ef0123456789abcdef0123456789abcdef0123"
